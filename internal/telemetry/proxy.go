package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/compactor/compactor/internal/proxy"
)

// ProxyMetrics are the proxy role's metrics: proxy.Observer.
type ProxyMetrics struct {
	requests     *prometheus.CounterVec // api, outcome
	clientTokens *prometheus.CounterVec // api
	forwarded    *prometheus.CounterVec // api
	upstreamIn   *prometheus.CounterVec // api, kind
	stored       *prometheus.CounterVec // api
	branches     *prometheus.CounterVec // reason
	wait         prometheus.Histogram
	added        prometheus.Histogram
}

// Proxy registers the proxy role's metrics on m's registry (once per process: the
// node that runs the role calls it) and returns them.
func (m *Metrics) Proxy() *ProxyMetrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	p := &ProxyMetrics{
		requests: counter("compactor_proxy_requests_total",
			"Requests of the rewritten paths (chat completions, messages), by API and outcome (compacted, passthrough, refused: a 4xx of the proxy's, upstream_error: the upstream's non-2xx or error event, failed: a 5xx of the proxy's, a broken stream or a client gone).",
			"api", "outcome"),
		clientTokens: counter("compactor_proxy_client_tokens_total",
			"Estimated tokens of the histories clients sent, by API.", "api"),
		forwarded: counter("compactor_proxy_forwarded_tokens_total",
			"Estimated tokens of the contexts the proxy sent upstream in their place, by API.", "api"),
		upstreamIn: counter("compactor_proxy_upstream_input_tokens_total",
			"Input tokens the upstream reported, by API and kind (cached: read from its prompt cache; cache_write: written to it; uncached: the rest).",
			"api", "kind"),
		stored: counter("compactor_proxy_messages_stored_total",
			"Messages the proxy stored in CHAT: the clients' new messages and the upstream's replies, by API.", "api"),
		branches: counter("compactor_proxy_branches_total",
			"Turns served on a branch of their conversation, by why the client's history left the stored one (edit, regenerate, truncate).", "reason"),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "compactor_proxy_compaction_wait_seconds",
			Help:    "Time each turn waited for a pending compaction before its context was sent (0 for most).",
			Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}),
		added: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "compactor_proxy_added_seconds",
			Help:    "The proxy's own time per request of a rewritten path: the whole request's, less the time spent waiting for and reading the upstream.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
	}
	m.reg.MustRegister(p.wait, p.added)
	// Every series of a closed label set exists from the start at 0.
	for _, api := range proxy.APIs {
		for _, o := range proxy.Outcomes {
			p.requests.WithLabelValues(api, o)
		}
		p.clientTokens.WithLabelValues(api)
		p.forwarded.WithLabelValues(api)
		p.stored.WithLabelValues(api)
		for _, k := range []string{"cached", "uncached", "cache_write"} {
			p.upstreamIn.WithLabelValues(api, k)
		}
	}
	for _, b := range proxy.Branches {
		p.branches.WithLabelValues(b)
	}
	return p
}

// ProxyRequest is proxy.Observer.
func (p *ProxyMetrics) ProxyRequest(r proxy.Report) {
	p.requests.WithLabelValues(r.API, r.Outcome).Inc()
	p.added.Observe(r.Added.Seconds())
	if r.Stored > 0 {
		p.stored.WithLabelValues(r.API).Add(float64(r.Stored))
	}
	if t := r.Turn; t != nil {
		p.clientTokens.WithLabelValues(r.API).Add(float64(max(t.ClientTokens, 0)))
		if t.Context != nil {
			p.forwarded.WithLabelValues(r.API).Add(float64(max(t.Context.Tokens, 0)))
		}
		p.wait.Observe(t.Waited.Seconds())
		if t.Branch != "" {
			p.branches.WithLabelValues(t.Branch).Inc()
		}
	}
	if u := r.Usage; u != nil {
		cached, written := max(u.CacheRead, 0), max(u.CacheWrite, 0)
		p.upstreamIn.WithLabelValues(r.API, "cached").Add(float64(cached))
		p.upstreamIn.WithLabelValues(r.API, "cache_write").Add(float64(written))
		p.upstreamIn.WithLabelValues(r.API, "uncached").Add(float64(max(u.Input-cached-written, 0)))
	}
}
