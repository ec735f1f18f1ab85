package summarizer_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
)

// pinsFixture is a store, a worker that resolves policies as a node does (the policy
// bucket over a 4,000-token window), the compactor service that sets them, and a
// client that reads contexts as agents do.
type pinsFixture struct {
	st  *jetstream.Store
	cl  *pipeline.Client
	ctx context.Context
}

func newPinsFixture(t *testing.T) *pinsFixture {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r, err := policy.NewResolver(policy.Layer{"context_window": "4000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := node.NewPolicySource(st, r)
	_, sum := newFaultyLLM(t, 30*time.Second, func(_ int, _ []byte, w http.ResponseWriter, _ *http.Request) {
		summaryOf(w, "The user and the assistant talked at length.")
	})
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: ps,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	svc, err := service.New(service.Config{}, nc, st, ps, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })
	cl := pipeline.NewWithStore(nc, st)
	for {
		if _, err := cl.Policy(ctx, schemas.PolicyRequest{Conversation: "probe"}); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("the compactor service did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &pinsFixture{st: st, cl: cl, ctx: ctx}
}

// say publishes n messages of 1,600 characters (400 tokens), user and assistant in turn,
// each starting with its own mark (tag and index), and returns their sequences.
func (f *pinsFixture) say(t *testing.T, conv, tag string, n int) []uint64 {
	t.Helper()
	var seqs []uint64
	for i := range n {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		m := schemas.Message{Role: role, Content: schemas.Text(mark(tag, i) + strings.Repeat("w", 1580))}
		seq, err := f.cl.Publish(f.ctx, conv, m)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

func mark(tag string, i int) string { return fmt.Sprintf("MARK-%s-%02d ", tag, i) }

func (f *pinsFixture) setPolicy(t *testing.T, conv string, set map[string]any) {
	t.Helper()
	if _, err := f.cl.Policy(f.ctx, schemas.PolicyRequest{Conversation: conv, Set: set}); err != nil {
		t.Fatalf("set the policy of %s: %v", conv, err)
	}
}

// compact runs a manual compaction of conv through its newest message and returns the
// value after it; it must complete.
func (f *pinsFixture) compact(t *testing.T, conv string, upTo uint64) *schemas.Result {
	t.Helper()
	ev, v := compactOutcome(t, f.ctx, f.st, conv, upTo)
	if ev.Type != schemas.EventCompleted {
		t.Fatalf("compaction of %s: %+v; want completed", conv, ev)
	}
	return v
}

// verbatim reports whether the context an agent reads holds the message that starts
// with text, whole, as a message of its own (not inside the summary).
func (f *pinsFixture) verbatim(t *testing.T, conv, text string) bool {
	t.Helper()
	cx, err := f.cl.Context(f.ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range cx.Messages {
		if cx.Seqs[i] != 0 && m.Content.String() == text+strings.Repeat("w", 1580) {
			return true
		}
	}
	return false
}

// A message still in the tail, pinned through the pins policy key, is kept verbatim by
// the compactions that move past it: in pinned_seqs, and in every reader's context.
func TestPinsKeepATailMessageVerbatim(t *testing.T) {
	f := newPinsFixture(t)
	seqs := f.say(t, "tail", "t", 8)
	f.setPolicy(t, "tail", map[string]any{policy.PinsKey: fmt.Sprint(seqs[1])})
	v := f.compact(t, "tail", seqs[7])
	if v.CoveredThroughSeq < seqs[1] || !slices.Contains(v.PinnedSeqs, seqs[1]) {
		t.Fatalf("covered through %d, pinned %v; want seq %d covered and pinned", v.CoveredThroughSeq, v.PinnedSeqs, seqs[1])
	}
	if slices.Contains(v.PinnedSeqs, seqs[0]) || slices.Contains(v.PinnedSeqs, seqs[2]) {
		t.Fatalf("pinned %v; want only seq %d of the covered ones", v.PinnedSeqs, seqs[1])
	}
	if !f.verbatim(t, "tail", mark("t", 1)) || f.verbatim(t, "tail", mark("t", 0)) {
		t.Fatal("the pinned message is not in the context verbatim, or an unpinned covered one is")
	}
	more := f.say(t, "tail", "u", 8)
	v = f.compact(t, "tail", more[7])
	if v.Generation != 2 || !slices.Contains(v.PinnedSeqs, seqs[1]) || !f.verbatim(t, "tail", mark("t", 1)) {
		t.Fatalf("generation %d pinned %v; want the message still pinned and verbatim", v.Generation, v.PinnedSeqs)
	}
}

// A message summarized before it was pinned comes back verbatim at the next compaction.
func TestPinsBringBackASummarizedMessage(t *testing.T) {
	f := newPinsFixture(t)
	seqs := f.say(t, "late", "t", 8)
	v := f.compact(t, "late", seqs[7])
	if v.CoveredThroughSeq < seqs[1] || slices.Contains(v.PinnedSeqs, seqs[1]) || f.verbatim(t, "late", mark("t", 1)) {
		t.Fatalf("covered through %d, pinned %v; want seq %d summarized", v.CoveredThroughSeq, v.PinnedSeqs, seqs[1])
	}
	f.setPolicy(t, "late", map[string]any{policy.PinsKey: fmt.Sprint(seqs[1])})
	more := f.say(t, "late", "u", 8)
	v = f.compact(t, "late", more[7])
	if !slices.Contains(v.PinnedSeqs, seqs[1]) || !f.verbatim(t, "late", mark("t", 1)) {
		t.Fatalf("pinned %v; want seq %d back, verbatim in the context", v.PinnedSeqs, seqs[1])
	}
	if f.verbatim(t, "late", mark("t", 0)) {
		t.Fatal("an unpinned summarized message came back")
	}
}

// A pin naming another conversation's message is ignored, below the loaded range (a
// summarized part) or inside it: it never enters this conversation's value or context.
func TestPinsOfAnotherConversationAreIgnored(t *testing.T) {
	f := newPinsFixture(t)
	theirs := f.say(t, "theirs", "x", 1)
	mine := f.say(t, "mine", "m", 4)
	inside := f.say(t, "theirs", "y", 1)
	mine = append(mine, f.say(t, "mine", "n", 4)...)
	f.setPolicy(t, "mine", map[string]any{policy.PinsKey: fmt.Sprintf("%d,%d", theirs[0], inside[0])})
	v := f.compact(t, "mine", mine[7])
	if slices.Contains(v.PinnedSeqs, inside[0]) || slices.Contains(v.PinnedSeqs, theirs[0]) {
		t.Fatalf("pinned %v; want no message of another conversation", v.PinnedSeqs)
	}
	// theirs[0] is now below the loaded range of mine (its tail starts after it).
	more := f.say(t, "mine", "o", 8)
	v = f.compact(t, "mine", more[7])
	if v.TailStartSeq <= theirs[0] || slices.Contains(v.PinnedSeqs, theirs[0]) || slices.Contains(v.PinnedSeqs, inside[0]) {
		t.Fatalf("tail start %d, pinned %v; want the other conversation's %d and %d left out", v.TailStartSeq, v.PinnedSeqs, theirs[0], inside[0])
	}
	if f.verbatim(t, "mine", mark("x", 0)) || f.verbatim(t, "mine", mark("y", 0)) {
		t.Fatal("another conversation's message is in this one's context")
	}
}

// Forgetting a conversation deletes its pins with its policy: the conversation
// published again under the same id pins nothing of them.
func TestPinsAreGoneAfterForget(t *testing.T) {
	f := newPinsFixture(t)
	seqs := f.say(t, "gone", "t", 8)
	f.setPolicy(t, "gone", map[string]any{policy.PinsKey: fmt.Sprint(seqs[1])})
	if _, err := f.cl.Forget(f.ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	p, err := f.cl.Policy(f.ctx, schemas.PolicyRequest{Conversation: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Policy[policy.PinsKey]; ok || p.Settings[policy.PinsKey] != "" {
		t.Fatalf("policy after forget %v, settings pins %v; want no pins", p.Policy, p.Settings[policy.PinsKey])
	}
	again := f.say(t, "gone", "a", 8)
	v := f.compact(t, "gone", again[7])
	if len(v.PinnedSeqs) != 0 {
		t.Fatalf("pinned %v after forget; want none", v.PinnedSeqs)
	}
}

// The masking rung honours pins: a tool output the pins key names is not masked, the
// other old ones are.
func TestMaskingKeepsAPinnedToolOutput(t *testing.T) {
	f := newPinsFixture(t)
	first := publishUser(t, f.ctx, f.st, "masked", "Read the files of /repo, one at a time.")
	last := publishRounds(t, f.ctx, f.st, "masked", 0, 8)
	output := first + 2 // the tool output of the first round
	f.setPolicy(t, "masked", map[string]any{"rungs": policy.RungsMask, policy.PinsKey: fmt.Sprint(output)})
	v := f.compact(t, "masked", last)
	if v.Strategy != summarizer.StrategyMask || len(v.Overrides) == 0 {
		t.Fatalf("strategy %q, %d overrides; want old tool outputs masked", v.Strategy, len(v.Overrides))
	}
	for _, o := range v.Overrides {
		if o.Seq == output {
			t.Fatalf("the pinned tool output %d was masked: %+v", output, o)
		}
	}
	if !slices.ContainsFunc(v.Overrides, func(o schemas.Override) bool { return o.Seq == output+2 }) {
		t.Fatalf("overrides %+v; want the next round's output (%d) masked", v.Overrides, output+2)
	}
}

// The masking rung brings back a message summarized before it was pinned too: its
// masked value lists it in pinned_seqs, and readers show it verbatim.
func TestMaskingBringsBackASummarizedPinnedMessage(t *testing.T) {
	f := newPinsFixture(t)
	seqs := f.say(t, "mixed", "t", 8)
	v := f.compact(t, "mixed", seqs[7])
	if v.CoveredThroughSeq < seqs[1] || v.Strategy == summarizer.StrategyMask {
		t.Fatalf("covered through %d by %q; want seq %d summarized", v.CoveredThroughSeq, v.Strategy, seqs[1])
	}
	f.setPolicy(t, "mixed", map[string]any{"rungs": policy.RungsMask, policy.PinsKey: fmt.Sprint(seqs[1])})
	last := publishRounds(t, f.ctx, f.st, "mixed", 0, 8)
	v = f.compact(t, "mixed", last)
	if v.Strategy != summarizer.StrategyMask || !slices.Contains(v.PinnedSeqs, seqs[1]) || !f.verbatim(t, "mixed", mark("t", 1)) {
		t.Fatalf("strategy %q, pinned %v; want a masked value with seq %d back verbatim", v.Strategy, v.PinnedSeqs, seqs[1])
	}
}
