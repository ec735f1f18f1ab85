package systemtest

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// eventLog collects the events of one conversation.
type eventLog struct {
	mu     sync.Mutex
	events []schemas.Event
}

func collectEvents(t *testing.T, nc *nats.Conn, subject string) *eventLog {
	t.Helper()
	l := &eventLog{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		var ev schemas.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

func (l *eventLog) count(typ string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func (l *eventLog) last(typ string) schemas.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.events) - 1; i >= 0; i-- {
		if l.events[i].Type == typ {
			return l.events[i]
		}
	}
	return schemas.Event{}
}

func failingEnv(t *testing.T) stackEnv {
	env := testEnv(t, 4000)
	env.MaxAttempts = 3
	env.BackoffBase = 20 * time.Millisecond
	env.BackoffMax = 100 * time.Millisecond
	return env
}

// Invariant 4: a failing LLM leaves the previous result, is retried a bounded number of
// times, and ends as a failed event and a dead letter; the trigger then backs off.
func TestFailingLLMIsRetriedThenDeadLettered(t *testing.T) {
	env := failingEnv(t)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Status = http.StatusServiceUnavailable })
	s := startStack(t, env, llm)
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("down")))
	msgs, _ := fakellm.NeedleConversation(7) // over the threshold, under the hard limit
	replay(t, s, "down", msgs, 0)
	eventually(t, 30*time.Second, "a failed event", func() bool { return events.count(schemas.EventFailed) == 1 })
	if n := llm.Calls(); n != env.MaxAttempts {
		t.Fatalf("LLM called %d times; want %d attempts", n, env.MaxAttempts)
	}
	if ev := events.last(schemas.EventFailed); ev.Error == "" {
		t.Fatal("failed event without the error")
	}
	ctx := ctxFor(t, 10*time.Second)
	if v, _, err := s.st.Results().Get(ctx, "down", true); err != nil || v != nil {
		t.Fatalf("a failed compaction wrote a value: %+v, %v", v, err)
	}
	dead, err := jsFor(t, s.nc).Stream(ctx, s.st.Config().DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dead.GetLastMsgForSubject(ctx, must(s.st.Config().DeadSubject("down")))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	var d schemas.DeadLetter
	if err := json.Unmarshal(m.Data, &d); err != nil || d.Attempts != uint64(env.MaxAttempts) || d.Request.Conversation != "down" {
		t.Fatalf("dead letter = %+v, %v", d, err)
	}
	// The trigger backs off: more messages, over the threshold but under the hard limit
	// (past it the fallback is asked for at once), do not start another round of
	// failures. Once the trigger acknowledged them, a request they called for would have
	// its requested event stored.
	seqs := replay(t, s, "down", []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("Is the build still green?")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("Yes, every step passed.")},
	}, 0)
	triggerHandled(t, s, seqs[len(seqs)-1])
	cx, err := s.client.Context(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	if b := env.budget(); cx.Tokens < b.ThresholdTokens() || cx.Tokens >= b.HardLimitTokens() {
		t.Fatalf("context %d tokens; want over the threshold %d, under the hard limit %d", cx.Tokens, b.ThresholdTokens(), b.HardLimitTokens())
	}
	if n := storedEvents(t, s, "down", schemas.EventRequested); n != 1 {
		t.Fatalf("%d requests after a failure; want 1 (the trigger backs off)", n)
	}
}

func publishOne(t *testing.T, s *stack, conv string, m schemas.Message) uint64 {
	t.Helper()
	seq, err := s.client.Publish(ctxFor(t, 10*time.Second), conv, m)
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// Invariant 9 with the LLM down: past the hard limit, the deterministic fallback keeps
// the bound at once, and the failure is still reported.
func TestHardLimitHoldsWithTheLLMDown(t *testing.T) {
	env := failingEnv(t)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Status = http.StatusInternalServerError })
	s := startStack(t, env, llm)
	s.stop(t) // publish everything first, so the first request sees it all
	ctx := ctxFor(t, time.Minute)
	msgs, _ := fakellm.NeedleConversation(12)
	for _, m := range msgs {
		if _, err := s.client.Publish(ctx, "hard", m); err != nil {
			t.Fatal(err)
		}
	}
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("hard")))
	s2 := runStack(t, s.nc, s.st, env, llm)
	eventually(t, 30*time.Second, "a completed event", func() bool { return events.count(schemas.EventCompleted) >= 1 })
	v, _, err := s2.st.Results().Get(ctx, "hard", true)
	if err != nil || v == nil {
		t.Fatalf("no value: %v", err)
	}
	if !v.Fallback || v.Model != "extractive" {
		t.Fatalf("value fallback=%v model=%q; want the extractive fallback", v.Fallback, v.Model)
	}
	if v.TokensBefore < env.budget().HardLimitTokens() || v.TokensAfter > env.budget().TargetTokens() {
		t.Fatalf("tokens %d → %d; want from over the hard limit %d to under the target %d",
			v.TokensBefore, v.TokensAfter, env.budget().HardLimitTokens(), env.budget().TargetTokens())
	}
	if ev := events.last(schemas.EventCompleted); ev.Error == "" {
		t.Fatal("the completed fallback event does not report the summarizer's failure")
	}
	// Past the hard limit the fallback comes at once: no second attempt while the
	// context stays over the bound.
	if n := llm.Calls(); n != 1 {
		t.Fatalf("LLM called %d times; want 1 (the fallback is written on the first failure past the hard limit)", n)
	}
	cx, err := s2.client.Context(ctx, "hard")
	if err != nil {
		t.Fatal(err)
	}
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		t.Fatal(err)
	}
	if cx.Tokens > env.budget().HardLimitTokens() {
		t.Fatalf("context %d tokens over the hard limit", cx.Tokens)
	}
}

// Invariant 9 with the LLM down, when the hard limit is crossed after a failure: the
// failure's backoff (a minute) schedules a retry for its end, and that retry must not hold
// the request the crossing calls for. The fallback comes within seconds, well before the
// backoff ends.
func TestHardLimitCrossedDuringFailureBackoff(t *testing.T) {
	env := failingEnv(t)
	const wait = 15 * time.Second
	if b := env.triggers().FailureBackoff; b < 2*wait {
		t.Fatalf("the trigger's failure backoff %s is too short to tell a request from the retry at its end", b)
	}
	llm := fakellm.New(t)
	var callsMu sync.Mutex
	var callAt []time.Time // when each LLM call came
	llm.Set(func(f *fakellm.LLM) {
		f.Status = http.StatusInternalServerError
		f.Hook = func() {
			callsMu.Lock()
			defer callsMu.Unlock()
			callAt = append(callAt, time.Now())
		}
	})
	s := startStack(t, env, llm)
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("crossing")))
	msgs, _ := fakellm.NeedleConversation(10)
	under := 1 + 7*4 // the system prompt and 7 turns: over the threshold, under the hard limit
	replay(t, s, "crossing", msgs[:under], 0)
	eventually(t, 30*time.Second, "a failed event", func() bool { return events.count(schemas.EventFailed) == 1 })
	// A small message handled after the failure is held by the backoff, which
	// schedules the retry at its end.
	tiny := publishOne(t, s, "crossing", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("still there?")})
	triggerHandled(t, s, tiny)
	if n := storedEvents(t, s, "crossing", schemas.EventRequested); n != 1 {
		t.Fatalf("%d requests under the hard limit after a failure; want 1 (the backoff holds)", n)
	}
	callsMu.Lock()
	calls := len(callAt)
	callsMu.Unlock()

	replay(t, s, "crossing", msgs[under:], 0) // past the hard limit
	ctx := ctxFor(t, time.Minute)
	var v *schemas.Result
	eventually(t, wait, "the fallback value", func() bool {
		var err error
		v, _, err = s.st.Results().Get(ctx, "crossing", true)
		return err == nil && v != nil && v.Fallback
	})
	if v.TokensBefore < env.budget().HardLimitTokens() || v.TokensAfter > env.budget().TargetTokens() {
		t.Fatalf("tokens %d → %d; want from over the hard limit %d to under the target %d",
			v.TokensBefore, v.TokensAfter, env.budget().HardLimitTokens(), env.budget().TargetTokens())
	}
	// Up to the fallback: the calls after it are the repair's, a later and separate
	// thing (the fallback's request stays queued to repair it once the LLM answers),
	// which comes too.
	eventually(t, 10*time.Second, "the repair's first attempt", func() bool {
		callsMu.Lock()
		defer callsMu.Unlock()
		return callAt[len(callAt)-1].After(v.CreatedAt)
	})
	callsMu.Lock()
	n := 0
	for _, at := range callAt[calls:] {
		if !at.After(v.CreatedAt) {
			n++
		}
	}
	callsMu.Unlock()
	if n != 1 {
		t.Fatalf("LLM called %d times past the hard limit before the fallback; want 1 (then the fallback)", n)
	}
	cx, err := s.client.Context(ctx, "crossing")
	if err != nil {
		t.Fatal(err)
	}
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		t.Fatal(err)
	}
	if cx.Tokens > env.budget().HardLimitTokens() {
		t.Fatalf("context %d tokens over the hard limit %d", cx.Tokens, env.budget().HardLimitTokens())
	}
}

// Invariant 5: a compaction that does not shrink the context enough is declined and
// not asked for again until the conversation grows.
func TestDeclinedCompactionDoesNotLoop(t *testing.T) {
	env := testEnv(t, 4000)
	env.Policy["min_progress"] = "0.99" // nothing can shrink the context by 99%
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	events := collectEvents(t, s.nc, must(s.st.Config().EventSubject("stuck")))
	msgs, _ := fakellm.NeedleConversation(8)
	seqs := replay(t, s, "stuck", msgs, 0)
	settle(t, s)
	eventually(t, 10*time.Second, "a declined event", func() bool { return events.count(schemas.EventDeclined) >= 1 })
	// Messages that arrived after the worker loaded the conversation are growth and may
	// be asked for once more. Wait until every message was handled by the trigger and
	// every request it made has its outcome, with none queued or being worked on.
	triggerHandled(t, s, seqs[len(seqs)-1])
	outcomes := func() (requested, declined int) {
		return storedEvents(t, s, "stuck", schemas.EventRequested), storedEvents(t, s, "stuck", schemas.EventDeclined)
	}
	eventually(t, time.Minute, "every request to have its outcome", func() bool {
		r, d := outcomes()
		return idleWorkers(t, s) && r == d
	})
	_, before := outcomes()
	calls := llm.Calls()
	if before > 3 {
		t.Fatalf("%d declines for one burst of messages", before)
	}
	// A small message is no growth: the trigger handles it, with the decline known,
	// and holds.
	tiny := publishOne(t, s, "stuck", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("ok")})
	triggerHandled(t, s, tiny)
	// A loop would ask again within one retry delay of the trigger (200 ms here): no
	// state says "no retry is scheduled", so watch ten of them.
	time.Sleep(10 * env.RetryDelay)
	if r, d := outcomes(); r != d || d != before || llm.Calls() != calls || !idleWorkers(t, s) {
		t.Fatalf("requested %d, declined %d → %d, LLM calls %d → %d while the conversation did not grow: a loop", r, before, d, calls, llm.Calls())
	}
	v, _, err := s.st.Results().Get(ctxFor(t, 5*time.Second), "stuck", true)
	if err != nil || v == nil || v.DeclinedAtSeq == 0 || v.Generation != 0 {
		t.Fatalf("value after decline = %+v, %v; want declined_at_seq set and no generation", v, err)
	}
	// Growth asks again.
	more, _ := fakellm.NeedleConversation(3)
	replay(t, s, "stuck", more[1:], 0)
	eventually(t, 10*time.Second, "a request after growth", func() bool { return events.count(schemas.EventDeclined) > before })
}
