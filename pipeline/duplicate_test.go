package pipeline_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// A publish whose MsgID the stream already had for another message is reported as a
// duplicate naming the other message's sequence, not returned as if that sequence were
// this message's: nothing of it was stored. A retry of the same message is still
// answered with its first copy's sequence, synchronous or not.
func TestPublishReportsAnotherMessageWithTheSameID(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		first := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("the first message")}
		other := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("another message")}
		seq, err := c.Publish(ctx, "dup", first, pipeline.MsgID("same"))
		if err != nil {
			t.Fatal(err)
		}
		if again, err := c.Publish(ctx, "dup", first, pipeline.MsgID("same")); err != nil || again != seq {
			t.Fatalf("retry of the same message = %d, %v; want %d", again, err, seq)
		}
		for _, tc := range []struct {
			name string
			conv string
			m    schemas.Message
		}{
			{"another message", "dup", other},
			{"the same message in another conversation", "dup-2", first},
		} {
			got, err := c.Publish(ctx, tc.conv, tc.m, pipeline.MsgID("same"))
			var de *pipeline.DuplicateError
			if !errors.Is(err, pipeline.ErrDuplicate) || !errors.As(err, &de) || de.Seq != seq || got != 0 {
				t.Fatalf("%s: Publish = %d, %v; want 0 and a duplicate error naming seq %d", tc.name, got, err, seq)
			}
			ch, err := c.PublishAsync(ctx, tc.conv, tc.m, pipeline.MsgID("same"))
			if err != nil {
				t.Fatal(err)
			}
			if ack := <-ch; !errors.Is(ack.Err, pipeline.ErrDuplicate) || ack.Seq != 0 {
				t.Fatalf("%s: PublishAsync = %+v; want a duplicate error", tc.name, ack)
			}
		}
		ch, err := c.PublishAsync(ctx, "dup", first, pipeline.MsgID("same"))
		if err != nil {
			t.Fatal(err)
		}
		if ack := <-ch; ack.Err != nil || ack.Seq != seq {
			t.Fatalf("async retry of the same message = %+v; want seq %d", ack, seq)
		}
		cx, err := c.Context(ctx, "dup")
		if err != nil || len(cx.Messages) != 1 {
			t.Fatalf("read %d messages, %v; want the first only", len(cx.Messages), err)
		}
	})
}
