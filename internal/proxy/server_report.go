package proxy

import (
	"time"

	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/schemas"
)

// Outcomes of a request of a rewritten path (the outcome label of
// compactor_proxy_requests_total).
const (
	// OutcomeCompacted: the compacted context went upstream and a 2xx reply came back.
	OutcomeCompacted = "compacted"
	// OutcomeAnswered: the request was an agent's request to summarize its own
	// conversation, answered from Compactor's summary without calling the model.
	OutcomeAnswered = "answered"
	// OutcomePassthrough: forwarded as sent (no conversation named, or NATS down
	// with COMPACTOR_PROXY_ON_NATS_DOWN=pass).
	OutcomePassthrough = "passthrough"
	// OutcomeRefused: the proxy answered 4xx itself (bad id, bad body, another
	// credential's conversation, a body over the limit).
	OutcomeRefused = "refused"
	// OutcomeUpstreamError: the upstream answered non-2xx, or its stream carried its
	// own error event.
	OutcomeUpstreamError = "upstream_error"
	// OutcomeOverloaded: refused before anything was read, over the requests in
	// flight (COMPACTOR_PROXY_MAX_IN_FLIGHT): a 503 with Retry-After.
	OutcomeOverloaded = "overloaded"
	// OutcomeFailed: the proxy answered 5xx (NATS down with fail, upstream
	// unreachable), the stream broke before its end, or the client went away.
	OutcomeFailed = "failed"
)

// Report is what one request of a rewritten path did, for the metrics.
type Report struct {
	// API is the wire's name.
	API string
	// Outcome is one of Outcomes.
	Outcome string
	// Turn is the turn Prepare returned (nil when the request did not get that far).
	Turn *Turn
	// Usage is what the upstream reported of a 2xx reply (nil when none).
	Usage *Usage
	// Stored is the messages stored: the client's the turn published, and the reply.
	Stored int
	// Added is the proxy's own time: the request's, less the time spent on the
	// upstream.
	Added time.Duration
	// Mode is the proxy's; Booked the exchange's sent entry in the savings ledger (nil
	// when none); LedgerFailures the entries the ledger did not take.
	Mode           string
	Booked         *schemas.LedgerEntry
	LedgerFailures int
}

// metrics is what r says for the metrics.
func (r *Report) metrics() telemetry.ProxyReport {
	m := telemetry.ProxyReport{API: r.API, Outcome: r.Outcome, Stored: r.Stored, Added: r.Added, Mode: r.Mode, LedgerFailures: r.LedgerFailures}
	if t := r.Turn; t != nil {
		m.Branch, m.ClientTokens, m.Waited = t.Branch, t.ClientTokens, t.Waited
		switch {
		case r.Mode == ModeShadow:
			m.ForwardedTokens = t.ClientTokens // the client's request went upstream
		case t.Context != nil:
			m.ForwardedTokens = t.Context.Tokens
		}
	}
	if b := r.Booked; b != nil {
		m.Booked, m.BookedClient, m.BookedCompacted = true, b.ClientTokens, b.CompactedTokens
		m.BookedClientPrefix, m.BookedCompactedPrefix = b.ClientPrefixTokens, b.CompactedPrefixTokens
	}
	if u := r.Usage; u != nil {
		m.HasUsage, m.Input, m.CacheRead, m.CacheWrite = true, u.Input, u.CacheRead, u.CacheWrite
	}
	return m
}

// Observer is told of every request of the rewritten paths (telemetry's ProxyMetrics).
type Observer interface {
	ProxyRequest(r telemetry.ProxyReport)
}
