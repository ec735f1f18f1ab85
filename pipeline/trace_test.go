package pipeline_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// A publish made inside a span carries its trace context (traceparent) on the chat
// message, for the trigger to link the compaction it leads to; one made outside any
// span carries none. Publish, PublishAsync and PublishBatch alike.
func TestPublishCarriesTheCallersTrace(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := pipeline.NewWithStore(nc, st)
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled})
		traced := trace.ContextWithSpanContext(ctxT(t), sc)
		want := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")}
		if _, err := c.Publish(traced, "traced", m, pipeline.MsgID("a")); err != nil {
			t.Fatal(err)
		}
		ack, err := c.PublishAsync(traced, "traced", m)
		if err != nil {
			t.Fatal(err)
		}
		a := <-ack
		if a.Err != nil {
			t.Fatal(a.Err)
		}
		if _, err := c.PublishBatch(traced, []pipeline.BatchMsg{{Conv: "traced", Message: m}}, pipeline.BatchOptions{}); err != nil {
			t.Fatal(err)
		}
		plain, err := c.Publish(context.Background(), "traced", m)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := st.Chat().LoadLeader(ctxT(t), "traced", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range msgs {
			got := sm.Header.Get("traceparent")
			switch {
			case sm.Seq == plain && got != "":
				t.Errorf("message %d published outside a span carries traceparent %q", sm.Seq, got)
			case sm.Seq != plain && got != want:
				t.Errorf("message %d carries traceparent %q; want %q", sm.Seq, got, want)
			}
		}
		if len(msgs) != 4 {
			t.Fatalf("%d messages stored; want 4", len(msgs))
		}
	})
}
