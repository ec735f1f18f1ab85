package service

import (
	"context"

	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/schemas"
)

// traceContext is the W3C trace context propagator (traceparent, tracestate); a header
// that does not parse is no trace.
var traceContext = propagation.TraceContext{}

// headerCarrier reads a service request's headers for the propagator.
type headerCarrier micro.Headers

func (h headerCarrier) Get(key string) string { return micro.Headers(h).Get(key) }
func (headerCarrier) Set(string, string)      {}
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// enqueue queues a manual compaction. With traces on, it is a trace of its own, under
// the caller's span when its request carried a traceparent, and the request's headers
// carry it to the worker, as the trigger's requests do.
func (s *Service) enqueue(ctx context.Context, req micro.Request, r schemas.Request) (uint64, error) {
	if s.cfg.Tracer == nil {
		return s.store.Queue().Enqueue(ctx, r)
	}
	parent := traceContext.Extract(context.Background(), headerCarrier(req.Headers()))
	_, span := s.cfg.Tracer.Tracer("github.com/compactor/compactor/pipeline/service").Start(parent, "compactor.request",
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("compactor.conversation", r.Conversation), attribute.String("compactor.request_id", r.RequestID),
			attribute.String("compactor.trigger", r.Trigger), attribute.String("messaging.system", "nats")))
	defer span.End()
	h := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpan(ctx, span), h)
	seq, err := s.store.Queue().EnqueueWithHeader(ctx, r, h)
	if err != nil {
		span.SetStatus(codes.Error, "queue the request")
	}
	return seq, err
}
