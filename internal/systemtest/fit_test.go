package systemtest

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/schemas"
)

// An endpoint whose real window cannot hold even the summarizer's prompt: the retries
// send ever smaller requests, then the summarizer gives up with ErrNothingFits, and the
// worker writes the extractive fallback at once, on the first delivery and below the
// hard limit, instead of retrying and dead-lettering without a result.
func TestNothingFitsWritesTheFallbackAtOnce(t *testing.T) {
	env := failingEnv(t)
	env.Policy["context_window"] = "8000"
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.MaxChars = 1000 }) // less than the prompt alone
	s := startStack(t, env, llm)
	s.stop(t) // publish everything first: one compaction over the threshold, under the hard limit
	ctx := ctxFor(t, time.Minute)
	msgs, _ := fakellm.NeedleConversation(14)
	for _, m := range msgs {
		if _, err := s.client.Publish(ctx, "nofit", m); err != nil {
			t.Fatal(err)
		}
	}
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("nofit")))
	s2 := runStack(t, s.nc, s.st, env, llm)
	eventually(t, 30*time.Second, "a completed or failed event", func() bool {
		return events.count(schemas.EventCompleted)+events.count(schemas.EventFailed) >= 1
	})
	if n := events.count(schemas.EventFailed); n > 0 {
		t.Fatalf("%d failed events (%s); want the fallback written at once", n, events.last(schemas.EventFailed).Error)
	}
	v, _, err := s2.st.Results().Get(ctx, "nofit", true)
	if err != nil || v == nil {
		t.Fatalf("no value: %v", err)
	}
	b := env.budget()
	if !v.Fallback || v.Model != "extractive" {
		t.Fatalf("value fallback=%v model=%q; want the extractive fallback", v.Fallback, v.Model)
	}
	if v.TokensBefore < b.ThresholdTokens() || v.TokensBefore >= b.HardLimitTokens() {
		t.Fatalf("tokens before %d; want between the threshold %d and the hard limit %d", v.TokensBefore, b.ThresholdTokens(), b.HardLimitTokens())
	}
	if ev := events.last(schemas.EventCompleted); !strings.Contains(ev.Error, "nothing fits") {
		t.Fatalf("completed event error %q; want it to say nothing fits", ev.Error)
	}
	if n := llm.Calls(); n == 0 || n > 10 {
		t.Fatalf("LLM called %d times; want a few ever smaller tries", n)
	}
}
