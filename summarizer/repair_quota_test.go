package summarizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
)

// quotaRepairPool runs repairPool's pool under tenant acme's token quota of perDay,
// every answered call of sum counted against it.
func quotaRepairPool(t *testing.T, st *jetstream.Store, sum *llm.Summarizer, perDay int64, obs summarizer.Observer) {
	t.Helper()
	q := tenants.NewQuota("acme", tenants.Quotas{SummarizerTokensPerDay: perDay}, st, zerolog.Nop())
	counted := sum.WithUsage(q.Charge)
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, 10*time.Second
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{}, Observer: obs, Quota: q,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return counted, nil }})
}

// A repair reserved the tokens of an ordinary request (the fallback's text and the new
// messages), then sent the LLM every raw message the fallback covers: after an outage,
// repairs passed summarizer_tokens_per_day by whole conversations. A repair reserves
// what it sends: one that does not fit in what is left of the day (or in the whole
// day's quota, which the operator may raise) sends nothing and waits in the queue, its
// fallback keeping the bound.
func TestRepairKeepsWithinTheTokenQuota(t *testing.T) {
	for _, tc := range []struct {
		name         string
		perDay, used int64
	}{
		{"over the whole quota", 5000, 0},
		{"over what is left", 20000, 16000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := jstest.Server(t)
			nc := jstest.Conn(t, srv)
			st := jstest.Provision(t, nc)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o, sum := newOutageLLM(t)
			obs := &repairReports{}
			last := needleMessages(t, ctx, st, "quota", "a", 0, 10, map[uint64]string{}) // 4000 tokens, past the hard limit
			quotaRepairPool(t, st, sum, tc.perDay, obs)
			req := request(t, ctx, st, "quota", last)
			if ev, err := st.Events().WaitOutcome(ctx, "quota", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
				t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
			}
			waitQueued(t, ctx, st, "quota", req.RequestID)
			if _, err := st.AddTokensUsed(ctx, time.Now(), tc.used); err != nil { // spent today elsewhere
				t.Fatal(err)
			}
			up := time.Now()
			o.down.Store(false)
			// The repair is made (and counted), or tried twice more and waits.
			for {
				v, _, err := st.Results().Get(ctx, "quota", true)
				if err == nil && v != nil && v.RepairOf > 0 {
					break
				}
				reps, at := obs.snapshot()
				after := 0
				for i, r := range reps {
					if at[i].After(up) && r.Repair == summarizer.RepairFailed {
						after++
					}
				}
				if after >= 2 {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("no repair attempt after the LLM came back: %+v", reps)
				case <-time.After(20 * time.Millisecond):
				}
			}
			used, _, err := st.TokensUsed(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("tokens counted today %d of a quota of %d; %d calls answered", used, tc.perDay, len(o.bodies()))
			if used > tc.perDay {
				t.Fatalf("the repair spent %d tokens; %d were spent before it, under a quota of %d a day", used-tc.used, tc.used, tc.perDay)
			}
			v, _, err := st.Results().Get(ctx, "quota", true)
			if err != nil || v == nil || !v.NeedsRepair() {
				t.Fatalf("value %+v, %v; want the fallback, waiting for its repair", v, err)
			}
			waitQueued(t, ctx, st, "quota", req.RequestID)
		})
	}
}
