package summarizer_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
)

// A fallback's request stays queued to repair it, and holds its conversation's place
// in the queue (one request per conversation). An endpoint that answers 429 with
// Retry-After: 3600 does not hold that request for an hour: the repair's request comes
// back within repairBackoff's cap, the endpoint is not asked again before its time,
// and a delivery that finds the conversation past its hard limit covers the new
// messages with a fallback at once (before the fix: still generation 1 after 20 s).
func TestRepairWaitingOnRetryAfterKeepsTheHardLimit(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls atomic.Int32
	llmSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "3600")
		http.Error(w, `{"error":{"message":"quota","type":"rate_limit"}}`, http.StatusTooManyRequests)
	}))
	t.Cleanup(llmSrv.Close)
	sum, err := llm.New(llm.Config{BaseURL: llmSrv.URL, APIKey: "sk-test", Model: "m", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	obs := &repairReports{}
	needles := map[uint64]string{}
	last := needleMessages(t, ctx, st, "ra", "a", 0, 10, needles) // past the hard limit
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, 10*time.Second
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{}, Observer: obs, Retryable: llm.Retryable, // as serve does
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	req := request(t, ctx, st, "ra", last)
	if ev, err := st.Events().WaitOutcome(ctx, "ra", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, _ := st.Results().Get(ctx, "ra", true)
	if v1 == nil || !v1.Fallback {
		t.Fatalf("first value %+v; want the fallback", v1)
	}
	// A repair delivery under the hard limit waits (the endpoint is not asked again).
	for {
		reps, _ := obs.snapshot()
		if len(reps) > 0 && reps[len(reps)-1].Outcome == summarizer.OutcomeRetried {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no repair delivery; reports %+v", reps)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The conversation grows well past its hard limit.
	last = needleMessages(t, ctx, st, "ra", "b", 10, 12, needles)
	// The trigger's request is refused: the repair's is pending, and keeps the bound.
	_, qerr := st.Queue().Enqueue(ctx, schemas.Request{RequestID: schemas.NewRequestID(), Conversation: "ra",
		Trigger: schemas.TriggerManual, Reason: "hard limit", RequestedAt: time.Now().UTC(), UpToSeq: last})
	if !errors.Is(qerr, jetstream.ErrRequestPending) {
		t.Fatalf("enqueue past the hard limit: %v; want the repair's request pending", qerr)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	v2 := waitValue(t, wctx, st, "ra", "a compaction past the hard limit", func(v *schemas.Result) bool {
		return v.Generation > v1.Generation && v.LoadedThroughSeq >= last
	})
	b, _ := window4000{}.Settings(ctx, "ra")
	if hard := b.Budget().HardLimitTokens(); !v2.Fallback || !v2.BuiltOnFallback || v2.TokensAfter >= hard || v2.TokensBefore < hard {
		t.Fatalf("value past the hard limit: fallback %v built_on_fallback %v tokens %d → %d; want a fallback from over the hard limit %d to under it",
			v2.Fallback, v2.BuiltOnFallback, v2.TokensBefore, v2.TokensAfter, hard)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the endpoint was asked %d times; want once (it asked to wait an hour)", n)
	}
}
