package telemetry

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// LearnedWindows exports the context windows the workers learned of the summarizer
// endpoints (compactor_summarizer_learned_window_tokens, by endpoint and model), read
// from the windows bucket when Prometheus scrapes, like the backlogs. The labels come
// from the operator's configuration (the base URL without credentials, the model),
// never from a message.
func (m *Metrics) LearnedWindows(st *jetstream.Store, log zerolog.Logger) {
	m.reg.MustRegister(&windowsCollector{st: st, log: log,
		desc: prometheus.NewDesc("compactor_summarizer_learned_window_tokens",
			"The context window requests to a summarizer endpoint and model are sized by, learned from its refusals for length (as Compactor counts tokens); absent while none is on record, when the configured summarizer_context_window applies. The same for every process: take max, not sum.",
			[]string{"endpoint", "model"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "compactor_learned_windows_read_errors_total",
			Help: "Scrapes whose learned windows could not be read from JetStream in time (the gauge is then missing from the scrape)."}),
	})
}

// windowsCollector reads the learned windows when Prometheus scrapes, bounded by
// BacklogTimeout and kept for backlogTTL.
type windowsCollector struct {
	st     *jetstream.Store
	log    zerolog.Logger
	desc   *prometheus.Desc
	errors prometheus.Counter

	cache scrapeCache
}

func (c *windowsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	c.errors.Describe(ch)
}

func (c *windowsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.cache.get(c.read) {
		ch <- m
	}
	c.errors.Collect(ch)
}

func (c *windowsCollector) read(ctx context.Context) []prometheus.Metric {
	windows, err := c.st.Windows().List(ctx)
	if err != nil {
		c.errors.Inc()
		c.log.Debug().Err(err).Msg("read learned windows for metrics")
		windows = nil
	}
	out := make([]prometheus.Metric, 0, len(windows))
	for _, w := range windows {
		out = append(out, prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(w.Tokens), w.Endpoint, w.Model))
	}
	return out
}
