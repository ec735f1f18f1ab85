package telemetry

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The proxy's metrics follow Prometheus's conventions and count what the reports say:
// tokens the clients sent against those forwarded, the upstream's input by kind, the
// messages stored and the turns on a branch.
func TestProxyMetrics(t *testing.T) {
	m := NewMetrics("test")
	obs := m.Proxy()
	obs.ProxyRequest(ProxyReport{API: "anthropic", Outcome: "compacted", Branch: "edit", ClientTokens: 9000, ForwardedTokens: 3000,
		Waited: 2 * time.Second, Stored: 3, Added: 3 * time.Millisecond, HasUsage: true, Input: 3100, CacheRead: 2000, CacheWrite: 600})
	obs.ProxyRequest(ProxyReport{API: "openai", Outcome: "passthrough"})
	obs.ProxyRequest(ProxyReport{API: "gemini", Outcome: "compacted", Mode: "shadow", Booked: true, BookedClient: 8000, BookedCompacted: 2500,
		BookedClientPrefix: 7000, BookedCompactedPrefix: 2400, LedgerFailures: 1})

	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	p := obs
	for name, c := range map[string]struct{ got, want float64 }{
		"requests compacted":   {testutil.ToFloat64(p.requests.WithLabelValues("anthropic", "compacted")), 1},
		"requests passthrough": {testutil.ToFloat64(p.requests.WithLabelValues("openai", "passthrough")), 1},
		"client tokens":        {testutil.ToFloat64(p.clientTokens.WithLabelValues("anthropic")), 9000},
		"forwarded tokens":     {testutil.ToFloat64(p.forwarded.WithLabelValues("anthropic")), 3000},
		"cached":               {testutil.ToFloat64(p.upstreamIn.WithLabelValues("anthropic", "cached")), 2000},
		"cache_write":          {testutil.ToFloat64(p.upstreamIn.WithLabelValues("anthropic", "cache_write")), 600},
		"uncached":             {testutil.ToFloat64(p.upstreamIn.WithLabelValues("anthropic", "uncached")), 500},
		"stored":               {testutil.ToFloat64(p.stored.WithLabelValues("anthropic")), 3},
		"branches":             {testutil.ToFloat64(p.branches.WithLabelValues("edit")), 1},
		"booked client":        {testutil.ToFloat64(p.ledger.WithLabelValues("gemini", "shadow", "client", "all")), 8000},
		"booked client prefix": {testutil.ToFloat64(p.ledger.WithLabelValues("gemini", "shadow", "client", "cache_prefix")), 7000},
		"booked compacted":     {testutil.ToFloat64(p.ledger.WithLabelValues("gemini", "shadow", "compacted", "all")), 2500},
		"booked compacted pre": {testutil.ToFloat64(p.ledger.WithLabelValues("gemini", "shadow", "compacted", "cache_prefix")), 2400},
		"ledger failures":      {testutil.ToFloat64(p.ledgerFailed), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %g; want %g", name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.reg, "compactor_proxy_compaction_wait_seconds", "compactor_proxy_added_seconds"); n != 2 {
		t.Errorf("histograms gathered: %d", n)
	}
	// Every series of the closed label sets exists at 0 before its first request.
	if n := testutil.CollectAndCount(m.reg, "compactor_proxy_requests_total"); n != len(ProxyAPIs)*len(ProxyOutcomes) {
		t.Errorf("request series: %d", n)
	}
}
