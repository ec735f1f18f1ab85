package main

import (
	"context"
	"time"

	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// telemetry is what serve observes of its roles: Prometheus metrics when the
// operators' listener is on (nil otherwise).
type telemetry struct {
	metrics *metrics
}

// triggers adds the trigger's observer to cfg.
func (t telemetry) triggers(cfg *triggers.Config) {
	if t.metrics != nil {
		cfg.Observer = t.metrics
	}
}

// pool adds the worker pool's observer to opts.
func (t telemetry) pool(opts *summarizer.Options) {
	if t.metrics != nil {
		opts.Observer = t.metrics
	}
}

// llm returns s observed: every call is measured.
func (t telemetry) llm(s *llm.Summarizer) summary.Summarizer {
	if t.metrics == nil {
		return s
	}
	model := s.Config().Model
	t.metrics.llmModel(model)
	return observedLLM{Summarizer: s, tel: t, model: model}
}

// observedLLM is an LLM summarizer whose calls are measured. Embedding keeps the
// methods the pool looks for (RequestTokens sizes its requests).
type observedLLM struct {
	*llm.Summarizer
	tel   telemetry
	model string
}

func (s observedLLM) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	start := time.Now()
	out, err := s.Summarizer.Summarize(ctx, in)
	s.tel.metrics.llmCall(s.model, time.Since(start), out.Usage, err)
	return out, err
}
