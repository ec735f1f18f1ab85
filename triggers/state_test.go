package triggers

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// state is a conversation state with a 4,000-token window and the given tokens.
func state(toks int, change ...func(*policy.Settings)) *convState {
	s := policy.Defaults()
	s.ContextWindow = 4000
	for _, fn := range change {
		fn(&s)
	}
	return &convState{id: "c", tokens: toks, shared: &shared{settings: s, budget: s.Budget(), count: tokens.Chars4{}}}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		give     *convState
		wantKind string
		wantWhy  string
	}{
		{"under every rule", state(100), "", ""},
		{"threshold", state(3000), schemas.TriggerBudget, "threshold 3000"},
		{"token limit", state(2200, func(s *policy.Settings) { s.TokenLimit = 2000 }), schemas.TriggerBudget, "token_limit 2000"},
		{"soft threshold", state(2500, func(s *policy.Settings) { s.SoftThreshold = 0.6 }), schemas.TriggerBudget, "ahead of time"},
		{"structural first", func() *convState { c := state(3000); c.structural = "big output"; return c }(), schemas.TriggerStructural, "big output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, why := tt.give.decide()
			if kind != tt.wantKind || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("decide() = %q, %q; want %q containing %q", kind, why, tt.wantKind, tt.wantWhy)
			}
		})
	}
}

func TestHold(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		give func() *convState
		want string // part of the reason; "" when a request may go
	}{
		{"nothing holds", func() *convState { return state(3000) }, ""},
		{"open tool call", func() *convState { c := state(3000); c.open = []string{"a"}; return c }, "tool calls"},
		{"in flight", func() *convState { c := state(3000); c.inFlightUntil = stampOf(now.Add(time.Minute)); return c }, "in flight"},
		{"backing off under the hard limit", func() *convState {
			c := state(3000)
			c.failed(now, time.Minute, time.Hour)
			return c
		}, "backing off"},
		{"past the hard limit a backoff does not hold", func() *convState {
			c := state(3900)
			c.failed(now, time.Minute, time.Hour)
			return c
		}, ""},
		{"declined, not grown", func() *convState {
			c := state(3000)
			c.declinedAtSeq, c.tokensAtDecline = 10, 2950
			return c
		}, "declined"},
		{"declined, grown past regrow", func() *convState {
			c := state(3300)
			c.declinedAtSeq, c.tokensAtDecline = 10, 3000
			return c
		}, ""},
		{"a scheduled retry under the hard limit", func() *convState {
			c := state(3000)
			c.retry = time.NewTimer(time.Hour)
			return c
		}, "retry"},
		// A failure's backoff schedules a retry for its end: past the hard limit neither
		// holds the request back, or the fallback would wait for the backoff.
		{"past the hard limit a retry at the end of a backoff does not hold", func() *convState {
			c := state(3900)
			c.failed(now, time.Minute, time.Hour)
			c.retry, c.retryAt = time.NewTimer(time.Minute), c.backoffUntil
			return c
		}, ""},
		{"past the hard limit a request in flight still holds", func() *convState {
			c := state(3900)
			c.inFlightUntil = stampOf(now.Add(time.Minute))
			c.retry, c.retryInFlight = time.NewTimer(time.Minute), true
			return c
		}, "in flight"},
		{"declined under the hard limit, past it since", func() *convState {
			c := state(3850)
			c.declinedAtSeq, c.tokensAtDecline = 10, 3700
			return c
		}, ""},
		{"declined past the hard limit, not grown", func() *convState {
			c := state(3900)
			c.declinedAtSeq, c.tokensAtDecline = 10, 3850
			return c
		}, "declined"},
		{"forgotten, even past the hard limit", func() *convState {
			c := state(3900)
			c.forgotten = true
			return c
		}, "forgotten"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.give()
			if c.retry != nil {
				defer c.retry.Stop()
			}
			got := c.hold(now, 0.05)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("hold() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestFailureBackoffDoublesToItsMax(t *testing.T) {
	now := time.Now()
	c := state(3000)
	var got []time.Duration
	for range 5 {
		c.failed(now, time.Minute, 5*time.Minute)
		got = append(got, c.backoffUntil.time().Sub(now))
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoffs %v; want %v", got, want)
		}
	}
}

// A value's overrides (a masked tool output, a truncation) are what every reader sends
// in place of those messages: a rebuild counts them so, pinned or in the tail. Before,
// the raw messages were counted, a masked conversation looked as large as before its
// masking, and the trigger asked for a compaction on every new message.
func TestCountLoadedCountsTheValuesOverrides(t *testing.T) {
	big := strings.Repeat("a long build log line\n", 400) // about 2,200 tokens
	entry := func(seq uint64, m schemas.Message) schemas.Entry { return schemas.Entry{Seq: seq, Message: m} }
	tail := []schemas.Entry{
		entry(1, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("run the build")}),
		entry(2, schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "call_1", Type: "function",
			Function: schemas.FunctionCall{Name: "bash", Arguments: `{"cmd":"make"}`}}}}),
		entry(3, schemas.Message{Role: schemas.RoleTool, ToolCallID: "call_1", Content: schemas.Text(big)}),
		entry(4, schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("it failed")}),
	}
	raw := state(0)
	raw.countLoaded(tokens.Chars4{}, &schemas.Result{Generation: 1, TailStartSeq: 1}, nil, tail)
	masked := state(0)
	v := &schemas.Result{Generation: 2, TailStartSeq: 1, Strategy: "mask",
		Overrides: []schemas.Override{{Seq: 3, Note: "[tool output of bash masked; recall it with compactor recall c --from-seq 2 --to-seq 3]"}}}
	masked.countLoaded(tokens.Chars4{}, v, nil, tail)
	if raw.tokens < 2000 || masked.tokens > 200 {
		t.Fatalf("counted %d tokens of the raw tail and %d of the masked one; want over 2,000 and under 200", raw.tokens, masked.tokens)
	}
	if len(masked.open) != 0 {
		t.Errorf("the masked tool output no longer answers its call: open %v", masked.open)
	}
	if kind, why := masked.decide(); kind != "" {
		t.Errorf("the masked conversation asks for a compaction: %s (%s)", kind, why)
	}
}
