package summarizer

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
const tracerName = "github.com/compactor/compactor/summarizer"

// traceContext carries a trace across the work queue in W3C trace context headers
// (traceparent, tracestate). It checks what it reads: a header that does not parse is
// no trace context, so a hostile request only starts a trace of its own.
var traceContext = propagation.TraceContext{}

func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(tracerName)
}

// startJob starts the span of one delivery: a child of the span that queued the
// request when its headers carry one (the trigger's), a root otherwise.
func (p *Pool) startJob(ctx context.Context, d *jetstream.Delivery) (context.Context, trace.Span) {
	if d.MetadataErr == nil {
		ctx = traceContext.Extract(ctx, d.Carrier())
	}
	return p.tracer.Start(ctx, "compactor.compact", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", d.Subject),
			attribute.Int64("compactor.request_seq", int64(d.Seq)),
			attribute.Int64("compactor.attempt", int64(d.Attempt)),
		))
}

// endJob ends a delivery's span with its outcome.
func endJob(span trace.Span, j *job) {
	span.SetAttributes(attribute.String("compactor.outcome", string(j.outcome)),
		attribute.String("compactor.trigger", knownTrigger(j.req.Trigger)))
	if j.req.Conversation != "" {
		span.SetAttributes(attribute.String("compactor.conversation", j.req.Conversation),
			attribute.String("compactor.request_id", j.req.RequestID))
	}
	switch j.outcome {
	case OutcomeCompleted:
		span.SetAttributes(attribute.Int("compactor.tokens_before", j.tokensBefore),
			attribute.Int("compactor.tokens_after", j.tokensAfter), attribute.Bool("compactor.fallback", j.fallbackFor != nil))
	case OutcomeFailed, OutcomeInvalid, OutcomeRetried, OutcomeAborted:
		span.SetStatus(codes.Error, string(j.outcome))
	}
	span.End()
}

// step runs fn in a span of its own, a child of ctx's, ending it with fn's error.
func (p *Pool) step(ctx context.Context, name string, fn func(ctx context.Context) error, attrs ...attribute.KeyValue) error {
	ctx, span := p.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	defer span.End()
	err := fn(ctx)
	if err != nil {
		if name == "compactor.summarize" || name == "compactor.repair" {
			// A summarizer's error may quote what the model answered (a refusal, a
			// response body): content, which spans never carry. The LLM call's own span
			// says what kind of failure it was.
			span.SetStatus(codes.Error, "the summarizer failed")
		} else {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	return err
}

// enqueueTraced queues a request in a span of its own, a new trace linked to ctx's
// span (a follow-up compaction is a compaction of its own), whose context the
// request's headers carry to the worker.
func (p *Pool) enqueueTraced(ctx context.Context, req schemas.Request) (uint64, error) {
	ctx, span := p.tracer.Start(ctx, "compactor.request", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(trace.LinkFromContext(ctx, attribute.String("compactor.link", "re-evaluated after"))),
		trace.WithAttributes(attribute.String("compactor.conversation", req.Conversation), attribute.String("compactor.request_id", req.RequestID),
			attribute.String("compactor.trigger", req.Trigger), attribute.Int("compactor.escalation", req.Escalation)))
	defer span.End()
	h := propagation.MapCarrier{}
	traceContext.Inject(ctx, h)
	seq, err := p.store.Queue().EnqueueWithHeader(ctx, req, h)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return seq, err
}

// putResult compare-and-sets the conversation's value in a span of its own.
func (p *Pool) putResult(ctx context.Context, r *schemas.Result, rev uint64) (newRev uint64, err error) {
	err = p.step(ctx, "compactor.kv.put", func(ctx context.Context) (err error) {
		newRev, err = p.store.Results().Put(ctx, r, rev)
		return err
	}, attribute.String("compactor.kv.bucket", p.store.Config().ResultsBucket),
		attribute.String("compactor.conversation", r.Conversation), attribute.Int64("compactor.generation", int64(r.Generation)),
		attribute.Int64("compactor.expected_revision", int64(rev)))
	return newRev, err
}
