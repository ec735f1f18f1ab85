package systemtest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// The tests of this file hold the job and trigger protocols to what the design says
// when a payload, a stream or a process misbehaves.

// deadLog collects every dead letter.
type deadLog struct {
	mu      sync.Mutex
	letters []schemas.DeadLetter
	subjs   []string
}

func collectDead(t *testing.T, nc *nats.Conn) *deadLog {
	t.Helper()
	l := &deadLog{}
	sub, err := nc.Subscribe("compact.dead.>", func(m *nats.Msg) {
		var d schemas.DeadLetter
		_ = json.Unmarshal(m.Data, &d)
		l.mu.Lock()
		l.letters = append(l.letters, d)
		l.subjs = append(l.subjs, m.Subject)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return l
}

func (l *deadLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.letters)
}

func (l *deadLog) get(i int) (string, schemas.DeadLetter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subjs[i], l.letters[i]
}

// Crack 1: a request is validated against its subject before anything is read. A
// request for "*", one that does not decode, and one whose payload names another
// conversation than its subject are terminated with a dead letter that says why, and
// no conversation is sent to the LLM.
func TestInvalidRequestsAreRefusedBeforeAnythingIsRead(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	dead := collectDead(t, s.nc)
	ctx := ctxFor(t, time.Minute)
	// Private content that must not leak to the LLM.
	for _, conv := range []string{"victim", "other"} {
		if _, err := s.client.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("secret of " + conv)}); err != nil {
			t.Fatal(err)
		}
	}
	js := jsFor(t, s.nc)
	req := func(conv string) string {
		b, _ := json.Marshal(schemas.Request{RequestID: "r-" + conv, Conversation: conv, Trigger: schemas.TriggerManual, RequestedAt: time.Now()})
		return string(b)
	}
	for i, tc := range []struct {
		subject, payload, want string
	}{
		{"compact.request.victim", `{"request_id":"r1","conversation":"*","trigger":"manual","requested_at":"2026-01-01T00:00:00Z"}`, "conversation"},
		{"compact.request.victim", `{"request_id":`, "undecodable"},
		{"compact.request.attacker", req("victim"), `names conversation "victim" but was queued for "attacker"`},
	} {
		if _, err := js.Publish(ctx, tc.subject, []byte(tc.payload)); err != nil {
			t.Fatalf("%s: %v", tc.subject, err)
		}
		eventually(t, 20*time.Second, "a dead letter for "+tc.subject, func() bool { return dead.count() == i+1 })
		// The dead letter goes out before the request is terminated (a crash between
		// them must not lose the report), and the queue holds one request a subject:
		// the next request on the same subject waits for this one to leave it.
		settle(t, s)
		subj, d := dead.get(i)
		if !strings.HasPrefix(d.Error, "invalid request: ") || !strings.Contains(d.Error, tc.want) {
			t.Errorf("dead letter for %s says %q; want the reason, naming %q", tc.subject, d.Error, tc.want)
		}
		if want := "compact.dead." + strings.TrimPrefix(tc.subject, "compact.request."); subj != want {
			t.Errorf("dead letter on %s; want %s (the subject's conversation)", subj, want)
		}
	}
	if n := llm.Calls(); n != 0 {
		t.Fatalf("the LLM was called %d times for invalid requests; want 0", n)
	}
	for _, conv := range []string{"victim", "other", "attacker"} {
		if v, _, err := s.st.Results().Get(ctx, conv, true); err != nil || v != nil {
			t.Fatalf("%s has a value after invalid requests: %+v, %v", conv, v, err)
		}
	}
}

// Crack 2: a pinned message that left CHAT by its age limit is skipped and reported by
// readers, dropped by the next compaction, and never wedges the trigger.
func TestPinnedMessageGoneByAgeIsSkipped(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := env.jetstream()
	cfg.ChatMaxAge = 3 * time.Second
	cfg.DuplicateWindow = time.Second // at most the age limit
	st, err := jetstream.Provision(ctxFor(t, 10*time.Second), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := runStack(t, nc, st, env, llm)
	events := collectEvents(t, nc, "compact.event.aging")
	msgs, _ := fakellm.NeedleConversation(8) // a system prompt (pinned), then over the threshold
	replay(t, s, "aging", msgs, 0)
	eventually(t, 30*time.Second, "a first compaction", func() bool { return events.count(schemas.EventCompleted) >= 1 })
	settle(t, s)
	ctx := ctxFor(t, time.Minute)
	v, _, err := st.Results().Get(ctx, "aging", true)
	if err != nil || v == nil || !slices.Contains(v.PinnedSeqs, 1) {
		t.Fatalf("value %+v, %v; want the system prompt (seq 1) pinned", v, err)
	}
	// The age limit removes the system prompt.
	js := jsFor(t, nc)
	eventually(t, 30*time.Second, "the system prompt to age out", func() bool {
		str, err := js.Stream(ctx, cfg.ChatStream)
		if err != nil {
			return false
		}
		info, err := str.Info(ctx)
		return err == nil && info.State.FirstSeq > 1
	})
	cx, err := s.client.Context(ctx, "aging")
	if err != nil {
		t.Fatalf("read with a pinned message gone: %v", err)
	}
	if !slices.ContainsFunc(cx.Skipped, func(sk rounds.Skipped) bool {
		return sk.Seq == 1 && strings.Contains(sk.Reason, "not in the conversation")
	}) {
		t.Fatalf("skipped = %+v; want seq 1 reported as gone", cx.Skipped)
	}
	// The conversation goes on, and the next compaction drops the gone sequence.
	completed := events.count(schemas.EventCompleted)
	more, _ := fakellm.NeedleConversation(8)
	replay(t, s, "aging", more[1:], 0)
	eventually(t, 30*time.Second, "a compaction after the pinned message left", func() bool {
		return events.count(schemas.EventCompleted) > completed
	})
	settle(t, s)
	v, _, err = st.Results().Get(ctx, "aging", true)
	if err != nil || v == nil || slices.Contains(v.PinnedSeqs, 1) {
		t.Fatalf("value %+v, %v; want seq 1 no longer pinned", v, err)
	}
	if n := events.count(schemas.EventFailed); n != 0 {
		t.Fatalf("%d failed events; want none", n)
	}
}

// Crack 2: a conversation whose value does not decode (garbage, or a newer schema) is
// reported with a failed event after a bounded number of attempts and set aside; the
// other conversations are compacted as usual.
func TestUnreadableValueIsIsolated(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"garbage", `{"schema_version":1,"conversation":`, "does not decode"},
		{"newer schema", `{"schema_version":9,"conversation":"poison"}`, "schema_version 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, 4000)
			llm := fakellm.New(t)
			s := startStack(t, env, llm)
			ctx := ctxFor(t, time.Minute)
			if _, err := resultsFor(t, s.nc, s.st.Config()).Put(ctx, "poison", []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			poison := collectEvents(t, s.nc, "compact.event.poison")
			healthy := collectEvents(t, s.nc, "compact.event.healthy")
			msgs, _ := fakellm.NeedleConversation(8)
			for _, m := range msgs {
				for _, conv := range []string{"poison", "healthy"} {
					if _, err := s.client.Publish(ctx, conv, m); err != nil && conv == "healthy" {
						t.Fatal(err)
					}
				}
			}
			eventually(t, 30*time.Second, "a failed event for the unreadable conversation", func() bool {
				return poison.count(schemas.EventFailed) >= 1
			})
			if ev := poison.last(schemas.EventFailed); !strings.Contains(ev.Error, tc.want) {
				t.Errorf("failed event error %q; want it to name %q", ev.Error, tc.want)
			}
			eventually(t, 30*time.Second, "the healthy conversation to be compacted", func() bool {
				return healthy.count(schemas.EventCompleted) >= 1
			})
			// The trigger holds none of the poisoned conversation's messages.
			eventually(t, 30*time.Second, "the trigger consumer to settle", func() bool {
				info, err := jsFor(t, s.nc).Consumer(ctx, s.st.Config().ChatStream, s.st.Config().TriggerConsumer)
				if err != nil {
					return false
				}
				ci, err := info.Info(ctx)
				return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
			})
		})
	}
}

// Crack 5: a request that could not be queued is not lost on failover: the message
// that crossed the threshold is not acknowledged, and a fresh trigger process that
// takes over asks for it, with no new message.
func TestUnqueuedRequestSurvivesTriggerFailover(t *testing.T) {
	env := testEnv(t, 4000)
	env.RetryDelay = 500 * time.Millisecond
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	ctx := ctxFor(t, 2*time.Minute)
	cfg := s.st.Config()
	js := jsFor(t, s.nc)
	waitForWorkers(t, s)
	if err := js.DeleteStream(ctx, cfg.RequestsStream); err != nil {
		t.Fatal(err)
	}
	msgs, _ := fakellm.NeedleConversation(8)
	seqs := replay(t, s, "failover", msgs, 0)
	last := seqs[len(seqs)-1]
	// The trigger has seen every message, and holds at least one unacknowledged (the one
	// whose request could not be queued, redelivered again and again).
	eventually(t, 30*time.Second, "the trigger to hold an unqueued request's message", func() bool {
		c, err := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.Delivered.Stream >= last && ci.NumAckPending >= 1
	})
	s.stop(t)
	events := collectEvents(t, s.nc, "compact.event.failover")
	if _, err := jetstream.Provision(ctx, s.nc, cfg); err != nil { // the queue is back
		t.Fatal(err)
	}
	runStack(t, s.nc, s.st, env, llm) // a new process: nothing in memory
	eventually(t, 30*time.Second, "the new trigger to queue the request", func() bool {
		return events.count(schemas.EventRequested) >= 1
	})
	eventually(t, 30*time.Second, "the compaction", func() bool { return events.count(schemas.EventCompleted) >= 1 })
}

// Crack 6: when the acknowledgement fails after the result was written, the compaction
// is reported completed, not failed, and nothing is dead-lettered.
func TestAckFailureAfterTheWriteIsNotAFailure(t *testing.T) {
	env := testEnv(t, 4000)
	env.MaxAttempts = 1 // a failure would be the last attempt: term, dead letter, failed
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	cfg := s.st.Config()
	js := jsFor(t, s.nc)
	waitForWorkers(t, s)
	var once sync.Once
	llm.Set(func(f *fakellm.LLM) {
		f.Hook = func() {
			once.Do(func() {
				// The request's consumer goes away while the LLM works: the write still
				// succeeds, the ack cannot.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := js.DeleteConsumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer); err != nil {
					t.Errorf("delete the worker consumer: %v", err)
				}
			})
		}
	})
	events := collectEvents(t, s.nc, "compact.event.acked")
	dead := collectDead(t, s.nc)
	msgs, _ := fakellm.NeedleConversation(8)
	replay(t, s, "acked", msgs, 0)
	eventually(t, 30*time.Second, "a completed event", func() bool { return events.count(schemas.EventCompleted) >= 1 })
	ctx := ctxFor(t, 10*time.Second)
	v, _, err := s.st.Results().Get(ctx, "acked", true)
	if err != nil || v == nil || v.Generation != 1 {
		t.Fatalf("value %+v, %v; want generation 1", v, err)
	}
	// The completed event is published after the ack attempt, so a failure path would
	// have spoken by now.
	if n := events.count(schemas.EventFailed); n != 0 {
		t.Fatalf("%d failed events for a result that is in KV", n)
	}
	if n := dead.count(); n != 0 {
		_, d := dead.get(0)
		t.Fatalf("%d dead letters for a result that is in KV: %+v", n, d)
	}
}

// Crack 8: a value that holds the same queue sequence but another request id (the queue
// was recreated and its sequences start again) is not taken as this request done.
func TestAlreadyDoneNeedsTheRequestID(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	ctx := ctxFor(t, time.Minute)
	old := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: "reused", Generation: 1,
		Summary: "from a queue that no longer exists", TailStartSeq: 1, RequestSeq: 1, RequestID: "from-an-earlier-queue",
		CreatedAt: time.Now().UTC()}
	if _, err := s.st.Results().Put(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	events := collectEvents(t, s.nc, "compact.event.reused")
	msgs, _ := fakellm.NeedleConversation(8)
	replay(t, s, "reused", msgs, 0)
	eventually(t, 30*time.Second, "a completed event", func() bool { return events.count(schemas.EventCompleted) >= 1 })
	v, _, err := s.st.Results().Get(ctx, "reused", true)
	if err != nil || v == nil || v.Generation != 2 || v.RequestID == old.RequestID {
		t.Fatalf("value %+v, %v; want generation 2 written by the new request", v, err)
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	for _, ev := range events.events {
		if ev.Type == schemas.EventCompleted && ev.Generation == old.Generation {
			t.Fatalf("request %s was taken as done by the earlier queue's value (completed at generation %d)", ev.RequestID, ev.Generation)
		}
	}
}

// Crack 15: a model whose summaries are always over the cap is asked once more with a
// firmer cap, then the deterministic fallback keeps the bound.
func TestSummariesOverTheCapEndInTheFallback(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Pad = 40000 }) // ~10,000 tokens, whatever it is asked
	s := startStack(t, env, llm)
	events := collectEvents(t, s.nc, "compact.event.verbose")
	msgs, _ := fakellm.NeedleConversation(8)
	replay(t, s, "verbose", msgs, 0)
	eventually(t, 30*time.Second, "a completed event", func() bool { return events.count(schemas.EventCompleted) >= 1 })
	ev := events.last(schemas.EventCompleted)
	if !strings.Contains(ev.Error, "over max_summary_tokens") {
		t.Fatalf("completed event error %q; want it to report the summaries over their cap", ev.Error)
	}
	v, _, err := s.st.Results().Get(ctxFor(t, 10*time.Second), "verbose", true)
	if err != nil || v == nil || !v.Fallback {
		t.Fatalf("value %+v, %v; want the fallback summary", v, err)
	}
	if v.TokensAfter > env.budget().TargetTokens() {
		t.Fatalf("context %d tokens after the fallback; want ≤ target %d", v.TokensAfter, env.budget().TargetTokens())
	}
	if n := llm.Calls(); n != 2 {
		t.Fatalf("LLM called %d times; want 2 (the summary, then once with a firmer cap)", n)
	}
	if n := events.count(schemas.EventDeclined); n != 0 {
		t.Fatalf("%d declined events; want the bound kept, not declined", n)
	}
}

// Crack 19: a worker whose drain times out hands its unfinished request back, so it is
// delivered again at once, not after the ack wait.
func TestDrainTimeoutHandsUnfinishedRequestsBack(t *testing.T) {
	env := testEnv(t, 4000)
	env.AckWait = time.Minute // a redelivery by ack wait would not come within this test
	env.DrainTimeout = time.Second
	slow := fakellm.New(t)
	slow.Set(func(f *fakellm.LLM) { f.Delay = 2 * time.Minute })
	t.Cleanup(slow.CloseClientConnections) // runs before the server's Close
	s := startStack(t, env, slow)
	events := collectEvents(t, s.nc, "compact.event.drained")
	msgs, _ := fakellm.NeedleConversation(8)
	replay(t, s, "drained", msgs, 0)
	eventually(t, 30*time.Second, "the compaction to start", func() bool { return events.count(schemas.EventStarted) >= 1 })
	stopped := make(chan struct{})
	go func() {
		s.stop(t)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the pool did not return after its drain timeout")
	}
	fast := fakellm.New(t)
	runStack(t, s.nc, s.st, env, fast)
	eventually(t, 20*time.Second, "the handed-back request to be completed by another worker", func() bool {
		return events.count(schemas.EventCompleted) >= 1
	})
}

// Crack 21: a decline marker that stands alone carries the figures of the latest
// decline, not of the first.
func TestDeclineMarkerCarriesTheLatestFigures(t *testing.T) {
	env := testEnv(t, 4000)
	env.Policy["min_progress"] = "0.99" // nothing can shrink the context by 99%
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	events := collectEvents(t, s.nc, "compact.event.growing")
	msgs, _ := fakellm.NeedleConversation(8)
	replay(t, s, "growing", msgs, 0)
	eventually(t, 30*time.Second, "a declined event", func() bool { return events.count(schemas.EventDeclined) >= 1 })
	settle(t, s)
	ctx := ctxFor(t, time.Minute)
	first, _, err := s.st.Results().Get(ctx, "growing", true)
	if err != nil || first == nil || first.Generation != 0 {
		t.Fatalf("marker %+v, %v", first, err)
	}
	more, _ := fakellm.NeedleConversation(4) // grows past the regrow margin
	replay(t, s, "growing", more[1:], 0)
	eventually(t, 30*time.Second, "a second declined event", func() bool { return events.count(schemas.EventDeclined) >= 2 })
	settle(t, s)
	second, _, err := s.st.Results().Get(ctx, "growing", true)
	if err != nil || second == nil {
		t.Fatal(err)
	}
	if second.TokensBefore <= first.TokensBefore || !second.CreatedAt.After(first.CreatedAt) || second.DeclinedAtSeq <= first.DeclinedAtSeq {
		t.Fatalf("marker after the second decline: tokens_before %d (first %d), created_at %s (first %s), declined_at_seq %d (first %d); want the latest figures",
			second.TokensBefore, first.TokensBefore, second.CreatedAt, first.CreatedAt, second.DeclinedAtSeq, first.DeclinedAtSeq)
	}
}

// waitForWorkers waits until the stack's workers pull from the work queue.
func waitForWorkers(t *testing.T, s *stack) {
	t.Helper()
	cfg := s.st.Config()
	eventually(t, 10*time.Second, "the workers to pull requests", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := jsFor(t, s.nc).Consumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.NumWaiting > 0
	})
}
