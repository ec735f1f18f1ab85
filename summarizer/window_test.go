package summarizer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
)

// agentWindow resolves every conversation to the defaults with the agent's window
// (the summarizer's is the default, 128,000: the operator did not say it is smaller).
type agentWindow int

func (w agentWindow) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = int(w)
	return s, s.Validate()
}

// publishNeedles publishes a needle conversation of turns turns as conv and returns
// each needle with the sequence of the message that carries it.
func publishNeedles(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, turns int) (last uint64, needleSeq map[string]uint64) {
	t.Helper()
	msgs, needles := fakellm.NeedleConversation(turns)
	needleSeq = map[string]uint64{}
	for _, m := range msgs {
		data, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if last, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
		for _, n := range needles {
			if strings.Contains(m.Content.String(), n) {
				needleSeq[n] = last
			}
		}
	}
	return last, needleSeq
}

// Issue 18: an endpoint whose model's window is far smaller than configured (it answers
// context_length_exceeded at 2,000, 3,000 or 4,000 tokens beside an 8,000- or
// 32,000-token agent window, the summarizer's window left at its default) yields an LLM
// summary, never the fallback: what its refusal names is learned and shapes every
// request (a smaller cap, the compact prompt, as many levels as it takes). Every fact is
// in the summary or in the verbatim tail. The window is shared through NATS: another
// conversation's compaction, by a second pool, is not refused once.
func TestSmallSummarizerWindowIsLearned(t *testing.T) {
	for _, agent := range []int{8000, 32000} {
		for _, model := range []int{2000, 3000, 4000} {
			t.Run(fmt.Sprintf("agent %d, endpoint %d", agent, model), func(t *testing.T) {
				t.Parallel()
				learnSmallWindow(t, agent, model)
			})
		}
	}
}

func learnSmallWindow(t *testing.T, agent, model int) {
	srv := jstest.Server(t)
	st := jstest.Provision(t, jstest.Conn(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := fakellm.New(t)
	f.Set(func(f *fakellm.LLM) { f.Window = model })
	sum, err := llm.New(llm.Config{BaseURL: f.URL(), Model: "small-local-model"})
	if err != nil {
		t.Fatal(err)
	}
	turns := agent / 400 // about 1.2 times the agent's window: past its hard limit
	last, needles := publishNeedles(t, ctx, st, "small", turns)
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	opts := summarizer.Options{Policies: agentWindow(agent), Retryable: llm.Retryable,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }}
	runPool(t, st, pcfg, opts)

	req := request(t, ctx, st, "small", last)
	ev, err := st.Events().WaitOutcome(ctx, "small", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted || ev.Error != "" {
		t.Fatalf("outcome %+v, %v; want completed with no error", ev, err)
	}
	v, _, err := st.Results().Get(ctx, "small", true)
	if err != nil || v == nil {
		t.Fatalf("value %v, %v", v, err)
	}
	if v.Fallback || v.Model != "small-local-model-fake" {
		t.Fatalf("fallback %v, model %q: want the LLM's summary", v.Fallback, v.Model)
	}
	for n, seq := range needles {
		if seq < v.TailStartSeq && !strings.Contains(v.Summary, n) {
			t.Errorf("fact %s (seq %d, before the tail at %d) is not in the summary", n, seq, v.TailStartSeq)
		}
	}
	calls, refused := f.Counts()
	if refused < 1 {
		t.Fatalf("the endpoint refused nothing in %d calls: the test does not exercise a small window", calls)
	}
	lw, err := st.Windows().Get(ctx, f.URL()+"/v1", "small-local-model")
	// Learned as Compactor counts: the stated window scaled by how the two counts of the
	// refused request compare (the endpoint does not count tool call ids and names).
	if err != nil || lw == nil || lw.StatedTokens != model || lw.Tokens < model*9/10 || lw.Tokens > model*11/10 {
		t.Fatalf("learned window %+v, %v; want about %d, as stated", lw, err, model)
	}
	t.Logf("%d tokens compacted to %d in %d requests (%d refused); learned window %d; %d facts, the tail from seq %d",
		v.TokensBefore, v.TokensAfter, calls, refused, lw.Tokens, len(needles), v.TailStartSeq)

	// A second worker process (another pool on the same NATS) sizes its requests by the
	// learned window from its first request on.
	runPool(t, st, pcfg, opts)
	last, _ = publishNeedles(t, ctx, st, "other", turns)
	req = request(t, ctx, st, "other", last)
	if ev, err := st.Events().WaitOutcome(ctx, "other", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted || ev.Error != "" {
		t.Fatalf("second conversation: %+v, %v", ev, err)
	}
	if _, again := f.Counts(); again != refused {
		t.Fatalf("the endpoint refused %d more requests after its window was learned", again-refused)
	}
}
