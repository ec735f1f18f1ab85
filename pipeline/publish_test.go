package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Crack 7: an asynchronous publish whose ack never comes (the connection went quiet,
// then closed) still yields its outcome: the caller's context ends the wait.
func TestPublishAsyncAlwaysResolves(t *testing.T) {
	srv := jstest.Server(t)
	jstest.Provision(t, jstest.Conn(t, srv))
	relay := jstest.NewRelay(t, srv.NATS().Addr().String())
	nc, err := nats.Connect(relay.URL(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := pipeline.New(ctxT(t), nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
	ack, err := c.PublishAsync(ctxT(t), "quiet", msg)
	if err != nil {
		t.Fatal(err)
	}
	if a := <-ack; a.Err != nil || a.Seq == 0 {
		t.Fatalf("first publish = %+v; want stored", a)
	}
	relay.Mute(true)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	ack, err = c.PublishAsync(ctx, "quiet", msg)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close() // nats.go resolves no pending future once the connection is closed
	select {
	case a := <-ack:
		if !errors.Is(a.Err, context.DeadlineExceeded) {
			t.Fatalf("publish without an ack = %+v; want the caller's deadline", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PublishAsync never yielded an outcome")
	}
}

// PublishAsync's outcomes are waited for in publish order by one goroutine of the
// client's; a publish whose context ends still yields at once when an earlier one waits
// for an ack that does not come (it would wait up to jetstream.PublishAsyncTimeout).
func TestPublishAsyncYieldsAtItsContextBehindAWaitingPublish(t *testing.T) {
	srv := jstest.Server(t)
	jstest.Provision(t, jstest.Conn(t, srv))
	relay := jstest.NewRelay(t, srv.NATS().Addr().String())
	nc, err := nats.Connect(relay.URL(), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := pipeline.New(ctxT(t), nc)
	if err != nil {
		t.Fatal(err)
	}
	msg := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
	relay.Mute(true)
	waiting, err := c.PublishAsync(context.Background(), "behind", msg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	later, err := c.PublishAsync(ctx, "behind", msg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-later:
		if !errors.Is(a.Err, context.DeadlineExceeded) {
			t.Fatalf("later publish = %+v; want its deadline", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish whose context ended waited behind an earlier one")
	}
	select {
	case a := <-waiting:
		t.Fatalf("the publish without an ack yielded %+v", a)
	default:
	}
}

// Many asynchronous publishes in flight at once, over several conversations: each
// yields its own outcome, and the sequences follow the publish order.
func TestPublishAsyncOutcomesFollowThePublishOrder(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		msgs := batchOf(5, 20, "async")
		acks := make([]<-chan pipeline.PubAck, len(msgs))
		for i, bm := range msgs {
			a, err := c.PublishAsync(ctxT(t), bm.Conv, bm.Message)
			if err != nil {
				t.Fatal(err)
			}
			acks[i] = a
		}
		seqs := make([]uint64, len(msgs))
		for i, a := range acks {
			r := <-a
			if r.Err != nil || (i > 0 && r.Seq <= seqs[i-1]) {
				t.Fatalf("publish %d = %+v; want stored after seq %d", i, r, seqs[max(i-1, 0)])
			}
			seqs[i] = r.Seq
		}
		storedAsBatch(t, st, msgs, seqs)
	})
}

// A tool result from a client that did not see its call (another producer, or this one
// after a failed publish made it forget) is checked against the stream, and that read
// may be answered by a copy of CHAT that does not hold the call yet: a replica catching
// up during a failover (the cluster soak found a valid tool result refused that way,
// for good, with ErrInvalid). The check reads on from the stream leader instead. The
// lagging copy here is a mirror that answers CHAT's direct gets and holds another
// conversation only.
func TestToolResultIsCheckedPastALaggingCopy(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	a := pipeline.NewWithStore(nc, st)
	for _, m := range []schemas.Message{{Role: schemas.RoleUser, Content: schemas.Text("read a.go")}, call("c1")} {
		if _, err := a.Publish(ctx, "lag", m); err != nil {
			t.Fatal(err)
		}
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.Config()
	mirror, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "LAGGING",
		Mirror: &natsjs.StreamSource{Name: cfg.ChatStream, FilterSubject: "chat.other.msg"}})
	if err != nil {
		t.Fatal(err)
	}
	// A message of its own makes the mirror answer CHAT's direct gets; then CHAT
	// stops answering them itself.
	if _, err := a.Publish(ctx, "other", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mirror to hold its message", func() bool {
		info, err := mirror.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	chat, err := js.Stream(ctx, cfg.ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	sc := chat.CachedInfo().Config
	sc.AllowDirect = false
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "direct gets to be answered by the mirror only", func() bool {
		r, err := nc.Request("$JS.API.DIRECT.GET."+cfg.ChatStream, []byte(`{"last_by_subj":"chat.lag.msg"}`), time.Second)
		return err == nil && r.Header.Get("Status") == "404"
	})
	b := pipeline.NewWithStore(nc, st) // it did not see the call
	if _, err := b.Publish(ctx, "lag", result("c1")); err != nil {
		t.Fatalf("valid tool result refused: %v", err)
	}
}

// eventually polls cond every 20ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
