package systemtest

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/split"
)

// Every strategy, chosen per conversation through its policy, replayed end to end over
// the longest corpus conversation: the invariants hold after every compaction.
func TestEveryStrategyEndToEnd(t *testing.T) {
	convs := loadCorpus(t, 1)
	env := testEnv(t, 8000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	for _, strategy := range split.Strategies {
		for _, msgs := range convs {
			conv := "strategy-" + strings.ReplaceAll(strategy, "-", "_")
			t.Run(strategy, func(t *testing.T) {
				data, _ := policy.EncodeConversation(policy.Layer{"strategy": strategy})
				if err := s.st.Policies().Put(ctxFor(t, 5*time.Second), conv, data, 0); err != nil {
					t.Fatal(err)
				}
				h := watchValues(t, s, conv)
				replay(t, s, conv, msgs, 0)
				settle(t, s)
				eventually(t, 30*time.Second, "the context to fall under the threshold", func() bool {
					cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
					return err == nil && cx.Tokens < env.budget().ThresholdTokens()
				})
				values := h.snapshot()
				if len(values) == 0 || values[len(values)-1].Strategy != strategy {
					t.Fatalf("no value written with strategy %s", strategy)
				}
				invariants(t, s, conv, env, values, llm)
				last := values[len(values)-1]
				t.Logf("%s: %d generations, %d tokens after, tail from %d, %d pinned/kept", strategy, last.Generation, last.TokensAfter, last.TailStartSeq, len(last.PinnedSeqs))
			})
		}
	}
}

// An endpoint that refuses long inputs: the pool summarizes in chunks that fit the
// summarizer's window (map-reduce), and retries with smaller chunks when the endpoint
// still says context_length_exceeded. No needle is lost on the way.
func TestMapReduceAndContextLengthRetry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window string // summarizer_context_window
	}{
		{"chunks planned from summarizer_context_window", "4000"},
		{"chunks shrunk after context_length_exceeded", "128000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, 16000)
			env.Policy["summarizer_context_window"] = tc.window
			env.Policy["max_summary_tokens"] = "300"
			llm := fakellm.New(t)
			llm.Set(func(f *fakellm.LLM) { f.MaxChars = 14000 })
			s := startStack(t, env, llm)
			s.stop(t) // publish everything first: one big compaction
			ctx := ctxFor(t, time.Minute)
			msgs, needles := fakellm.NeedleConversation(40)
			for _, m := range msgs {
				if _, err := s.client.Publish(ctx, "big", m); err != nil {
					t.Fatal(err)
				}
			}
			s2 := runStack(t, s.nc, s.st, env, llm)
			var v *schemas.Result
			eventually(t, time.Minute, "a compaction", func() bool {
				v, _, _ = s2.st.Results().Get(ctx, "big", true)
				return v != nil && v.Generation >= 1
			})
			if v.Fallback {
				t.Fatal("fell back to the extractive summary")
			}
			calls, refused := llm.Counts()
			if calls-refused < 3 {
				t.Fatalf("%d accepted summarizer calls; want chunks plus a merge", calls-refused)
			}
			if tc.window == "128000" && refused == 0 {
				t.Fatal("the endpoint never refused; the retry path was not exercised")
			}
			if tc.window == "4000" && refused != 0 {
				t.Fatalf("%d requests over the endpoint's window despite planned chunks", refused)
			}
			cx, err := s2.client.Context(ctx, "big")
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			for _, m := range cx.Messages {
				text.WriteString(m.Content.String())
			}
			for _, n := range needles {
				if !strings.Contains(text.String(), n) {
					t.Errorf("needle %s lost in map-reduce", n)
				}
			}
			t.Logf("%d calls, %d refused, generation %d", calls, refused, v.Generation)
		})
	}
}

// A conversation's policy changes its threshold and strategy; an endpoint in a
// conversation policy is refused.
func TestConversationPolicy(t *testing.T) {
	env := testEnv(t, 8000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	ctx := ctxFor(t, time.Minute)
	data, _ := policy.EncodeConversation(policy.Layer{"threshold": "0.9", "strategy": "all"})
	if err := s.st.Policies().Put(ctx, "lenient", data, 0); err != nil {
		t.Fatal(err)
	}
	msgs, _ := fakellm.NeedleConversation(14) // ~6,700 tokens: over 0.75 × 8,000, under 0.9 × 8,000
	lenient := replay(t, s, "lenient", msgs, 0)
	replay(t, s, "strict", msgs, 0)
	settle(t, s)
	eventually(t, 30*time.Second, "the default conversation to compact", func() bool {
		v, _, _ := s.st.Results().Get(ctx, "strict", true)
		return v != nil && v.Generation >= 1
	})
	// The trigger decided on every lenient message: a request would be stored by now.
	triggerHandled(t, s, lenient[len(lenient)-1])
	if n := storedEvents(t, s, "lenient", schemas.EventRequested); n != 0 {
		t.Fatalf("%d requests for a conversation with threshold 0.9 under it", n)
	}
	if v, _, _ := s.st.Results().Get(ctx, "lenient", true); v != nil {
		t.Fatalf("a conversation with threshold 0.9 was compacted under it: %+v", v)
	}
	more, _ := fakellm.NeedleConversation(4)
	replay(t, s, "lenient", more[1:], 0)
	eventually(t, 30*time.Second, "the lenient conversation to compact past 0.9", func() bool {
		v, _, _ := s.st.Results().Get(ctx, "lenient", true)
		return v != nil && v.Generation >= 1 && v.Strategy == "all"
	})
	if _, err := policy.DecodeConversation([]byte(`{"llm_base_url":"http://attacker"}`)); err == nil {
		t.Fatal("an endpoint was accepted in a conversation policy")
	}
	// A policy that went bad after it was written (its profile is gone): the trigger
	// keeps counting with the defaults, the request fails with the reason, nothing loops.
	if err := s.st.Policies().Put(ctx, "ghostly", []byte(`{"profile":"ghost"}`), 0); err != nil {
		t.Fatal(err)
	}
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("ghostly")))
	replay(t, s, "ghostly", msgs, 0)
	eventually(t, 30*time.Second, "a failed event naming the profile", func() bool {
		ev := events.last(schemas.EventFailed)
		return strings.Contains(ev.Error, `profile "ghost" does not exist`)
	})
	if n := events.count(schemas.EventFailed); n != 1 {
		t.Fatalf("%d failed events; want 1 (a bad policy is not retried)", n)
	}
}
