package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// telemetry is what serve observes of its roles: Prometheus metrics when the
// operators' listener is on, traces when an OTLP endpoint is set (each nil when off).
type telemetry struct {
	metrics *metrics
	traces  trace.TracerProvider
}

// triggers adds the trigger's observer and tracer to cfg.
func (t telemetry) triggers(cfg *triggers.Config) {
	if t.metrics != nil {
		cfg.Observer = t.metrics
	}
	cfg.Tracer = t.traces
}

// pool adds the worker pool's observer and tracer to opts.
func (t telemetry) pool(opts *summarizer.Options) {
	if t.metrics != nil {
		opts.Observer = t.metrics
	}
	opts.Tracer = t.traces
}

// llm returns s observed: every call is measured and traced.
func (t telemetry) llm(s *llm.Summarizer) summary.Summarizer {
	if t.metrics == nil && t.traces == nil {
		return s
	}
	o := observedLLM{Summarizer: s, metrics: t.metrics, model: s.Config().Model}
	if t.metrics != nil {
		t.metrics.llmModel(o.model)
	}
	if t.traces != nil {
		o.tracer = t.traces.Tracer("github.com/compactor/compactor/summarizer/llm")
	}
	return o
}

// observedLLM is an LLM summarizer whose calls are measured and traced. Embedding
// keeps the methods the pool looks for (RequestTokens sizes its requests).
type observedLLM struct {
	*llm.Summarizer
	metrics *metrics     // nil: not measured
	tracer  trace.Tracer // nil: not traced
	model   string
}

func (s observedLLM) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	var span trace.Span
	if s.tracer != nil {
		ctx, span = llmSpan(ctx, s.tracer, s.Summarizer, in)
	}
	start := time.Now()
	out, err := s.Summarizer.Summarize(ctx, in)
	if s.metrics != nil {
		s.metrics.llmCall(s.model, time.Since(start), out.Usage, err)
	}
	if span != nil {
		endLLMSpan(span, out, err)
	}
	return out, err
}
