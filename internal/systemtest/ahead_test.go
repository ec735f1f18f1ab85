package systemtest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/schemas"
)

// What a reader sees with compaction ahead of time: soft threshold 0.5, threshold 0.75,
// target 0.3, window 8,000. The summarizer is held until the test lets it answer, so
// "messages keep arriving while a compaction runs" does not depend on the machine's
// speed: each time a compaction's summarizer call is under way, four more messages
// (about 1,200 tokens, within the 2,000 between the soft threshold and the threshold)
// arrive and are read before it may finish. The bound: every read stays under the
// threshold, and reads are answered while a compaction is in flight, never waiting
// for it.
func TestAheadOfTimeCompactionKeepsReadsUnderTheThreshold(t *testing.T) {
	env := testEnv(t, 8000)
	env.Policy["soft_threshold"] = "0.5"
	env.Policy["target"] = "0.3"
	llm := fakellm.New(t)
	llm.Release(true) // hold every summarizer call
	s := startStack(t, env, llm)
	t.Cleanup(func() { llm.Release(false) })
	ctx := ctxFor(t, 5*time.Minute)
	threshold := env.budget().ThresholdTokens()
	filler := strings.Repeat("status line with nothing of note. ", 36) // ~300 tokens
	const during, wantGens = 4, 3
	var latencies []time.Duration
	maxTokens, gens, readsDuring := 0, uint64(0), 0
	compactions := 0 // requests seen so far
	inFlight := -1   // messages since the current compaction's summarizer call began; -1: none
	for i := 0; gens < wantGens; i++ {
		if i == 200 {
			t.Fatalf("only %d generations after %d messages: the soft threshold did not fire", gens, i)
		}
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		seq := publishOne(t, s, "ahead", schemas.Message{Role: role, Content: schemas.Text(filler)})
		triggerHandled(t, s, seq) // counted, and a compaction queued if one is due
		start := time.Now()
		cx, err := s.client.Context(ctx, "ahead")
		latencies = append(latencies, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		maxTokens, gens = max(maxTokens, cx.Tokens), max(gens, cx.Generation)
		if cx.Tokens >= threshold {
			t.Fatalf("read %d: context %d tokens ≥ threshold %d (generation %d): compaction did not keep ahead", i, cx.Tokens, threshold, cx.Generation)
		}
		if inFlight >= 0 {
			inFlight++
			readsDuring++ // answered while the summarizer is held: the read did not wait
		} else if storedEvents(t, s, "ahead", schemas.EventRequested) > compactions {
			compactions++
			eventually(t, time.Minute, "the summarizer call of the compaction", func() bool { return llm.Held() >= compactions })
			inFlight = 0
		}
		if inFlight == during {
			completed := storedEvents(t, s, "ahead", schemas.EventCompleted)
			eventually(t, time.Minute, "the compaction to complete", func() bool {
				llm.Release(true) // also any further call of the same compaction
				return storedEvents(t, s, "ahead", schemas.EventCompleted) > completed
			})
			inFlight = -1
		}
	}
	if readsDuring < during*(wantGens-1) {
		t.Fatalf("%d reads while a compaction was in flight; want ≥ %d", readsDuring, during*(wantGens-1))
	}
	slices.Sort(latencies)
	t.Logf("%d reads, %d of them while a compaction ran: largest context %d tokens (threshold %d), %d generations; read latency p50 %s, p99 %s, max %s",
		len(latencies), readsDuring, maxTokens, threshold, gens, latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
}

// Still over budget right after a compaction (a burst arrived while it ran): the worker
// compacts again at once with the next, more aggressive setting, and stops escalating.
func TestStillOverBudgetEscalates(t *testing.T) {
	env := testEnv(t, 8000)
	env.RetryDelay = time.Minute // keep the trigger out of the way: the worker re-evaluates
	llm := fakellm.New(t)
	llm.Release(true) // hold the first compaction's summarizer call until the burst is in
	s := startStack(t, env, llm)
	t.Cleanup(func() { llm.Release(false) })
	ctx := ctxFor(t, time.Minute)
	h := watchValues(t, s, "burst")
	msgs, _ := fakellm.NeedleConversation(14) // over the threshold
	replay(t, s, "burst", msgs, 0)
	eventually(t, time.Minute, "the compaction's summarizer call", func() bool { return llm.Held() >= 1 })
	more, _ := fakellm.NeedleConversation(14)
	for _, m := range more[1:] { // a burst while the summarizer works
		if _, err := s.client.Publish(ctx, "burst", m); err != nil {
			t.Fatal(err)
		}
	}
	llm.Release(false)
	eventually(t, time.Minute, "an escalated compaction", func() bool {
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
