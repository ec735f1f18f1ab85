package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
)

// faultyLLM is an OpenAI-compatible endpoint whose n-th request (from 1) gets
// answer(n, body, w, r). It records when each request came and when it ended (the
// answer written, or the client gone: the body is read first, so the server sees the
// client go).
type faultyLLM struct {
	answer func(n int, body []byte, w http.ResponseWriter, r *http.Request)

	mu    sync.Mutex
	start []time.Time
	end   []time.Time
}

func newFaultyLLM(t *testing.T, timeout time.Duration, answer func(n int, body []byte, w http.ResponseWriter, r *http.Request)) (*faultyLLM, *llm.Summarizer) {
	t.Helper()
	f := &faultyLLM{answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.start = append(f.start, time.Now())
		n := len(f.start)
		f.mu.Unlock()
		f.answer(n, body, w, r)
		f.mu.Lock()
		f.end = append(f.end, time.Now())
		f.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	sum, err := llm.New(llm.Config{BaseURL: srv.URL, APIKey: "sk-test", Model: "m", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return f, sum
}

// ended waits until every request so far has ended.
func (f *faultyLLM) ended(ctx context.Context, t *testing.T) {
	t.Helper()
	for {
		f.mu.Lock()
		done := len(f.end) == len(f.start)
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("a request to the endpoint never ended: the client did not give up")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *faultyLLM) calls() (start, end []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.start...), append([]time.Time(nil), f.end...)
}

// summaryOf answers a completion whose summary is text.
func summaryOf(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "c", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": text}}},
	})
}

// Issue 9: an endpoint that answers 429 with Retry-After is not asked again sooner,
// however short the worker's own backoff: the nak's delay is the larger of the two.
func TestRetryAfterIsHonouredByTheWorker(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const retryAfter = 2 * time.Second
	f, sum := newFaultyLLM(t, 10*time.Second, func(n int, _ []byte, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", fmt.Sprint(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		summaryOf(w, "## Goal\nKeep writing w.")
	})
	last := seed(t, ctx, st, "limited", 8)
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.MaxAttempts = 1, 3
	pcfg.BackoffBase, pcfg.BackoffMax = 50*time.Millisecond, 100*time.Millisecond
	pcfg.FetchWait = 200 * time.Millisecond
	req := request(t, ctx, st, "limited", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{}, Retryable: llm.Retryable,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})

	ev, err := st.Events().WaitOutcome(ctx, "limited", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed on the second attempt", ev, err)
	}
	start, _ := f.calls()
	if len(start) != 2 {
		t.Fatalf("%d requests; want 2 (the 429, then the summary)", len(start))
	}
	if gap := start[1].Sub(start[0]); gap < retryAfter {
		t.Fatalf("asked again %s after a 429 with Retry-After %s; want at least the Retry-After (the backoff alone is ≤ %s)",
			gap, retryAfter, pcfg.BackoffMax)
	}
	v, _, err := st.Results().Get(ctx, "limited", true)
	if err != nil || v == nil || v.Fallback || !strings.Contains(v.Summary, "Keep writing w.") {
		t.Fatalf("value %+v, %v; want the LLM's summary", v, err)
	}
}

// An endpoint that never answers costs each attempt about llm_timeout, not the job's
// life: the worker's call gives up at the timeout (the endpoint sees the client go),
// the request is retried, and after its attempts it is dead-lettered with the deadline
// error; the previous value stays.
func TestHangingEndpointTimesOutInTheWorker(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const timeout = 400 * time.Millisecond
	f, sum := newFaultyLLM(t, timeout, func(n int, _ []byte, w http.ResponseWriter, r *http.Request) {
		if n%2 == 0 { // every other one sends the start of an answer, then nothing
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{"choices":[{"message":{"content":"## Go`)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
	last := seed(t, ctx, st, "hung", 8) // over the threshold, under the hard limit
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.MaxAttempts = 1, 2
	pcfg.BackoffBase, pcfg.BackoffMax = 50*time.Millisecond, 100*time.Millisecond
	pcfg.FetchWait = 200 * time.Millisecond
	pcfg.InProgressEvery = 100 * time.Millisecond
	req := request(t, ctx, st, "hung", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{}, Retryable: llm.Retryable,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})

	ev, err := st.Events().WaitOutcome(ctx, "hung", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventFailed || !strings.Contains(ev.Error, "deadline exceeded") {
		t.Fatalf("outcome %+v, %v; want failed with the deadline error", ev, err)
	}
	f.ended(ctx, t)
	start, end := f.calls()
	if len(start) != pcfg.MaxAttempts {
		t.Fatalf("%d requests, %d ended; want %d, each ended by the client", len(start), len(end), pcfg.MaxAttempts)
	}
	for i := range start {
		if held := end[i].Sub(start[i]); held > timeout+2*time.Second {
			t.Errorf("request %d was held %s; want about llm_timeout %s", i+1, held, timeout)
		}
	}
	if v, _, err := st.Results().Get(ctx, "hung", true); err != nil || v != nil {
		t.Fatalf("a failed compaction wrote a value: %+v, %v", v, err)
	}
}

// A model that writes a summary longer than what it summarizes (and over the cap) is
// asked once more with a firmer cap; still too long, the extractive fallback is written
// at once (the summarizer cannot do the job), marked fallback, with the failure in the
// completed event.
func TestSummaryLongerThanItsInputEndsInTheFallback(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, sum := newFaultyLLM(t, 10*time.Second, func(_ int, body []byte, w http.ResponseWriter, _ *http.Request) {
		summaryOf(w, "## Goal\n"+strings.Repeat("ramble ", 2*len(body)/7)) // twice the request
	})
	last := seed(t, ctx, st, "verbose", 8)
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	req := request(t, ctx, st, "verbose", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{}, Retryable: llm.Retryable,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})

	ev, err := st.Events().WaitOutcome(ctx, "verbose", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted || !strings.Contains(ev.Error, "over max_summary_tokens") {
		t.Fatalf("outcome %+v, %v; want completed, reporting the summaries over their cap", ev, err)
	}
	if start, _ := f.calls(); len(start) != 2 {
		t.Fatalf("%d requests; want 2 (the summary, then once with a firmer cap)", len(start))
	}
	v, _, err := st.Results().Get(ctx, "verbose", true)
	if err != nil || v == nil || !v.Fallback || strings.Contains(v.Summary, "ramble") {
		t.Fatalf("value %+v, %v; want the extractive fallback, none of the model's text", v, err)
	}
	if v.TokensAfter >= v.TokensBefore {
		t.Fatalf("tokens %d → %d; want the context smaller", v.TokensBefore, v.TokensAfter)
	}
}
