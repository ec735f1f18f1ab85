package triggers_test

import (
	"context"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A request the trigger queues starts a trace: its span (a root) is what the request's
// traceparent header names, so the worker continues it, and it links to the span of the
// chat message that put the conversation over its budget when that message's
// publisher sent a traceparent (even one spelled Traceparent).
func TestRequestStartsATraceLinkedToTheChatMessage(t *testing.T) {
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	nc, st := setup(t)
	rec := tracetest.NewSpanRecorder()
	cfg := testConfig()
	cfg.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	startWith(t, st, cfg)
	for range 7 {
		publish(t, st, "traced", text(1600))
	}
	// The eighth message, over the threshold, comes with its publisher's trace.
	js := testJS(t, nc)
	msg := text(1600)
	data, _ := msg.Encode()
	m := &nats.Msg{Subject: must(st.Config().ChatSubject("traced")), Data: data, Header: nats.Header{}}
	m.Header.Set("Traceparent", "00-"+traceID+"-"+spanID+"-01")
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	handled(t, nc, st, ack.Sequence)

	var span sdktrace.ReadOnlySpan
	waitFor(t, "the request's span to end", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "compactor.request" {
				span = s
			}
		}
		return span != nil
	})
	if span == nil {
		t.Fatal("no compactor.request span")
	}
	if span.Parent().IsValid() || span.SpanKind() != trace.SpanKindProducer {
		t.Errorf("request span: parent %v, kind %s; want a root producer span", span.Parent(), span.SpanKind())
	}
	links := span.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID().String() != traceID || links[0].SpanContext.SpanID().String() != spanID {
		t.Fatalf("request span links %+v; want one to the chat message's span %s/%s", links, traceID, spanID)
	}
	for _, want := range []attribute.KeyValue{attribute.String("compactor.conversation", "traced"),
		attribute.String("compactor.trigger", "budget"), attribute.String("compactor.queue_result", "queued")} {
		if !slices.Contains(span.Attributes(), want) {
			t.Errorf("request span lacks %s=%s", want.Key, want.Value.String())
		}
	}
	stream, err := js.Stream(context.Background(), st.Config().RequestsStream)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := stream.GetLastMsgForSubject(context.Background(), must(st.Config().RequestSubject("traced")))
	if err != nil {
		t.Fatal(err)
	}
	h := propagation.MapCarrier{}
	for k, v := range rm.Header {
		h[k] = v[0]
	}
	carried := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), h))
	if carried.TraceID() != span.SpanContext().TraceID() || carried.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("the request carries %s/%s; want the request span %s/%s", carried.TraceID(), carried.SpanID(),
			span.SpanContext().TraceID(), span.SpanContext().SpanID())
	}
}
