package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
)

// The policy cache's lookups, entries and watch are exported as metrics: a lookup of a
// conversation read twice is one miss then one hit, and the watch is live while Run
// holds it.
func TestPolicyCacheMetrics(t *testing.T) {
	st := jstest.Provision(t, jstest.Conn(t, jstest.Server(t)))
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// metrics-1 has a policy of its own: read once, then served from its entry.
	data, _ := policy.EncodeConversation(policy.Layer{"threshold": "0.6"})
	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	if err := st.Policies().Update(pctx, "metrics-1", func([]byte) ([]byte, bool, error) { return data, true, nil }); err != nil {
		t.Fatal(err)
	}
	src := NewPolicySourceLog(st, r, zerolog.Nop())
	m := telemetry.NewMetrics("test")
	m.PolicyCache(src.CacheStats)
	value := func(name, result string) float64 {
		t.Helper()
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, mt := range f.GetMetric() {
				if len(mt.GetLabel()) > 0 && mt.GetLabel()[0].GetValue() != result {
					continue
				}
				if c := mt.GetCounter(); c != nil {
					return c.GetValue()
				}
				return mt.GetGauge().GetValue()
			}
		}
		t.Fatalf("%s{%s} not gathered", name, result)
		return 0
	}
	if v := value("compactor_policy_watch_live", ""); v != 0 {
		t.Fatalf("compactor_policy_watch_live = %v before Run; want 0", v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(10 * time.Second)
	for value("compactor_policy_watch_live", "") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the watch never went live")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 2 {
		if _, err := src.Settings(ctx, "metrics-1"); err != nil {
			t.Fatal(err)
		}
	}
	hit, miss := value("compactor_policy_cache_lookups_total", "hit"), value("compactor_policy_cache_lookups_total", "miss")
	if hit != 1 || miss != 1 || value("compactor_policy_cache_entries", "") != 1 {
		t.Fatalf("after two lookups of one conversation: %v hits, %v misses, %v entries; want 1, 1, 1", hit, miss, value("compactor_policy_cache_entries", ""))
	}
	// A conversation without a policy, once the cache has listed those with one: the
	// defaults, no read, no entry.
	deadline = time.Now().Add(10 * time.Second)
	for i := 0; value("compactor_policy_cache_lookups_total", "no_policy") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no conversation was answered as having no policy")
		}
		if _, err := src.Settings(ctx, fmt.Sprintf("metrics-none-%d", i+10)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	misses := value("compactor_policy_cache_lookups_total", "miss")
	for range 3 {
		if _, err := src.Settings(ctx, "metrics-none-2"); err != nil {
			t.Fatal(err)
		}
	}
	if got := value("compactor_policy_cache_lookups_total", "miss"); got != misses || value("compactor_policy_cache_lookups_total", "no_policy") < 4 {
		t.Fatalf("three lookups of a new conversation without a policy: %v misses (was %v), %v no_policy", got, misses, value("compactor_policy_cache_lookups_total", "no_policy"))
	}
}
