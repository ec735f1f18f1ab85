package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func call(id string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function",
		Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
}

func result(id string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text("ok")}
}

func TestNewWithoutProvisionNeedsARunningCompactor(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	if _, err := pipeline.New(ctxT(t), nc); err == nil {
		t.Fatal("New on a bare server succeeded; want an error saying no compactor provisioned it")
	}
}

func TestToolResultsArePairedAcrossClients(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		a, b := pipeline.NewWithStore(nc, st), pipeline.NewWithStore(nc, st)
		if _, err := a.Publish(ctx, "c", call("x")); err != nil {
			t.Fatal(err)
		}
		// b never saw the call: it reads the stream.
		if _, err := b.Publish(ctx, "c", result("x")); err != nil {
			t.Fatalf("result from another client: %v", err)
		}
		for _, tc := range []struct {
			name string
			c    *pipeline.Client
			m    schemas.Message
		}{
			{"answered twice, same client", b, result("x")},
			{"unknown call", pipeline.NewWithStore(nc, st), result("y")},
		} {
			if _, err := tc.c.Publish(ctx, "c", tc.m); !errors.Is(err, schemas.ErrInvalid) || !errors.Is(err, pipeline.ErrToolResultWithoutCall) {
				t.Errorf("%s: got %v; want ErrInvalid and ErrToolResultWithoutCall", tc.name, err)
			}
		}
		// A client whose view is stale (it published the call, another client answered it)
		// lets a duplicate through; readers report and skip it.
		dup, err := a.Publish(ctx, "c", result("x"))
		if err != nil {
			t.Fatalf("stale client: %v", err)
		}
		cx, err := a.Context(ctx, "c")
		if err != nil {
			t.Fatal(err)
		}
		if len(cx.Skipped) != 1 || cx.Skipped[0].Seq != dup {
			t.Fatalf("duplicate result not reported: %+v", cx.Skipped)
		}
		// A newer round closes the older one.
		if _, err := a.Publish(ctx, "c", call("z")); err != nil {
			t.Fatal(err)
		}
		if _, err := pipeline.NewWithStore(nc, st).Publish(ctx, "c", result("z")); err != nil {
			t.Fatalf("result of the newest round: %v", err)
		}
	})
}

func TestPublishAsyncAndReadYourWrites(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		var acks []<-chan pipeline.PubAck
		for i := 0; i < 50; i++ {
			ch, err := c.PublishAsync(ctx, "async", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("m")})
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, ch)
		}
		var last uint64
		for _, ch := range acks {
			a := <-ch
			if a.Err != nil {
				t.Fatal(a.Err)
			}
			last = max(last, a.Seq)
		}
		cx, err := c.Context(ctx, "async", pipeline.AtLeastSeq(last))
		if err != nil {
			t.Fatal(err)
		}
		if len(cx.Messages) != 50 || cx.Seqs[49] != last {
			t.Fatalf("read %d messages ending at %d; want 50 ending at %d", len(cx.Messages), cx.Seqs[len(cx.Seqs)-1], last)
		}
		if _, err := c.Context(ctx, "async", pipeline.AtLeastSeq(last+100)); !errors.Is(err, pipeline.ErrNotCovered) {
			t.Fatalf("read of a sequence never written: got %v; want ErrNotCovered", err)
		}
	})
}

func TestContextStripsMetadataUnlessRaw(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi"), Tokens: 7, Meta: map[string]string{"pin": "true"}}
		seq, err := c.Publish(ctx, "meta", m, pipeline.MsgID("one"))
		if err != nil {
			t.Fatal(err)
		}
		if again, err := c.Publish(ctx, "meta", m, pipeline.MsgID("one")); err != nil || again != seq {
			t.Fatalf("idempotent publish got %d, %v; want %d", again, err, seq)
		}
		cx, _ := c.Context(ctx, "meta")
		if len(cx.Messages) != 1 || cx.Messages[0].Tokens != 0 || cx.Messages[0].Meta != nil {
			t.Fatalf("stripped read = %+v", cx.Messages)
		}
		raw, _ := c.Context(ctx, "meta", pipeline.Raw())
		if raw.Messages[0].Tokens != 7 || raw.Messages[0].Meta["pin"] != "true" {
			t.Fatalf("raw read lost metadata: %+v", raw.Messages[0])
		}
	})
}

// startService runs the compactor service on st's connection until the test ends.
func startService(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
	t.Helper()
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{}, nc, st, basePolicies{r}, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := nc.Request("compactor.status", nil, time.Second); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("compactor service did not start: %v", err)
		}
	}
}

// basePolicies gives every conversation the resolver's base settings.
type basePolicies struct{ r *policy.Resolver }

func (p basePolicies) Settings(context.Context, string) (policy.Settings, error) {
	return p.r.Base(), nil
}

func TestRequestCompactionIsBusyWhilePending(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		startService(t, nc, st)
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctx, "busy", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("count to ten")}); err != nil {
			t.Fatal(err)
		}
		r1, err := c.RequestCompaction(ctx, "busy", "keep the numbers")
		if err != nil || r1.Status != pipeline.StatusQueued || r1.RequestID == "" {
			t.Fatalf("first request = %+v, %v; want queued with an id", r1, err)
		}
		r2, err := c.Compact(ctx, "busy", pipeline.Instructions("other instructions"))
		if err != nil || r2.Status != pipeline.StatusBusy || r2.RequestID != r1.RequestID || !strings.Contains(r2.Error, "NOT queued") {
			t.Fatalf("second request = %+v, %v; want busy naming the pending request and saying the instructions were not queued", r2, err)
		}
		// An outcome published before the wait starts is still found.
		ev := schemas.Event{Type: schemas.EventDeclined, Conversation: "busy", RequestID: r1.RequestID, At: time.Now()}
		if err := st.Events().Publish(ctx, ev); err != nil {
			t.Fatal(err)
		}
		got, err := c.WaitForOutcome(ctx, "busy", r1.RequestID)
		if err != nil || got.Type != schemas.EventDeclined {
			t.Fatalf("WaitForOutcome = %+v, %v; want the declined event", got, err)
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := c.WaitForOutcome(short, "busy", "someone-else"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait for another request's outcome: got %v; want a deadline", err)
		}
	})
}

func TestCompactWaitsForTheOutcome(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		startService(t, nc, st)
		requested := make(chan *nats.Msg, 8)
		sub, err := nc.ChanSubscribe("compact.event.waited", requested)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		worker := make(chan struct{})
		defer func() { <-worker }()
		go func() {
			defer close(worker)
			select { // the service queued the request: play the worker
			case <-requested:
			case <-ctx.Done():
				return
			}
			v := &schemas.Result{SchemaVersion: 1, Conversation: "waited", Generation: 1, Summary: "short",
				TailStartSeq: 1, RequestID: "job-1", CreatedAt: time.Now().UTC()}
			if _, err := st.Results().Put(ctx, v, 0); err != nil {
				t.Error(err)
			}
			_ = st.Events().Publish(ctx, schemas.Event{Type: schemas.EventCompleted, Conversation: "waited", RequestID: "job-1", Generation: 1, At: time.Now()})
		}()
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctx, "waited", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}); err != nil {
			t.Fatal(err)
		}
		r, err := c.Compact(ctx, "waited", pipeline.RequestID("job-1"), pipeline.Instructions("keep it short"), pipeline.Wait(10*time.Second))
		if err != nil || r.Status != pipeline.StatusCompleted || r.RequestID != "job-1" || r.Result == nil || r.Result.Summary != "short" {
			t.Fatalf("Compact with Wait = %+v, %v; want completed with the value", r, err)
		}
	})
}

func TestCompactErrors(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Compact(ctx, "c"); !errors.Is(err, pipeline.ErrNoService) || !strings.Contains(err.Error(), "compactor serve") {
			t.Fatalf("Compact without a service: %v; want ErrNoService", err)
		}
		if _, err := c.RequestCompaction(ctx, "c", ""); !errors.Is(err, pipeline.ErrNoService) {
			t.Fatalf("RequestCompaction without a service: %v; want ErrNoService", err)
		}
		startService(t, nc, st)
		_, err := c.Compact(ctx, "c", pipeline.RequestID("not/an/id"))
		var se *pipeline.ServiceError
		if !errors.Is(err, schemas.ErrInvalid) || !errors.As(err, &se) || se.Code != 400 || !strings.Contains(se.Description, "request_id") {
			t.Fatalf("Compact with a bad request id: %v; want a 400 naming request_id", err)
		}
		if _, err := c.Compact(ctx, "bad id"); !errors.Is(err, schemas.ErrInvalid) {
			t.Fatalf("Compact with a bad conversation id: %v", err)
		}
	})
}

func TestContextWaitsForAPendingCompactionOnlyWhenAsked(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		for range 3 {
			if _, err := c.Publish(ctx, "w", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("m")}); err != nil {
				t.Fatal(err)
			}
		}
		req := schemas.Request{RequestID: "r1", Conversation: "w", Trigger: schemas.TriggerManual, RequestedAt: time.Now()}
		if _, err := st.Queue().Enqueue(ctx, req); err != nil {
			t.Fatal(err)
		}
		now, err := c.Context(ctx, "w")
		if err != nil || now.Generation != 0 {
			t.Fatalf("a plain read = generation %d, %v; want the current context at once (generation 0)", now.Generation, err)
		}
		// A worker finishes the request once the reader waits for it (its watch of the
		// events is a consumer on COMPACT_EVENTS): a read that did not wait would have
		// returned generation 0 by then.
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				s, err := js.Stream(ctx, st.Config().EventsStream)
				if err == nil && s.CachedInfo().State.Consumers > 0 {
					break
				}
				if ctx.Err() != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			v := &schemas.Result{SchemaVersion: 1, Conversation: "w", Generation: 1, Summary: "s", TailStartSeq: 3, CoveredThroughSeq: 2, RequestID: "r1"}
			if _, err := st.Results().Put(ctx, v, 0); err != nil {
				t.Error(err)
			}
			_ = st.Events().Publish(ctx, schemas.Event{Type: schemas.EventCompleted, Conversation: "w", RequestID: "r1", Generation: 1, At: time.Now()})
		}()
		waited, err := c.Context(ctx, "w", pipeline.WaitPending(10*time.Second))
		if err != nil || waited.Generation != 1 || !waited.HasSummary {
			t.Fatalf("a read with WaitPending = generation %d, %v; want the pending compaction's result", waited.Generation, err)
		}
	})
}

// A tool result whose publish was stored but whose ack was lost is retried with the
// same MsgID: the stream answers with the first copy's sequence instead of the client
// refusing it as answered twice.
func TestRetriedToolResultWithMsgIDIsDeduplicated(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		if _, err := c.Publish(ctx, "r", call("x"), pipeline.MsgID("m1")); err != nil {
			t.Fatal(err)
		}
		first, err := c.Publish(ctx, "r", result("x"), pipeline.MsgID("m2"))
		if err != nil {
			t.Fatal(err)
		}
		for _, client := range []*pipeline.Client{c, pipeline.NewWithStore(nc, st)} {
			again, err := client.Publish(ctx, "r", result("x"), pipeline.MsgID("m2"))
			if err != nil || again != first {
				t.Fatalf("retry = %d, %v; want the first copy's sequence %d", again, err, first)
			}
		}
		if _, err := c.Publish(ctx, "r", result("x")); !errors.Is(err, pipeline.ErrToolResultWithoutCall) {
			t.Fatalf("a second answer without MsgID: got %v; want it refused", err)
		}
		es, _ := st.Chat().LoadEntries(ctx, "r", 0, 0)
		if len(es) != 2 {
			t.Fatalf("%d messages stored; want 2", len(es))
		}
	})
}
