package pipeline_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Every publish names CHAT as the stream it expects: when another stream captures the
// conversations' subjects (CHAT was deleted and a stream of someone else's took its
// subjects), each way of publishing, with a MsgID or without, is refused and that
// stream stores nothing. The publish path sets this header itself, once per stream,
// instead of through nats.go's publish options; the test keeps its meaning.
func TestPublishIsRefusedByAnotherStream(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		hello := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
		if _, err := c.Publish(ctx, "moved", hello); err != nil {
			t.Fatal(err)
		}
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.Config()
		if err := js.DeleteStream(ctx, cfg.ChatStream); err != nil {
			t.Fatal(err)
		}
		other, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "OTHER", Subjects: []string{cfg.ChatWildcard()}})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"", "an-id"} {
			var opts []pipeline.PublishOption
			if id != "" {
				opts = append(opts, pipeline.MsgID(id))
			}
			if _, err := c.Publish(ctx, "moved", hello, opts...); err == nil {
				t.Errorf("Publish (id %q) to a subject OTHER captures succeeded", id)
			}
			ch, err := c.PublishAsync(ctx, "moved", hello, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if a := <-ch; a.Err == nil {
				t.Errorf("PublishAsync (id %q) to a subject OTHER captures = %+v", id, a)
			}
			_, err = c.PublishBatch(ctx, []pipeline.BatchMsg{{Conv: "moved", Message: hello, MsgID: id}}, pipeline.BatchOptions{})
			if be := (*pipeline.BatchError)(nil); !errors.As(err, &be) || be.Index != 0 {
				t.Errorf("PublishBatch (id %q) to a subject OTHER captures: %v", id, err)
			}
		}
		info, err := other.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 0 {
			t.Fatalf("OTHER stored %d messages; want none", info.State.Msgs)
		}
	})
}
