package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
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
		a, b := pipeline.NewWithStore(st), pipeline.NewWithStore(st)
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
			{"unknown call", pipeline.NewWithStore(st), result("y")},
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
		if _, err := pipeline.NewWithStore(st).Publish(ctx, "c", result("z")); err != nil {
			t.Fatalf("result of the newest round: %v", err)
		}
	})
}

func TestPublishAsyncAndReadYourWrites(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(st)
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
		c := pipeline.NewWithStore(st)
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

func TestRequestCompactionIsBusyWhilePending(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(st)
		r1, err := c.RequestCompaction(ctx, "busy", "keep the numbers")
		if err != nil || r1.Status != pipeline.StatusQueued || r1.RequestID == "" {
			t.Fatalf("first request = %+v, %v; want queued with an id", r1, err)
		}
		r2, err := c.RequestCompaction(ctx, "busy", "other instructions")
		if err != nil || r2.Status != pipeline.StatusBusy {
			t.Fatalf("second request = %+v, %v; want busy", r2, err)
		}
		// An outcome published before the wait starts is still found.
		ev := schemas.Event{Type: schemas.EventDeclined, Conversation: "busy", RequestID: r1.RequestID, At: time.Now()}
		if err := st.PublishEvent(ctx, ev); err != nil {
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
