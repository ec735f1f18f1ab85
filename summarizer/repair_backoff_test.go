package summarizer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// Item 8b (a chaos run's finding): a summarizer that never writes a usable summary (here
// every answer is far over its cap, the firmer ask too) got a repair over the whole raw
// history at every compaction: each costs the conversation's every token, and grows
// with it. A repair the summarizer cannot make is recorded in the value, and the next
// waits, doubling: a permanently failing LLM makes a bounded number of repair attempts
// however many compactions the conversation gets.
func TestUnusableSummariesMakeBoundedRepairs(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls, repairs atomic.Int64
	llmSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		calls.Add(1)
		if strings.Contains(string(body), "NEEDLE-r0x3 ") { // covered by the first compaction: only a repair reads it again
			repairs.Add(1)
		}
		summaryOf(w, strings.Repeat("far too long ", 4000))
	}))
	t.Cleanup(llmSrv.Close)
	sum, err := llm.New(llm.Config{BaseURL: llmSrv.URL, APIKey: "sk-test", Model: "m", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, time.Hour
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})

	const rounds = 6
	var gen uint64
	for round := range rounds {
		last := needleMessages(t, ctx, st, "unusable", fmt.Sprintf("r%dx", round), 0, 10, map[uint64]string{}) // past the hard limit
		req := schemas.Request{RequestID: schemas.NewRequestID(), Conversation: "unusable", Trigger: schemas.TriggerManual,
			Reason: "test", RequestedAt: time.Now().UTC(), UpToSeq: last}
		if _, err := st.Queue().Enqueue(ctx, req); err != nil && !errors.Is(err, jetstream.ErrRequestPending) {
			t.Fatal(err) // a request kept for the repair compacts them too
		}
		v := waitValue(t, ctx, st, "unusable", fmt.Sprintf("round %d compacted", round), func(v *schemas.Result) bool {
			return v.Generation > gen && v.CoveredThroughSeq >= last-2
		})
		gen = v.Generation
		if round == 0 {
			repairs.Store(0) // the first compaction's own calls read it
		}
		if !v.BuiltOnFallback {
			t.Fatalf("round %d: value %+v; want a fallback (the summarizer's summaries are unusable)", round, v)
		}
	}
	v, _, err := st.Results().Get(ctx, "unusable", true)
	if err != nil || v == nil {
		t.Fatal(v, err)
	}
	t.Logf("%d compactions, %d LLM calls, %d of them repairs over the raw history; value repair_failures %d, repair_not_before %v",
		rounds, calls.Load(), repairs.Load(), v.RepairFailures, v.RepairNotBefore)
	if n := repairs.Load(); n > 2 {
		t.Fatalf("%d calls of repairs over the whole history in %d compactions, with a summarizer that never makes one; want at most 2 (one attempt and its firmer ask) before the next waits an hour", n, rounds)
	}
	if v.RepairFailures < 1 || v.RepairNotBefore == nil || !v.RepairNotBefore.After(time.Now().Add(30*time.Minute)) {
		t.Fatalf("value repair_failures %d, repair_not_before %v; want the failure recorded, the next repair an hour away", v.RepairFailures, v.RepairNotBefore)
	}
}
