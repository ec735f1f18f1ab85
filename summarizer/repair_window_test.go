package summarizer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/summarizer"
)

// windowRecorder fails while down; otherwise it summarizes by listing every needle of
// its previous summary and messages, and records the bytes of the messages of each
// call.
type windowRecorder struct {
	down atomic.Bool

	mu    sync.Mutex
	sizes []int
}

func (w *windowRecorder) Summarize(_ context.Context, in summarizer.Input) (summarizer.Output, error) {
	if w.down.Load() {
		return summarizer.Output{}, errors.New("upstream down")
	}
	text, size := in.PreviousSummary, 0
	for _, m := range in.Messages {
		text += " " + m.Content.String()
		size += len(m.Content.String())
	}
	w.mu.Lock()
	w.sizes = append(w.sizes, size)
	w.mu.Unlock()
	found := needleRE.FindAllString(text, -1)
	slices.Sort(found)
	return summarizer.Output{Summary: "Facts: " + strings.Join(slices.Compact(found), " "), Model: "m"}, nil
}

func (w *windowRecorder) calls() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sizes)
}

// A repair reads the range its fallback covers again a window at a time: with a bound
// of 4,000 bytes, no window holds more than the bound and one message, whatever the
// summarizer's window (here large enough for the whole range in one call), and each
// window is summarized on the summary of those before it, so the repair keeps every
// fact. Before the fix the whole range was loaded and sent at once.
func TestRepairHoldsABoundedWindowOfTheConversation(t *testing.T) {
	const bound, msgBytes = 4000, 1600
	summarizer.SetRepairWindowBytes(t, bound)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := &windowRecorder{}
	sum.down.Store(true)
	needles := map[uint64]string{}
	last := needleMessages(t, ctx, st, "rw", "w", 0, 10, needles) // past the hard limit
	wide := settings(func(s *policy.Settings) { s.SummarizerContextWindow = 200_000 })
	startPool(t, st, sum, wide, 2)
	req := request(t, ctx, st, "rw", last)
	if ev, err := st.Events().WaitOutcome(ctx, "rw", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "rw", true)
	if err != nil || v1 == nil || !v1.Fallback {
		t.Fatalf("value %+v, %v; want a fallback", v1, err)
	}
	var covered []string
	total := 0
	for seq := v1.FirstSeq; seq <= v1.CoveredThroughSeq; seq++ {
		if !slices.Contains(v1.PinnedSeqs, seq) {
			covered = append(covered, needles[seq])
			total += msgBytes
		}
	}
	if total <= 2*bound {
		t.Fatalf("the fallback covers %d bytes; the test wants more than two windows of %d", total, bound)
	}
	sum.down.Store(false)
	v2 := waitValue(t, ctx, st, "rw", "the repair", func(v *schemas.Result) bool { return v.RepairOf == v1.Generation })
	sizes := sum.calls()
	if len(sizes) < 3 {
		t.Fatalf("the repair made %d calls of %v bytes; want a window of at most %d bytes a call", len(sizes), sizes, bound+msgBytes)
	}
	for _, n := range sizes {
		if n >= bound+msgBytes {
			t.Fatalf("a repair call held %d bytes of messages (calls %v); want under %d (the bound and one message)", n, sizes, bound+msgBytes)
		}
	}
	for _, needle := range covered {
		if !strings.Contains(v2.Summary, needle+" ") && !strings.HasSuffix(v2.Summary, needle) {
			t.Fatalf("the repaired summary %q lost %s", v2.Summary, needle)
		}
	}
}

// A window never ends inside a tool round: the round is carried to the next window
// whole, so no tool result is summarized as an orphan and lost (each call's messages
// pair up, and every result's needle is in the repair).
func TestRepairWindowsKeepToolRoundsWhole(t *testing.T) {
	const bound = 2500 // a call of 1,000 bytes, its result of 1,000, the next call: over
	summarizer.SetRepairWindowBytes(t, bound)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := &pairChecker{windowRecorder: windowRecorder{}}
	sum.down.Store(true)
	needles := map[uint64]string{}
	publish := func(m schemas.Message) uint64 {
		data, _ := m.Encode()
		seq, err := st.Chat().Publish(ctx, "rr", data, "")
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	last := publish(schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("read every package")})
	for i := range 12 {
		id := fmt.Sprintf("call%d", i)
		args := fmt.Sprintf(`{"command":"cat /repo/pkg%d/file.go # %s"}`, i, strings.Repeat("x", 950))
		publish(schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function",
			Function: schemas.FunctionCall{Name: "bash", Arguments: args}}}})
		needle := fmt.Sprintf("NEEDLE-t%d", i)
		last = publish(schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(needle + " " + strings.Repeat("w", 1000-len(needle)-1))})
		needles[last] = needle
	}
	wide := settings(func(s *policy.Settings) { s.SummarizerContextWindow = 200_000 })
	startPool(t, st, sum, wide, 2)
	req := request(t, ctx, st, "rr", last)
	if ev, err := st.Events().WaitOutcome(ctx, "rr", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "rr", true)
	if err != nil || v1 == nil || !v1.Fallback {
		t.Fatalf("value %+v, %v; want a fallback", v1, err)
	}
	sum.down.Store(false)
	v2 := waitValue(t, ctx, st, "rr", "the repair", func(v *schemas.Result) bool { return v.RepairOf == v1.Generation })
	if n := len(sum.calls()); n < 3 {
		t.Fatalf("the repair made %d calls; want several windows", n)
	}
	if err := sum.pairErr.Load(); err != nil {
		t.Fatalf("a repair call held a broken round: %v", *err)
	}
	for seq, needle := range needles {
		if seq <= v1.CoveredThroughSeq && !strings.Contains(v2.Summary, needle+" ") && !strings.HasSuffix(v2.Summary, needle) {
			t.Fatalf("the repaired summary %q lost %s (seq %d)", v2.Summary, needle, seq)
		}
	}
}

// pairChecker is a windowRecorder that remembers the first call whose messages do not
// pair up tool calls and results.
type pairChecker struct {
	windowRecorder
	pairErr atomic.Pointer[error]
}

func (p *pairChecker) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	if !p.down.Load() {
		if err := rounds.CheckPairs(in.Messages); err != nil {
			p.pairErr.CompareAndSwap(nil, &err)
		}
	}
	return p.windowRecorder.Summarize(ctx, in)
}
