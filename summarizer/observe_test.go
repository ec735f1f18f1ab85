package summarizer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// reports is an Observer that hands every report to the test.
type reports chan summarizer.JobReport

// JobDone never blocks the pool: reports past the buffer (a fallback's request goes on
// being tried for its repair) are not the test's.
func (r reports) JobDone(rep summarizer.JobReport) {
	select {
	case r <- rep:
	default:
	}
}

func (r reports) next(t *testing.T) summarizer.JobReport {
	t.Helper()
	select {
	case rep := <-r:
		return rep
	case <-time.After(30 * time.Second):
		t.Fatal("no job report")
	}
	return summarizer.JobReport{}
}

// failing is a summarizer that always fails.
type failing struct{}

func (failing) Summarize(context.Context, summarizer.Input) (summarizer.Output, error) {
	return summarizer.Output{}, errors.New("llm down")
}

// The pool tells its Observer how every delivery ended, with the request's trigger
// kind (never a value the request made up) and, for a completed compaction, the
// context's size before and after.
func TestObserverHearsEveryOutcome(t *testing.T) {
	type step struct {
		outcome  summarizer.Outcome
		attempt  uint64
		fallback bool
	}
	tests := []struct {
		name     string
		messages int // 8: over the threshold; 10: over the hard limit
		sum      summarizer.Summarizer
		policies summarizer.PolicySource
		raw      []byte // published as the request instead of a valid one
		want     []step
	}{
		{name: "completed", messages: 8, sum: extractive.New(), policies: window4000{},
			want: []step{{summarizer.OutcomeCompleted, 1, false}}},
		{name: "declined", messages: 8, sum: extractive.New(), policies: strict{},
			want: []step{{summarizer.OutcomeDeclined, 1, false}}},
		{name: "retried, then failed", messages: 8, sum: failing{}, policies: window4000{},
			want: []step{{summarizer.OutcomeRetried, 1, false}, {summarizer.OutcomeFailed, 2, false}}},
		{name: "completed with the fallback past the hard limit", messages: 10, sum: failing{}, policies: window4000{},
			want: []step{{summarizer.OutcomeCompleted, 1, true}}},
		{name: "invalid", sum: extractive.New(), policies: window4000{},
			raw:  []byte(`{"request_id":"x","conversation":"obs","trigger":"made-up-by-a-client"}`),
			want: []step{{summarizer.OutcomeInvalid, 1, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := jstest.Server(t)
			nc := jstest.Conn(t, srv)
			st := jstest.Provision(t, nc)
			ctx := ctxFor(t)
			if tt.raw != nil {
				if err := nc.Publish(must(st.Config().RequestSubject("obs")), tt.raw); err != nil {
					t.Fatal(err)
				}
			} else {
				request(t, ctx, st, "obs", seed(t, ctx, st, "obs", tt.messages))
			}
			obs := make(reports, 8)
			cfg := summarizer.DefaultConfig()
			cfg.MaxAttempts, cfg.FetchWait = 2, 200*time.Millisecond
			cfg.BackoffBase, cfg.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
			runPool(t, st, cfg, summarizer.Options{Policies: tt.policies, Observer: obs,
				Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return tt.sum, nil }})
			for _, w := range tt.want {
				got := obs.next(t)
				wantTrigger := "manual"
				if tt.raw != nil {
					wantTrigger = summarizer.TriggerUnknown
				}
				if got.Outcome != w.outcome || got.Attempt != w.attempt || got.Fallback != w.fallback || got.Trigger != wantTrigger {
					t.Errorf("report %+v; want outcome %s, attempt %d, fallback %v, trigger %s", got, w.outcome, w.attempt, w.fallback, wantTrigger)
				}
				if got.Duration <= 0 {
					t.Errorf("report %+v without a duration", got)
				}
				completed := got.Outcome == summarizer.OutcomeCompleted
				if completed != (got.TokensBefore > got.TokensAfter && got.TokensAfter > 0) {
					t.Errorf("report %+v: tokens before and after given only for a completed compaction, and shrinking", got)
				}
			}
		})
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
