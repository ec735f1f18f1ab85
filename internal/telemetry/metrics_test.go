package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/triggers"
)

// basePolicy gives every conversation the default settings.
type basePolicy struct{}

func (basePolicy) Settings(context.Context, string) (policy.Settings, error) {
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		return policy.Settings{}, err
	}
	return r.Base(), nil
}

// Every metric Compactor exports follows Prometheus's naming conventions (promlint:
// units in base units as suffixes, _total on counters, help text, snake case), its Go
// and process collectors included. Each is made to have a series first: promlint
// sees only what a scrape shows.
func TestMetricNamesFollowConventions(t *testing.T) {
	m := NewMetrics("test")
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	m.Connection(nc)
	m.Backlog(st, func() []jetstream.Partition { return st.Config().Partitions() }, zerolog.Nop())
	if _, err := st.Windows().Learn(context.Background(), jetstream.LearnedWindow{Endpoint: "http://llm:8000/v1", Model: "small", Tokens: 3000, RefusedTokens: 8000}); err != nil {
		t.Fatal(err)
	}
	m.LearnedWindows(st, zerolog.Nop())
	m.JobDone(summarizer.JobReport{Trigger: schemas.TriggerBudget, Outcome: summarizer.OutcomeCompleted, Attempt: 1,
		Duration: time.Second, TokensBefore: 3500, TokensAfter: 1200, Fallback: true})
	m.Counted(time.Second)
	m.Requested(schemas.TriggerBudget, triggers.RequestQueued)
	var usage triggers.UsageObserver = m // the trigger tells the metrics of the usage it ignores
	usage.UsageIgnored()
	if got := testutil.ToFloat64(m.usageIgnored); got != 1 {
		t.Errorf("compactor_trigger_usage_ignored_total = %v after one ignored usage; want 1", got)
	}
	m.llmModel("gpt-4o-mini")
	m.llmCall("gpt-4o-mini", time.Second, &schemas.Usage{PromptTokens: 900, CompletionTokens: 100}, nil)
	pool, err := summarizer.NewPool(summarizer.DefaultConfig(), st, summarizer.Options{Policies: basePolicy{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }, Fallback: extractive.New()})
	if err != nil {
		t.Fatal(err)
	}
	m.Pool(pool)
	trig, err := triggers.New(triggers.DefaultConfig(), st, basePolicy{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	m.Trigger(trig)
	m.PolicyCache(func() PolicyCacheFigures { return PolicyCacheFigures{Hits: 3, Misses: 1, Entries: 1, Live: true} })

	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for _, name := range []string{"compactor_compactions_total", "compactor_compaction_duration_seconds",
		"compactor_compaction_tokens_before", "compactor_compaction_tokens_after", "compactor_fallback_summaries_total",
		"compactor_fallback_repairs_total", "compactor_llm_requests_total", "compactor_llm_errors_total", "compactor_llm_request_duration_seconds",
		"compactor_summarizer_tokens_total", "compactor_trigger_lag_seconds", "compactor_trigger_requests_total",
		"compactor_trigger_usage_ignored_total",
		"compactor_trigger_conversations", "compactor_request_backlog", "compactor_trigger_backlog",
		"compactor_backlog_read_errors_total", "compactor_summarizer_learned_window_tokens", "compactor_learned_windows_read_errors_total", "compactor_workers", "compactor_workers_busy", "compactor_nats_connected", "compactor_nats_syncs_every_write",
		"compactor_nats_reconnects_total", "compactor_build_info", "compactor_policy_cache_lookups_total",
		"compactor_policy_cache_entries", "compactor_policy_watch_live", "go_goroutines", "process_cpu_seconds_total"} {
		if !names[name] {
			t.Errorf("%s is not gathered, so not linted", name)
		}
	}
}

// Issue 18: every repair of a fallback a worker tries is counted by its outcome, and
// only those.
func TestRepairsAreCounted(t *testing.T) {
	m := NewMetrics("test")
	m.JobDone(summarizer.JobReport{Trigger: schemas.TriggerBudget, Outcome: summarizer.OutcomeRetried, Repair: summarizer.RepairFailed})
	m.JobDone(summarizer.JobReport{Trigger: schemas.TriggerBudget, Outcome: summarizer.OutcomeCompleted, Repair: summarizer.RepairRepaired})
	m.JobDone(summarizer.JobReport{Trigger: schemas.TriggerBudget, Outcome: summarizer.OutcomeCompleted})
	for o, want := range map[summarizer.RepairOutcome]float64{summarizer.RepairRepaired: 1, summarizer.RepairFailed: 1, summarizer.RepairGap: 0} {
		if got := testutil.ToFloat64(m.repairs.WithLabelValues(string(o))); got != want {
			t.Errorf("compactor_fallback_repairs_total{outcome=%q} = %g; want %g", o, got, want)
		}
	}
}
