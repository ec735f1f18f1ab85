package systemtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// history records every KV value of one conversation, in order.
type history struct {
	mu     sync.Mutex
	values []*schemas.Result
}

func watchValues(t *testing.T, s *stack, conv string) *history {
	t.Helper()
	h := &history{}
	w, err := resultsFor(t, s.nc, s.st.Config()).Watch(ctxFor(t, 10*time.Minute), conv, natsjs.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != natsjs.KeyValuePut {
				continue
			}
			v, err := schemas.DecodeResult(e.Value())
			if err != nil {
				continue
			}
			h.mu.Lock()
			h.values = append(h.values, v)
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *history) snapshot() []*schemas.Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.values)
}

// invariants checks DESIGN.md's invariants 1–3, 5, 6 and 9 over every value a
// conversation had, against the messages published to it (seq → message).
func invariants(t *testing.T, s *stack, conv string, env stackEnv, values []*schemas.Result, llm *fakellm.LLM) {
	t.Helper()
	all, err := s.st.Chat().LoadEntries(ctxFor(t, time.Minute), conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var inputs *string
	if llm != nil {
		in := llm.AllInputs()
		inputs = &in
	}
	checkValues(t, all, env, values, inputs)
}

// checkValues is invariants over the conversation's stored messages all. inputs is
// what the summarizer was given (nil: no LLM, nothing to check it against).
func checkValues(t *testing.T, all []schemas.Entry, env stackEnv, values []*schemas.Result, inputs *string) {
	t.Helper()
	index := map[uint64]int{}
	for i, e := range all {
		index[e.Seq] = i
	}
	b := env.budget()
	given := ""
	if inputs != nil {
		given = strings.ReplaceAll(*inputs, "&lt;", "<")
	}
	var prev *schemas.Result
	requestSeqs := map[uint64]uint64{}
	for _, v := range values {
		prevGen, prevTail, prevSummary := uint64(0), uint64(1), ""
		var prevPinned []uint64
		if prev != nil {
			prevGen, prevTail, prevSummary, prevPinned = prev.Generation, max(prev.TailStartSeq, 1), prev.Summary, prev.PinnedSeqs
		}
		if v.Generation == prevGen {
			// A decline (the first one writes a marker of generation 0): nothing but
			// declined_at_seq and its figures may change.
			if max(v.TailStartSeq, 1) != prevTail || v.Summary != prevSummary {
				t.Fatalf("generation %d rewritten without a new generation", v.Generation)
			}
			prev = v
			continue
		}
		// 3. One generation per request, monotonic.
		if v.Generation != prevGen+1 {
			t.Fatalf("generation went from %d to %d", prevGen, v.Generation)
		}
		if v.TailStartSeq < prevTail {
			t.Fatalf("generation %d: tail_start_seq moved back from %d to %d", v.Generation, prevTail, v.TailStartSeq)
		}
		// A request done with a fallback stays queued to repair it: it may make the
		// repair's generation too (or another fallback, past the hard limit).
		if g, dup := requestSeqs[v.RequestSeq]; dup && !(prev != nil && prev.RequestSeq == v.RequestSeq && prev.BuiltOnFallback) {
			t.Fatalf("request %d made generations %d and %d", v.RequestSeq, g, v.Generation)
		}
		requestSeqs[v.RequestSeq] = v.Generation
		// 6. The split is a unit boundary of the whole conversation.
		if k, ok := index[v.TailStartSeq]; ok && !rounds.IsBoundary(all, k) {
			t.Fatalf("generation %d: tail starts at seq %d, inside a tool round", v.Generation, v.TailStartSeq)
		}
		// 9. The bound.
		if v.TokensAfter > b.TargetTokens() {
			t.Fatalf("generation %d: %d tokens after compaction, over the target %d", v.Generation, v.TokensAfter, b.TargetTokens())
		}
		if st := tokens.Text(v.Summary); st > b.SummaryCap() {
			t.Fatalf("generation %d: summary of %d tokens over the cap %d", v.Generation, st, b.SummaryCap())
		}
		if et := tokens.Text(v.EvidenceText); et > b.EvidenceTokens() {
			t.Fatalf("generation %d: evidence section of %d tokens over its budget %d", v.Generation, et, b.EvidenceTokens())
		}
		if b.EvidenceTokens() > 0 && (v.Evidence == nil || !strings.HasPrefix(v.EvidenceText, fmt.Sprintf(evidence.Header, v.CoveredThroughSeq))) {
			t.Fatalf("generation %d (fallback %v): no evidence, or a section not stating the range it covers: %q", v.Generation, v.Fallback, v.EvidenceText)
		}
		// 2. Everything newly covered and not pinned reached the summarizer.
		for seq := prevTail; seq < v.TailStartSeq; seq++ {
			i, ok := index[seq]
			if !ok || slices.Contains(v.PinnedSeqs, seq) || slices.Contains(prevPinned, seq) {
				continue
			}
			if !slices.Contains(v.PinnedSeqs, seq) && all[i].Message.Role == schemas.RoleSystem && i == 0 {
				t.Fatalf("generation %d: the leading system prompt (seq %d) is not pinned", v.Generation, seq)
			}
			if inputs == nil || v.Fallback {
				continue
			}
			text := strings.TrimSpace(all[i].Message.Content.String())
			if r := []rune(text); len(r) > 40 {
				text = string(r[:40])
			}
			if text != "" && !strings.Contains(given, text) {
				t.Fatalf("generation %d: seq %d (%s) was covered but never given to the summarizer: %q",
					v.Generation, seq, all[i].Message.Role, text)
			}
		}
		// 1. The context this value assembles keeps tool pairs whole.
		var pinned []schemas.Entry
		for _, seq := range v.PinnedSeqs {
			pinned = append(pinned, all[index[seq]])
		}
		k := len(all)
		if i, ok := index[v.TailStartSeq]; ok {
			k = i
		}
		cx := assemble.Assemble(assemble.Input{Value: v, Pinned: pinned, Tail: all[k:]}, assemble.Options{})
		if err := rounds.CheckPairs(cx.Messages); err != nil {
			t.Fatalf("generation %d: %v", v.Generation, err)
		}
		prev = v
	}
}

// replay publishes msgs one by one, reading its own write after each (invariant 8).
func replay(t *testing.T, s *stack, conv string, msgs []schemas.Message, pace time.Duration) []uint64 {
	t.Helper()
	ctx := ctxFor(t, 5*time.Minute)
	var seqs []uint64
	for i, m := range msgs {
		seq, err := s.client.Publish(ctx, conv, m)
		if err != nil {
			t.Fatalf("publish message %d: %v", i, err)
		}
		seqs = append(seqs, seq)
		cx, err := s.client.Context(ctx, conv, pipeline.AtLeastSeq(seq))
		if err != nil {
			t.Fatalf("read after publishing seq %d: %v", seq, err)
		}
		if seq >= cx.TailStartSeq && !slices.Contains(cx.Seqs, seq) && !(m.HasToolCalls() || m.Role == schemas.RoleTool) {
			t.Fatalf("read-your-writes: seq %d missing from the context (tail from %d)", seq, cx.TailStartSeq)
		}
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	return seqs
}

// settle waits until no request is pending or being worked on. Each poll has its own
// timeout, so one request lost while a stream has no leader does not block the wait.
func settle(t *testing.T, s *stack) {
	t.Helper()
	eventually(t, time.Minute, "the work queue to drain", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := jsFor(t, s.nc).Stream(ctx, s.st.Config().RequestsStream)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}

func TestCorpusReplayKeepsInvariants(t *testing.T) {
	convs := loadCorpus(t, 3)
	env := testEnv(t, 8000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	n := 0
	for name, msgs := range convs {
		conv := fmt.Sprintf("replay-%d", n)
		n++
		t.Run(name, func(t *testing.T) {
			h := watchValues(t, s, conv)
			replay(t, s, conv, msgs, 0)
			settle(t, s)
			eventually(t, 30*time.Second, "the context to fall under the threshold", func() bool {
				cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
				return err == nil && cx.Tokens < env.budget().ThresholdTokens()
			})
			values := h.snapshot()
			gens := 0
			for _, v := range values {
				gens = max(gens, int(v.Generation))
			}
			if gens < 3 {
				t.Fatalf("only %d generations for %d messages in a window of %d", gens, len(msgs), env.budget().ContextWindow)
			}
			invariants(t, s, conv, env, values, llm)
			cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
			if err != nil {
				t.Fatal(err)
			}
			if err := rounds.CheckPairs(cx.Messages); err != nil {
				t.Fatal(err)
			}
			if len(cx.Skipped) > 0 {
				t.Fatalf("a well-formed conversation had skipped messages: %v", cx.Skipped)
			}
			t.Logf("%d messages, %d generations, final context %d tokens in %d messages", len(msgs), gens, cx.Tokens, len(cx.Messages))
		})
	}
}

func TestNeedlesSurviveManyGenerations(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	msgs, needles := fakellm.NeedleConversation(60)
	h := watchValues(t, s, "needles")
	replay(t, s, "needles", msgs, 0)
	settle(t, s)
	var cx *pipeline.Context
	eventually(t, 30*time.Second, "the context to fall under the threshold", func() bool {
		var err error
		cx, err = s.client.Context(ctxFor(t, 10*time.Second), "needles")
		return err == nil && cx.Tokens < env.budget().ThresholdTokens()
	})
	values := h.snapshot()
	if last := values[len(values)-1]; last.Generation < 5 {
		t.Fatalf("only %d generations; the test needs many", last.Generation)
	}
	invariants(t, s, "needles", env, values, llm)
	var text strings.Builder
	for _, m := range cx.Messages {
		text.WriteString(m.Content.String())
		text.WriteString("\n")
	}
	for _, n := range needles {
		if !strings.Contains(text.String(), n) {
			t.Errorf("needle %s lost after %d generations", n, values[len(values)-1].Generation)
		}
	}
	if !strings.Contains(text.String(), "You are Ada") {
		t.Error("the pinned system prompt is missing from the context")
	}
	if cx.Messages[0].Role != schemas.RoleSystem {
		t.Errorf("context starts with %s; want the pinned system prompt", cx.Messages[0].Role)
	}
}

func TestCrashBetweenWriteAndAckMakesNoSecondGeneration(t *testing.T) {
	env := testEnv(t, 4000)
	srvLLM := fakellm.New(t)
	// The state a worker leaves when it dies after the compare-and-set, before the ack:
	// the request still queued, the value already holding its request_seq.
	st0 := startStack(t, env, nil)
	st0.stop(t) // nothing running: we set the stage by hand
	ctx := ctxFor(t, time.Minute)
	msgs, _ := fakellm.NeedleConversation(3)
	for _, m := range msgs {
		if _, err := st0.client.Publish(ctx, "crash", m); err != nil {
			t.Fatal(err)
		}
	}
	req := schemas.Request{RequestID: "req-1", Conversation: "crash", Trigger: schemas.TriggerManual, RequestedAt: time.Now()}
	qseq, err := st0.st.Queue().Enqueue(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	written := &schemas.Result{SchemaVersion: 1, Conversation: "crash", Generation: 1, Summary: "summary before the crash",
		TailStartSeq: 6, CoveredThroughSeq: 5, PinnedSeqs: []uint64{1}, RequestID: "req-1", RequestSeq: qseq, LLMBaseGeneration: 1}
	if _, err := st0.st.Results().Put(ctx, written, 0); err != nil {
		t.Fatal(err)
	}
	events, err := st0.nc.SubscribeSync(st0.st.Config().EventPrefix + ".crash")
	if err != nil {
		t.Fatal(err)
	}
	env.Roles = "worker"
	runStack(t, st0.nc, st0.st, env, srvLLM)
	for {
		m, err := events.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("no completed event: %v", err)
		}
		var ev schemas.Event
		_ = json.Unmarshal(m.Data, &ev)
		if ev.Type == schemas.EventCompleted {
			if ev.Generation != 1 || ev.RequestID != "req-1" {
				t.Fatalf("completed event for generation %d of %s; want 1 of req-1", ev.Generation, ev.RequestID)
			}
			break
		}
	}
	settle(t, st0)
	v, _, err := st0.st.Results().Get(ctx, "crash", true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Generation != 1 || v.Summary != written.Summary {
		t.Fatalf("after redelivery: generation %d (%q); want the crashed worker's generation 1", v.Generation, v.Summary)
	}
	if n := srvLLM.Calls(); n != 0 {
		t.Fatalf("the LLM was called %d times for work already done", n)
	}
}

func TestMessagesDuringSlowCompactionAreNotStranded(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Delay = 1500 * time.Millisecond })
	s := startStack(t, env, llm)
	h := watchValues(t, s, "slow")
	msgs, needles := fakellm.NeedleConversation(40)
	seqs := replay(t, s, "slow", msgs, 30*time.Millisecond) // ~5 s of arrivals across slow compactions
	settle(t, s)
	var cx *pipeline.Context
	eventually(t, time.Minute, "the context to fall under the threshold", func() bool {
		var err error
		cx, err = s.client.Context(ctxFor(t, 10*time.Second), "slow")
		return err == nil && cx.Tokens < env.budget().ThresholdTokens()
	})
	values := h.snapshot()
	invariants(t, s, "slow", env, values, llm)
	last := values[len(values)-1]
	// Every message is either covered by the final summary or in the tail.
	for _, seq := range seqs {
		if seq < last.TailStartSeq {
			continue
		}
		if !slices.Contains(cx.Seqs, seq) {
			t.Fatalf("seq %d is neither covered (tail from %d) nor in the context", seq, last.TailStartSeq)
		}
	}
	text := ""
	for _, m := range cx.Messages {
		text += m.Content.String()
	}
	for _, n := range needles {
		if !strings.Contains(text, n) {
			t.Errorf("needle %s stranded or lost", n)
		}
	}
}

func TestBadInputIsRefusedAtPublish(t *testing.T) {
	env := testEnv(t, 4000)
	s := startStack(t, env, nil)
	ctx := ctxFor(t, time.Minute)
	valid := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hi")}
	for _, tc := range []struct {
		name    string
		conv    string
		raw     string
		wantErr string
	}{
		{"invalid id", "has.dot", `{"role":"user","content":"x"}`, "conversation"},
		{"invalid id with space", "a b", `{"role":"user","content":"x"}`, "[A-Za-z0-9_-]"},
		{"unknown role", "c1", `{"role":"robot","content":"x"}`, `unknown role "robot"`},
		{"tool without its call", "c1", `{"role":"tool","tool_call_id":"nope","content":"x"}`, "answers no tool call"},
		{"invalid UTF-8", "c1", "{\"role\":\"user\",\"content\":\"\xff\"}", "not valid UTF-8"},
		{"tool call on a user message", "c1", `{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}`, "tool_calls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m schemas.Message
			if err := json.Unmarshal([]byte(tc.raw), &m); err != nil {
				t.Fatal(err)
			}
			_, err := s.client.Publish(ctx, tc.conv, m)
			if err == nil || !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want an ErrInvalid naming %q", err, tc.wantErr)
			}
		})
	}
	if _, err := schemas.DecodeMessage([]byte(`{"role":"user","content":`)); err == nil || !errors.Is(err, schemas.ErrInvalid) {
		t.Fatalf("malformed JSON: got %v; want ErrInvalid", err)
	}
	// Nothing was stored for the refused messages.
	if seq, err := s.client.Publish(ctx, "c1", valid); err != nil || seq != 1 {
		t.Fatalf("first valid publish got seq %d, %v; want 1 (nothing stored before)", seq, err)
	}
}

func TestBadInputInTheStreamIsSkippedAndReported(t *testing.T) {
	env := testEnv(t, 4000)
	llm := fakellm.New(t)
	s := startStack(t, env, llm)
	ctx := ctxFor(t, time.Minute)
	subj := must(s.st.Config().ChatSubject("mixed"))
	// Another producer, bypassing validation.
	var badSeqs []uint64
	for _, raw := range []string{
		`not json`, `{"role":"robot","content":"x"}`, `{"role":"tool","tool_call_id":"ghost","content":"x"}`,
		``, `{}`, `[]`, `null`, `{"role":"user"}`, `{"role":"user","content":{"a":1}}`,
		"{\"role\":\"user\",\"content\":\"bad \xff\xfe utf-8\"}", "{\"role\":\"user\",\"content\":\"raw \x00 NUL\"}",
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000), // deeper than any decoder allows
		// A call never answered: the agent moved on, so the round stays incomplete.
		`{"role":"assistant","content":null,"tool_calls":[{"id":"never","type":"function","function":{"name":"f","arguments":"{}"}}]}`,
	} {
		ack, err := jsFor(t, s.nc).Publish(ctx, subj, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		badSeqs = append(badSeqs, ack.Sequence)
	}
	// A bad message on another conversation's subject must not poison this one.
	if _, err := jsFor(t, s.nc).Publish(ctx, must(s.st.Config().ChatSubject("other")), []byte(`{]`)); err != nil {
		t.Fatal(err)
	}
	msgs, needles := fakellm.NeedleConversation(20)
	replay(t, s, "mixed", msgs, 0)
	settle(t, s)
	var cx *pipeline.Context
	eventually(t, 30*time.Second, "the mixed conversation to be compacted", func() bool {
		var err error
		cx, err = s.client.Context(ctxFor(t, 10*time.Second), "mixed")
		return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
	})
	if err := rounds.CheckPairs(cx.Messages); err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, m := range cx.Messages {
		text += m.Content.String()
	}
	for _, n := range needles {
		if !strings.Contains(text, n) {
			t.Errorf("needle %s lost next to bad input", n)
		}
	}
	// Before compaction covers them, readers report the bad messages with reasons.
	raw := assemble.Assemble(assemble.Input{Tail: mustEntries(t, s, "mixed")}, assemble.Options{})
	for _, seq := range badSeqs {
		found := false
		for _, sk := range raw.Skipped {
			found = found || (sk.Seq == seq && sk.Reason != "")
		}
		if !found {
			t.Errorf("bad seq %d not reported as skipped: %v", seq, raw.Skipped)
		}
	}
}

func mustEntries(t *testing.T, s *stack, conv string) []schemas.Entry {
	t.Helper()
	es, err := s.st.Chat().LoadEntries(ctxFor(t, 10*time.Second), conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
