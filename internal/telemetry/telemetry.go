package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// Telemetry is what a node observes of its roles: Prometheus metrics when the
// operators' listener is on, traces when an OTLP endpoint is set (each nil when off).
// The zero value observes nothing.
type Telemetry struct {
	Metrics *Metrics
	Traces  trace.TracerProvider
	// Tenant, for the roles of one tenant, observes them in the process's families and
	// the tenant's (nil: no tenant's, or no metrics).
	Tenant *Tenant
}

// Triggers adds the trigger's observer and tracer to cfg.
func (t Telemetry) Triggers(cfg *triggers.Config) {
	switch {
	case t.Tenant != nil:
		cfg.Observer = t.Tenant
	case t.Metrics != nil:
		cfg.Observer = t.Metrics
	}
	cfg.Tracer = t.Traces
}

// Pool adds the worker pool's observer and tracer to opts.
func (t Telemetry) Pool(opts *summarizer.Options) {
	switch {
	case t.Tenant != nil:
		opts.Observer = t.Tenant
	case t.Metrics != nil:
		opts.Observer = t.Metrics
	}
	opts.Tracer = t.Traces
}

// LLM returns s observed: every call is measured and traced.
func (t Telemetry) LLM(s *llm.Summarizer) summary.Summarizer {
	if t.Metrics == nil && t.Traces == nil {
		return s
	}
	o := observedLLM{Summarizer: s, metrics: t.Metrics, model: s.Config().Model}
	if t.Metrics != nil {
		t.Metrics.llmModel(o.model)
	}
	if t.Traces != nil {
		o.tracer = t.Traces.Tracer("github.com/compactor/compactor/summarizer/llm")
	}
	return o
}

// observedLLM is an LLM summarizer whose calls are measured and traced. Embedding
// keeps the methods the pool looks for (RequestTokens sizes its requests).
type observedLLM struct {
	*llm.Summarizer
	metrics *Metrics     // nil: not measured
	tracer  trace.Tracer // nil: not traced
	model   string
}

// Compact is the compact form of the summarizer (see llm.Summarizer.Compact), measured
// and traced like it: the pool switches to it for a small window.
func (s observedLLM) Compact() summary.Summarizer {
	c := s
	if short, ok := s.Summarizer.Compact().(*llm.Summarizer); ok {
		c.Summarizer = short
	}
	return c
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
