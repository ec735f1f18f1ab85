package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

func newRequest(conv string) schemas.Request {
	return schemas.Request{RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerManual,
		Reason: "test", RequestedAt: time.Now().UTC(), UpToSeq: 1}
}

// A request carries the headers it was queued with to the worker that takes it; a
// header that could break the header block, or is one of the server's, is refused and
// nothing is queued.
func TestEnqueueWithHeader(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		if _, err := st.Queue().EnqueueWithHeader(ctx, newRequest("traced"), map[string]string{"traceparent": tp, "tracestate": "k=v"}); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []map[string]string{
			{"traceparent": "00-x\r\nNats-Expected-Stream: OTHER"},
			{"Nats-Msg-Id": "forced"},
			{"trace parent": "x"},
			{"traceparent": string(make([]byte, 2000))},
		} {
			if _, err := st.Queue().EnqueueWithHeader(ctx, newRequest("refused"), bad); err == nil {
				t.Errorf("header %q queued; want it refused", bad)
			}
		}
		if p, err := st.Queue().Pending(ctx, "refused"); err != nil || p != nil {
			t.Errorf("a request with a refused header is pending: %+v, %v", p, err)
		}
		q, err := st.Queue().Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := q.Next(ctx, 5*time.Second)
		if err != nil || d == nil {
			t.Fatalf("no request delivered: %v", err)
		}
		if got := d.Header("traceparent"); got != tp {
			t.Errorf("traceparent %q; want %q", got, tp)
		}
		if got := d.Header("tracestate"); got != "k=v" {
			t.Errorf("tracestate %q; want k=v", got)
		}
		keys := map[string]bool{}
		for _, k := range d.HeaderKeys() {
			keys[k] = true
		}
		if !keys["traceparent"] || !keys["tracestate"] {
			t.Errorf("HeaderKeys() = %v; want traceparent and tracestate among them", d.HeaderKeys())
		}
		_ = d.Ack()
	})
}

// Ping answers while JetStream does, and fails at once, without waiting for a timeout,
// while the connection is down. The backlogs count what a consumer has not finished:
// waiting, and delivered without an ack.
func TestPingAndBacklog(t *testing.T) {
	ns := jstest.ServerWith(t, nil)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	if err := st.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	for _, conv := range []string{"a", "b", "c"} {
		if _, err := st.Queue().Enqueue(ctx, newRequest(conv)); err != nil {
			t.Fatal(err)
		}
	}
	q, err := st.Queue().Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := q.Next(ctx, 5*time.Second); err != nil || d == nil {
		t.Fatalf("no request delivered: %v", err)
	}
	b, err := st.Queue().Backlog(ctx)
	if err != nil || b != (jetstream.Backlog{Waiting: 2, InProgress: 1}) {
		t.Errorf("RequestBacklog = %+v, %v; want 2 waiting, 1 in progress", b, err)
	}
	for _, conv := range []string{"a", "b"} {
		msg := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")}
		m, _ := msg.Encode()
		if _, err := st.Chat().Publish(ctx, conv, m, ""); err != nil {
			t.Fatal(err)
		}
	}
	b, err = st.Chat().Backlog(ctx, st.Config().Partitions())
	if err != nil || b != (jetstream.Backlog{Waiting: 2}) {
		t.Errorf("TriggerBacklog = %+v, %v; want 2 waiting", b, err)
	}

	restart := jstest.Stop(t, ns)
	until(t, "the client to notice the server is gone", func() bool { return !nc.IsConnected() })
	// ErrDisconnected comes from the connection's status, before any request: it is the
	// answer at once (a request would end in a timeout or a context error instead).
	if err := st.Ping(context.Background()); !errors.Is(err, jetstream.ErrDisconnected) {
		t.Errorf("Ping with the server away: %v; want ErrDisconnected", err)
	}
	if _, err := st.Queue().Backlog(context.Background()); !errors.Is(err, jetstream.ErrDisconnected) {
		t.Errorf("RequestBacklog with the server away: %v; want ErrDisconnected", err)
	}
	restart()
	until(t, "the client to reconnect", nc.IsConnected)
	if err := st.Ping(ctx); err != nil {
		t.Errorf("Ping after the server is back: %v", err)
	}
}

// until polls cond until it holds, failing the test after 30 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
