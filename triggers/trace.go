package triggers

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// tracerName names the spans this package makes.
const tracerName = "github.com/compactor/compactor/triggers"

// traceContext is the W3C trace context propagator (traceparent, tracestate). What it
// reads from a chat message is checked: a header that does not parse is no trace.
var traceContext = propagation.TraceContext{}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// causeKey keys the span context of the chat message being handled in a context.
type causeKey struct{}

// withCause notes in ctx the trace of the chat message d, when its publisher sent one
// and traces are on: a request it leads to links to it.
func (t *Trigger) withCause(ctx context.Context, d *jetstream.Delivery) context.Context {
	if t.cfg.Tracer == nil {
		return ctx // the hot path reads no header for nothing
	}
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), d.Carrier()))
	if !sc.IsValid() {
		return ctx
	}
	return context.WithValue(ctx, causeKey{}, sc)
}

// startRequest starts the span of a request: the root of the compaction's trace, which
// the request's headers carry to the worker. It is linked to the publish of the chat
// message that led to it, not a child of it: the compaction is a trace of its own, and
// a publisher's trace context (any client may send one) is only referred to.
func (t *Trigger) startRequest(ctx context.Context, req schemas.Request, tokens int) (context.Context, trace.Span, map[string]string) {
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("compactor.conversation", req.Conversation),
			attribute.String("compactor.request_id", req.RequestID),
			attribute.String("compactor.trigger", req.Trigger),
			attribute.String("compactor.reason", req.Reason),
			attribute.Int64("compactor.up_to_seq", int64(req.UpToSeq)),
			attribute.Int("compactor.tokens", tokens),
		)}
	if sc, ok := ctx.Value(causeKey{}).(trace.SpanContext); ok {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc,
			Attributes: []attribute.KeyValue{attribute.String("compactor.link", "chat message")}}))
	}
	ctx, span := t.tracer.Start(ctx, "compactor.request", opts...)
	h := propagation.MapCarrier{}
	traceContext.Inject(ctx, h)
	return ctx, span, h
}

// endRequest ends a request's span with what the queue said.
func endRequest(span trace.Span, r RequestResult, err error) {
	span.SetAttributes(attribute.String("compactor.queue_result", string(r)))
	if err != nil && r == RequestError {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
