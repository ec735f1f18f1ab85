package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The label values of the proxy's metrics: the APIs it rewrites, the outcomes of a
// request, and why a turn was on a branch.
var (
	ProxyAPIs     = []string{"openai", "anthropic", "responses", "gemini"}
	ProxyOutcomes = []string{"compacted", "answered", "passthrough", "refused", "upstream_error", "failed"}
	ProxyBranches = []string{"edit", "regenerate", "truncate"}
)

// ProxyReport is what one request of the proxy's rewritten paths did.
type ProxyReport struct {
	// API is one of ProxyAPIs, Outcome one of ProxyOutcomes.
	API, Outcome string
	// Branch is one of ProxyBranches when the turn was on a branch, else "".
	Branch string
	// ClientTokens and ForwardedTokens estimate the history the client sent and the
	// context sent upstream (0 when the request did not get that far).
	ClientTokens, ForwardedTokens int
	// Waited is the time the turn waited for a pending compaction.
	Waited time.Duration
	// Stored is the messages stored: the client's new ones and the reply.
	Stored int
	// Added is the proxy's own time: the request's, less the upstream's.
	Added time.Duration
	// HasUsage says the upstream reported usage: Input tokens in all, CacheRead of them
	// read from its prompt cache, CacheWrite written to it.
	HasUsage                     bool
	Input, CacheRead, CacheWrite int
	// Mode is the proxy's mode (rewrite or shadow). Booked says the exchange's sent
	// entry went into the savings ledger, with the estimates of the client's request
	// and of the compacted one, and each one's prefix a prompt cache could serve;
	// LedgerFailures counts the entries of the request the ledger did not take.
	Mode                                      string
	Booked                                    bool
	BookedClient, BookedCompacted             int64
	BookedClientPrefix, BookedCompactedPrefix int64
	LedgerFailures                            int
}

// ProxyMetrics are the proxy role's metrics (the proxy's Observer).
type ProxyMetrics struct {
	requests     *prometheus.CounterVec // api, outcome
	clientTokens *prometheus.CounterVec // api
	forwarded    *prometheus.CounterVec // api
	upstreamIn   *prometheus.CounterVec // api, kind
	stored       *prometheus.CounterVec // api
	branches     *prometheus.CounterVec // reason
	wait         prometheus.Histogram
	added        prometheus.Histogram
	ledger       *prometheus.CounterVec // api, mode, request, part
	ledgerFailed prometheus.Counter
}

// ProxyModes are the proxy's modes (the mode label of compactor_proxy_ledger_tokens_total).
var ProxyModes = []string{"rewrite", "shadow"}

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
			"Requests of the rewritten paths (chat completions, messages, responses, Gemini generateContent), by API and outcome (compacted, answered: an agent's compaction request answered from Compactor's summary, passthrough, refused: a 4xx of the proxy's, overloaded: a 503 over COMPACTOR_PROXY_MAX_IN_FLIGHT, upstream_error: the upstream's non-2xx or error event, failed: a 5xx of the proxy's, a broken stream or a client gone).",
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
	p.ledger = counter("compactor_proxy_ledger_tokens_total",
		"Estimated tokens of the exchanges booked in the savings ledger, by API, mode (rewrite, shadow), request (client: as the client sent it; compacted: the compacted one, sent in rewrite mode, not in shadow) and part (all; cache_prefix: the part a prompt cache could serve, the same as the conversation's previous request within COMPACTOR_PROXY_CACHE_TTL). compactor savings reads the ledger itself, by model and client.",
		"api", "mode", "request", "part")
	p.ledgerFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "compactor_proxy_ledger_failures_total",
		Help: "Savings ledger entries the proxy could not append (the exchange went on; its figures are missing or unsettled)."})
	m.reg.MustRegister(p.wait, p.added, p.ledgerFailed)
	// Every series of a closed label set exists from the start at 0.
	for _, api := range ProxyAPIs {
		for _, o := range ProxyOutcomes {
			p.requests.WithLabelValues(api, o)
		}
		p.clientTokens.WithLabelValues(api)
		p.forwarded.WithLabelValues(api)
		p.stored.WithLabelValues(api)
		for _, k := range []string{"cached", "uncached", "cache_write"} {
			p.upstreamIn.WithLabelValues(api, k)
		}
		for _, mode := range ProxyModes {
			for _, req := range []string{"client", "compacted"} {
				for _, part := range []string{"all", "cache_prefix"} {
					p.ledger.WithLabelValues(api, mode, req, part)
				}
			}
		}
	}
	for _, b := range ProxyBranches {
		p.branches.WithLabelValues(b)
	}
	return p
}

// ProxyRequest counts one request.
func (p *ProxyMetrics) ProxyRequest(r ProxyReport) {
	p.requests.WithLabelValues(r.API, r.Outcome).Inc()
	p.added.Observe(r.Added.Seconds())
	if r.Stored > 0 {
		p.stored.WithLabelValues(r.API).Add(float64(r.Stored))
	}
	p.clientTokens.WithLabelValues(r.API).Add(float64(max(r.ClientTokens, 0)))
	p.forwarded.WithLabelValues(r.API).Add(float64(max(r.ForwardedTokens, 0)))
	if r.ClientTokens > 0 {
		p.wait.Observe(r.Waited.Seconds())
	}
	if r.Branch != "" {
		p.branches.WithLabelValues(r.Branch).Inc()
	}
	if r.LedgerFailures > 0 {
		p.ledgerFailed.Add(float64(r.LedgerFailures))
	}
	if r.Booked {
		for _, v := range []struct {
			req, part string
			n         int64
		}{{"client", "all", r.BookedClient}, {"client", "cache_prefix", r.BookedClientPrefix},
			{"compacted", "all", r.BookedCompacted}, {"compacted", "cache_prefix", r.BookedCompactedPrefix}} {
			p.ledger.WithLabelValues(r.API, r.Mode, v.req, v.part).Add(float64(max(v.n, 0)))
		}
	}
	if r.HasUsage {
		cached, written := max(r.CacheRead, 0), max(r.CacheWrite, 0)
		p.upstreamIn.WithLabelValues(r.API, "cached").Add(float64(cached))
		p.upstreamIn.WithLabelValues(r.API, "cache_write").Add(float64(written))
		p.upstreamIn.WithLabelValues(r.API, "uncached").Add(float64(max(r.Input-cached-written, 0)))
	}
}
