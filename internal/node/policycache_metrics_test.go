package node

import (
	"context"
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
}
