package triggers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/triggers"
)

// Each kind of trigger, alone, with the reason it records.
func TestTriggerKinds(t *testing.T) {
	big := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat("o", 2400))} // ~604 tokens
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("done")}
	tests := []struct {
		name       string
		settings   func(*policy.Settings)
		msgs       []schemas.Message
		wantKind   string
		wantReason string
	}{
		{"token limit", func(s *policy.Settings) { s.TokenLimit = 2200 },
			repeat(text(800), 11), schemas.TriggerBudget, "token_limit 2200"},
		{"soft threshold", func(s *policy.Settings) { s.SoftThreshold = 0.6 },
			repeat(text(800), 12), schemas.TriggerBudget, "compacting ahead of time"},
		{"max rounds", func(s *policy.Settings) { s.MaxRounds = 3 },
			repeat(reply, 3), schemas.TriggerBudget, "3 assistant rounds since the last compaction"},
		{"large tool output", func(s *policy.Settings) { s.ToolOutputTriggerTokens = 500 },
			[]schemas.Message{text(40), call, big}, schemas.TriggerStructural, "tool_output_trigger_tokens 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nc, st := setup(t)
			reqs := watchRequests(t, nc, st)
			tr := start(t, st, tc.settings)
			sum := 0
			for i, m := range tc.msgs {
				publish(t, st, "k", m)
				sum += tokens.Message(&m)
				if i < len(tc.msgs)-1 {
					// The count shows the message once the trigger decided on it.
					waitFor(t, fmt.Sprintf("message %d to be counted", i+1), func() bool { got, _ := tr.b.TokensOf("k"); return got == sum })
					noRequest(t, nc, st, reqs, fmt.Sprintf("after %d of %d messages", i+1, len(tc.msgs)))
				}
			}
			waitFor(t, "a request", func() bool { return reqs.count() == 1 })
			got := reqs.got[0]
			if got.Trigger != tc.wantKind || !strings.Contains(got.Reason, tc.wantReason) {
				t.Fatalf("request %s %q; want %s with %q", got.Trigger, got.Reason, tc.wantKind, tc.wantReason)
			}
		})
	}
}

// The structural trigger waits for the round to complete, like every kind.
func TestStructuralTriggerRespectsTheGuard(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st, func(s *policy.Settings) { s.ToolOutputTriggerTokens = 500 })
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}},
		{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	result := schemas.Message{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(strings.Repeat("o", 4000))}
	publish(t, st, "g", call)
	publish(t, st, "g", result)
	want := tokens.Message(&call) + tokens.Message(&result)
	waitFor(t, "the large output to be counted", func() bool { got, _ := tr.b.TokensOf("g"); return got == want })
	noRequest(t, nc, st, reqs, "structural request while call b is open")
	publish(t, st, "g", schemas.Message{Role: schemas.RoleTool, ToolCallID: "b", Content: schemas.Text("ok")})
	waitFor(t, "the structural request once the round is whole", func() bool { return reqs.count() == 1 })
	if reqs.got[0].Trigger != schemas.TriggerStructural {
		t.Fatalf("trigger %s; want structural", reqs.got[0].Trigger)
	}
}

func TestIdleTriggerFiresAfterRestart(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	idle := func(s *policy.Settings) { s.IdleAfter = 2 * time.Second; s.IdleThreshold = 0.1 }
	first := start(t, st, idle)
	for range 3 {
		publish(t, st, "quiet", text(800)) // ~600 tokens > 0.1 × 4000
	}
	last := publish(t, st, "tiny", text(4)) // under idle_threshold: never compacted when idle
	handled(t, nc, st, last)                // every message counted and its idle timer armed
	first.stop()                            // the trigger process dies before the conversations go quiet
	// The timers expire while no trigger runs: each leaves its marker in ACTIVITY.
	markers := idleMarkers(t, nc, st, "quiet", "tiny")
	noRequest(t, nc, st, reqs, "while no trigger was running")
	start(t, st, idle) // a new process: the markers left by the expired timers are waiting
	waitFor(t, "the idle request", func() bool { return reqs.count() >= 1 })
	// Both markers handled: the tiny conversation's decided too.
	acked(t, nc, st.Config().ActivityStream, st.Config().IdleConsumer, markers)
	reqs.sync(t)
	if n, q := reqs.count(), stored(t, nc, st); n != 1 || q != 1 {
		t.Fatalf("%d requests published, %d stored; want one for the quiet conversation only", n, q)
	}
	got := reqs.got[0]
	if got.Trigger != schemas.TriggerTemporal || got.Conversation != "quiet" || !strings.Contains(got.Reason, "idle for") {
		t.Fatalf("request = %+v", got)
	}
}

// idleMarkers waits until the idle timer of each conversation expired, leaving its
// delete marker (the idle signal) in ACTIVITY, and returns the newest marker's sequence.
func idleMarkers(t *testing.T, nc *nats.Conn, st *jetstream.Store, convs ...string) uint64 {
	t.Helper()
	cfg := st.Config()
	stream, err := testJS(t, nc).Stream(context.Background(), cfg.ActivityStream)
	if err != nil {
		t.Fatal(err)
	}
	var newest uint64
	for _, conv := range convs {
		subj, err := cfg.ActivitySubject(conv)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the idle marker of "+conv, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			m, err := stream.GetLastMsgForSubject(ctx, subj)
			if err != nil || m.Header.Get("Nats-Marker-Reason") == "" {
				return false
			}
			newest = max(newest, m.Sequence)
			return true
		})
	}
	return newest
}

// A conversation that keeps receiving messages is not idle: the idle request comes
// only once it has been quiet for idle_after (less the second the trigger allows for
// re-arming its timer at most every few seconds).
func TestIdleTriggerWaitsForQuiet(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	const idleAfter = 3 * time.Second
	start(t, st, func(s *policy.Settings) { s.IdleAfter = idleAfter; s.IdleThreshold = 0.1 })
	var last uint64
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) { // busy for longer than idle_after
		last = publish(t, st, "busy", text(400))
		time.Sleep(250 * time.Millisecond) // the pace of the conversation, not a wait for a condition
	}
	waitFor(t, "the idle request once quiet", func() bool { return reqs.count() >= 1 })
	reqs.sync(t)
	if n := reqs.count(); n != 1 {
		t.Fatalf("%d idle requests; want 1", n)
	}
	reqs.mu.Lock()
	got := reqs.got[0]
	reqs.mu.Unlock()
	m, err := testJS(t, nc).Stream(context.Background(), st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	lastMsg, err := m.GetMsg(context.Background(), last)
	if err != nil {
		t.Fatal(err)
	}
	if got.Trigger != schemas.TriggerTemporal || got.UpToSeq != last {
		t.Fatalf("request = %+v; want a temporal request covering the last message %d", got, last)
	}
	if quiet := got.RequestedAt.Sub(lastMsg.Time); quiet < idleAfter-time.Second {
		t.Fatalf("idle request %s after the last message; want ≥ %s: it came while messages kept arriving", quiet, idleAfter-time.Second)
	}
}

func repeat(m schemas.Message, n int) []schemas.Message {
	out := make([]schemas.Message, n)
	for i := range out {
		out[i] = m
	}
	return out
}

// words counts one token per word: a stand-in for an exact tokenizer.
type words struct{}

func (words) Count(s string) int { return len(strings.Fields(s)) }

// A conversation whose policy names a tokenizer is counted with it.
func TestTokenizerFromThePolicy(t *testing.T) {
	_, st := setup(t)
	cfg := testConfig()
	cfg.Counters = func(name string) (tokens.Counter, error) {
		if name != "o200k_base" {
			return nil, fmt.Errorf("unknown %q", name)
		}
		return words{}, nil
	}
	b, err := triggers.New(cfg, st, fixed{func(s *policy.Settings) { s.Tokenizer = "o200k_base" }}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, st, "w", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("one two three four five")})
	want := tokens.PerMessage + 5
	waitFor(t, "the policy's tokenizer to count", func() bool { got, _ := b.TokensOf("w"); return got == want })
}
