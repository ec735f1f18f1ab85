package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// What a reader sees with compaction ahead of time: a summarizer that takes 1.5 s,
// messages arriving at 2 a second (about 600 tokens a second), soft threshold 0.5,
// threshold 0.75, window 8,000. Every read is answered from KV and the stream, never
// waiting for a compaction, and the context stays under the threshold throughout.
func TestAheadOfTimeCompactionKeepsReadsUnderTheThreshold(t *testing.T) {
	env := testEnv(t, 8000)
	env.Policy["soft_threshold"] = "0.5"
	env.Policy["target"] = "0.3"
	llm := newFakeLLM(t)
	llm.set(func(f *fakeLLM) { f.delay = 1500 * time.Millisecond })
	s := startStack(t, env, llm)
	ctx := ctxFor(t, 2*time.Minute)
	threshold := env.budget().ThresholdTokens()
	filler := strings.Repeat("status line with nothing of note. ", 36) // ~300 tokens
	var latencies []time.Duration
	maxTokens, gens := 0, uint64(0)
	const rate, seconds = 2, 16
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := 0; i < rate*seconds; i++ {
		<-tick.C
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		seq, err := s.client.Publish(ctx, "ahead", schemas.Message{Role: role, Content: schemas.Text(filler)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		cx, err := s.client.Context(ctx, "ahead")
		latencies = append(latencies, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		if cx.TailStartSeq <= seq && !slices.Contains(cx.Seqs, seq) {
			// Direct gets may lag a moment; that is what AtLeastSeq is for. Not an error.
			t.Logf("read %d did not see seq %d yet", i, seq)
		}
		maxTokens, gens = max(maxTokens, cx.Tokens), max(gens, cx.Generation)
		if cx.Tokens >= threshold {
			t.Fatalf("read %d: context %d tokens ≥ threshold %d (generation %d): compaction did not keep ahead", i, cx.Tokens, threshold, cx.Generation)
		}
	}
	if gens < 2 {
		t.Fatalf("only %d generations: the soft threshold never fired", gens)
	}
	slices.Sort(latencies)
	t.Logf("%d reads while %d messages/s arrived: largest context %d tokens (threshold %d), %d generations; read latency p50 %s, p99 %s, max %s",
		len(latencies), rate, maxTokens, threshold, gens, latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
}

// Still over budget right after a compaction (a burst arrived while it ran): the worker
// compacts again at once with the next, more aggressive setting, and stops escalating.
func TestStillOverBudgetEscalates(t *testing.T) {
	env := testEnv(t, 8000)
	env.RetryDelay = time.Minute // keep the trigger out of the way: the worker re-evaluates
	llm := newFakeLLM(t)
	llm.set(func(f *fakeLLM) { f.delay = time.Second })
	s := startStack(t, env, llm)
	ctx := ctxFor(t, time.Minute)
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("burst")))
	h := watchValues(t, s, "burst")
	msgs, _ := needleConversation(14) // over the threshold
	replay(t, s, "burst", msgs, 0)
	eventually(t, 10*time.Second, "the compaction to start", func() bool { return events.count(schemas.EventStarted) >= 1 })
	more, _ := needleConversation(14)
	for _, m := range more[1:] { // a burst while the summarizer works
		if _, err := s.client.Publish(ctx, "burst", m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "an escalated compaction", func() bool {
		for _, v := range h.snapshot() {
			if strings.Contains(v.Reason, "(escalation 1)") {
				return true
			}
		}
		return false
	})
	settle(t, s)
	invariants(t, s, "burst", env, h.snapshot(), llm)
	for _, v := range h.snapshot() {
		if strings.Contains(v.Reason, "(escalation 3)") {
			t.Fatal("escalated past the most aggressive setting")
		}
	}
}
