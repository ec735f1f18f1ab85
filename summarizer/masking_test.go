package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/summarizer"
)

// rungsPolicy gives each conversation a 4,000-token window and the rungs it names
// (summary when it names none).
type rungsPolicy map[string]string

func (r rungsPolicy) Settings(_ context.Context, conv string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = 4000
	if v, ok := r[conv]; ok {
		s.Rungs = v
	}
	return s, s.Validate()
}

// maskingPool runs one worker whose summarizer is a real LLM client against a fake
// endpoint that counts its calls.
func maskingPool(t *testing.T, st *jetstream.Store, pol rungsPolicy) *faultyLLM {
	t.Helper()
	fake, sum := newFaultyLLM(t, 30*time.Second, func(_ int, _ []byte, w http.ResponseWriter, _ *http.Request) {
		summaryOf(w, "The agent ran sed over several files of /repo.")
	})
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: pol,
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	return fake
}

func llmCalls(f *faultyLLM) int {
	start, _ := f.calls()
	return len(start)
}

// compactOutcome queues a manual compaction through upTo and returns its outcome and
// the value after it.
func compactOutcome(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, upTo uint64) (schemas.Event, *schemas.Result) {
	t.Helper()
	req := request(t, ctx, st, conv, upTo)
	ev, err := st.Events().WaitOutcome(ctx, conv, req.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := st.Results().Get(ctx, conv, true)
	if err != nil {
		t.Fatal(err)
	}
	return ev, v
}

func publishUser(t *testing.T, ctx context.Context, st *jetstream.Store, conv, text string) uint64 {
	t.Helper()
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)}
	data, _ := m.Encode()
	seq, err := st.Chat().Publish(ctx, conv, data, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// recallRange reads the recall a masked output's note names: from_seq, to_seq and
// max_tokens.
func recallRange(t *testing.T, note string) (from, to uint64, budget int) {
	t.Helper()
	i := strings.Index(note, "--from-seq ")
	if i < 0 {
		t.Fatalf("note %q names no recall", note)
	}
	if _, err := fmt.Sscanf(note[i:], "--from-seq %d --to-seq %d --max-tokens %d", &from, &to, &budget); err != nil {
		t.Fatalf("note %q: %v", note, err)
	}
	return from, to, budget
}

// Rungs mask: a conversation over its threshold whose old tool outputs are most of it
// is brought under the target by masking them, with no LLM call. Every message stays,
// tool pairs whole; the masked outputs read back as placeholders, the newest verbatim;
// each placeholder's recall returns the original output; a second compaction masks the
// newer old outputs and keeps the first ones' masks, still within the target.
func TestMaskReachesTheTargetWithoutTheLLM(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pol := rungsPolicy{"mk": policy.RungsMask}
	s, _ := pol.Settings(ctx, "mk")
	b := s.Budget()
	publishUser(t, ctx, st, "mk", "Read the files of /repo, one at a time.")
	last := publishRounds(t, ctx, st, "mk", 0, 8)
	fake := maskingPool(t, st, pol)

	ev, v := compactOutcome(t, ctx, st, "mk", last)
	if ev.Type != schemas.EventCompleted || ev.Error != "" {
		t.Fatalf("outcome %+v; want completed, without an error", ev)
	}
	if n := llmCalls(fake); n != 0 {
		t.Fatalf("the LLM was called %d times; masking calls it never", n)
	}
	if v.Strategy != summarizer.StrategyMask || v.Generation != 1 || v.Summary != "" || v.TailStartSeq != 1 || v.Usage != nil || v.Model != "" {
		t.Fatalf("value %+v; want generation 1 of strategy mask, no summary, the tail from 1, no usage", v)
	}
	if n := len(v.Witnessed); v.LoadedThroughSeq != last || v.FirstSeq != 1 || n == 0 || v.Witnessed[n-1].ThroughSeq != last {
		t.Fatalf("value loaded through %d, first seq %d, witnessed %+v; want through %d from 1, witnessed", v.LoadedThroughSeq, v.FirstSeq, v.Witnessed, last)
	}
	if v.TokensBefore < b.ThresholdTokens() || v.TokensAfter > b.TargetTokens() {
		t.Fatalf("masking took the context from %d to %d tokens; want from over the threshold %d to at most the target %d",
			v.TokensBefore, v.TokensAfter, b.ThresholdTokens(), b.TargetTokens())
	}
	t.Logf("first: %d -> %d tokens, %d masked", v.TokensBefore, v.TokensAfter, len(v.Overrides))
	checkMasked(t, ctx, nc, st, "mk", v, last)

	// A second compaction masks the newer old outputs; the first masks stay.
	last = publishRounds(t, ctx, st, "mk", 8, 4)
	ev, v2 := compactOutcome(t, ctx, st, "mk", last)
	if ev.Type != schemas.EventCompleted || ev.Error != "" || v2.Generation != 2 || v2.Strategy != summarizer.StrategyMask || v2.TailStartSeq != 1 {
		t.Fatalf("second outcome %+v, value generation %d strategy %q tail %d; want generation 2 of mask, the tail from 1",
			ev, v2.Generation, v2.Strategy, v2.TailStartSeq)
	}
	for i, o := range v.Overrides {
		if v2.Overrides[i] != o {
			t.Fatalf("second value's overrides %+v do not start with the first's %+v", v2.Overrides, v.Overrides)
		}
	}
	if len(v2.Overrides) <= len(v.Overrides) || v2.TokensAfter > b.TargetTokens() {
		t.Fatalf("second value masks %d outputs (first %d), context %d tokens; want more, within the target %d",
			len(v2.Overrides), len(v.Overrides), v2.TokensAfter, b.TargetTokens())
	}
	if n := llmCalls(fake); n != 0 {
		t.Fatalf("the LLM was called %d times; masking calls it never", n)
	}
	t.Logf("second: %d -> %d tokens, %d masked", v2.TokensBefore, v2.TokensAfter, len(v2.Overrides))
	checkMasked(t, ctx, nc, st, "mk", v2, last)

	// The same through the compactor service (compactor.context, compactor.recall), as
	// a tenant's user reads and recalls.
	startService(t, nc, st, pol)
	svc, err := pipeline.New(ctx, nc, pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	checkMaskedWith(t, ctx, svc, "mk", v2, last)
}

// startService runs the compactor service on st's connection until the test ends.
func startService(t *testing.T, nc *nats.Conn, st *jetstream.Store, pol rungsPolicy) {
	t.Helper()
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(service.Config{}, nc, st, pol, r.Resolve, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := nc.Request(schemas.StatusSubject, nil, time.Second); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("compactor service did not start: %v", err)
		}
	}
}

// checkMasked reads conv's context as an agent does and checks it against v, the
// value of rungs mask: every message through last is there, tool pairs whole, each
// masked output a placeholder whose recall returns it, every other output verbatim.
func checkMasked(t *testing.T, ctx context.Context, nc *nats.Conn, st *jetstream.Store, conv string, v *schemas.Result, last uint64) {
	t.Helper()
	checkMaskedWith(t, ctx, pipeline.NewWithStore(nc, st), conv, v, last)
}

// checkMaskedWith is checkMasked with the client cl.
func checkMaskedWith(t *testing.T, ctx context.Context, cl *pipeline.Client, conv string, v *schemas.Result, last uint64) {
	t.Helper()
	c, err := cl.Context(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(c.Messages)) != last || c.HasSummary || len(c.Skipped) > 0 {
		t.Fatalf("context of %d messages (summary %v, skipped %v); want all %d messages", len(c.Messages), c.HasSummary, c.Skipped, last)
	}
	if err := rounds.CheckPairs(c.Messages); err != nil {
		t.Fatalf("a tool pair is split: %v", err)
	}
	if c.Tokens != v.TokensAfter {
		t.Fatalf("context of %d tokens; the value says %d", c.Tokens, v.TokensAfter)
	}
	masked := map[uint64]schemas.Override{}
	for _, o := range v.Overrides {
		masked[o.Seq] = o
	}
	newest := true
	for i := len(c.Messages) - 1; i >= 0; i-- {
		m, seq := c.Messages[i], c.Seqs[i]
		if m.Role != schemas.RoleTool {
			continue
		}
		text := m.Content.String()
		o, ok := masked[seq]
		if ok && newest {
			t.Fatalf("the newest tool output (seq %d) is masked", seq)
		}
		newest = false
		if !ok {
			if text != strings.Repeat("w", 1600) {
				t.Fatalf("unmasked output %d reads %q; want it verbatim", seq, text)
			}
			continue
		}
		want := fmt.Sprintf("\n[… 1600 characters cut by Compactor: tool output of bash (call %s) masked; recall it with compactor recall %s --from-seq %d --to-seq %d",
			m.ToolCallID, conv, seq-1, seq)
		if !strings.HasPrefix(text, want) || strings.Contains(text, "ww") {
			t.Fatalf("masked output %d reads %q; want it to start %q, with nothing of the output", seq, text, want)
		}
		from, to, budget := recallRange(t, o.Note)
		r, err := cl.Recall(ctx, conv, pipeline.FromSeq(from), pipeline.ToSeq(to), pipeline.MaxTokens(budget))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Messages) != 2 || r.Messages[1].Seq != seq || r.Messages[1].Message.Content.String() != strings.Repeat("w", 1600) || r.CutByBudget {
			t.Fatalf("recall of %d–%d within %d tokens = %+v; want the call and the output verbatim", from, to, budget, r)
		}
	}
	if len(masked) == 0 {
		t.Fatal("nothing masked")
	}
}

// publishMixed publishes rounds old tool rounds (masking saves in them), then plain
// messages of 1,600 characters each that masking cannot shrink.
func publishMixed(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, rounds, plain int) uint64 {
	t.Helper()
	publishRounds(t, ctx, st, conv, 0, rounds)
	return seed(t, ctx, st, conv, plain)
}

// Rungs mask-then-summary calls the LLM only when masking cannot reach the target: a
// conversation of old tool outputs is masked (no call); one whose bulk is plain
// messages is summarized (the LLM called), and its value is the summary's.
func TestMaskThenSummaryCallsTheLLMOnlyWhenMaskingIsNotEnough(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pol := rungsPolicy{"tools": policy.RungsMaskThenSummary, "plain": policy.RungsMaskThenSummary}
	s, _ := pol.Settings(ctx, "tools")
	b := s.Budget()
	fake := maskingPool(t, st, pol)

	publishUser(t, ctx, st, "tools", "Read the files of /repo, one at a time.")
	last := publishRounds(t, ctx, st, "tools", 0, 8)
	ev, v := compactOutcome(t, ctx, st, "tools", last)
	if ev.Type != schemas.EventCompleted || v.Strategy != summarizer.StrategyMask || v.TokensAfter > b.TargetTokens() {
		t.Fatalf("outcome %+v, value of strategy %q with %d tokens; want a completed mask within the target %d", ev, v.Strategy, v.TokensAfter, b.TargetTokens())
	}
	if n := llmCalls(fake); n != 0 {
		t.Fatalf("the LLM was called %d times; masking was enough", n)
	}

	last = publishMixed(t, ctx, st, "plain", 2, 6)
	ev, v = compactOutcome(t, ctx, st, "plain", last)
	if ev.Type != schemas.EventCompleted || v.Strategy != s.Strategy || !strings.Contains(v.Summary, "/repo") || v.Fallback {
		t.Fatalf("outcome %+v, value %+v; want a completed summary by the LLM", ev, v)
	}
	if n := llmCalls(fake); n == 0 {
		t.Fatal("the LLM was not called; masking could not reach the target")
	}
	if v.TokensAfter > b.TargetTokens() {
		t.Fatalf("the summary's context has %d tokens; want at most the target %d", v.TokensAfter, b.TargetTokens())
	}
}

// Rungs mask never calls the LLM below the hard limit: masking that cannot reach the
// target is written all the same, and its completed event says so. Past the hard
// limit with its tool outputs masked, it summarizes: the bound wins over the rung.
func TestMaskOverTheTargetIsReportedAndThePastTheHardLimitSummarized(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pol := rungsPolicy{"over": policy.RungsMask, "past": policy.RungsMask}
	s, _ := pol.Settings(ctx, "over")
	b := s.Budget()
	fake := maskingPool(t, st, pol)

	last := publishMixed(t, ctx, st, "over", 2, 6)
	ev, v := compactOutcome(t, ctx, st, "over", last)
	if ev.Type != schemas.EventCompleted || v.Strategy != summarizer.StrategyMask || len(v.Overrides) == 0 {
		t.Fatalf("outcome %+v, value of strategy %q; want a completed mask", ev, v.Strategy)
	}
	if v.TokensAfter <= b.TargetTokens() || v.TokensAfter >= b.HardLimitTokens() || !strings.Contains(ev.Error, "over the target") {
		t.Fatalf("context of %d tokens, event error %q; want it between the target %d and the hard limit %d, reported",
			v.TokensAfter, ev.Error, b.TargetTokens(), b.HardLimitTokens())
	}
	if n := llmCalls(fake); n != 0 {
		t.Fatalf("the LLM was called %d times below the hard limit", n)
	}

	last = publishMixed(t, ctx, st, "past", 2, 10)
	ev, v = compactOutcome(t, ctx, st, "past", last)
	if ev.Type != schemas.EventCompleted || v.Strategy != s.Strategy || v.TokensAfter > b.TargetTokens() {
		t.Fatalf("outcome %+v, value of strategy %q with %d tokens; want a summary within the target %d", ev, v.Strategy, v.TokensAfter, b.TargetTokens())
	}
	if n := llmCalls(fake); n == 0 {
		t.Fatal("the LLM was not called past the hard limit")
	}
}

// Rungs mask declines a compaction that masks nothing worth writing (no old tool
// output): the value is a decline marker, and the LLM is not called.
func TestMaskWithNothingToMaskDeclines(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake := maskingPool(t, st, rungsPolicy{"flat": policy.RungsMask})
	last := seed(t, ctx, st, "flat", 8)
	ev, v := compactOutcome(t, ctx, st, "flat", last)
	if ev.Type != schemas.EventDeclined || !strings.Contains(ev.Error, "masking 0 old tool outputs") || v == nil || v.Generation != 0 {
		t.Fatalf("outcome %+v, value %+v; want a decline naming the masking", ev, v)
	}
	if n := llmCalls(fake); n != 0 {
		t.Fatalf("the LLM was called %d times", n)
	}
}

// defaultWindowMask is the default policy (a 128,000-token window) with rungs mask.
type defaultWindowMask struct{}

func (defaultWindowMask) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.Rungs = policy.RungsMask
	return s, s.Validate()
}

// A masked value is never what makes a compaction fail: masks of so many outputs
// that the value would not fit the server's max payload (here 64 KiB) are not
// written, and the job summarizes instead; its value fits.
func TestMasksOverTheMaxPayloadAreSummarizedInstead(t *testing.T) {
	const maxPayload = 64 << 10
	srv := jstest.ServerWith(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fake, sum := newFaultyLLM(t, 30*time.Second, func(_ int, _ []byte, w http.ResponseWriter, _ *http.Request) {
		summaryOf(w, "The agent ran sed over 300 files of /repo.")
	})
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: defaultWindowMask{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	last := publishRounds(t, ctx, st, "many", 0, 300)
	ev, v := compactOutcome(t, ctx, st, "many", last)
	if ev.Type != schemas.EventCompleted || v == nil || v.Strategy == summarizer.StrategyMask || v.Summary == "" {
		t.Fatalf("outcome %+v, value %+v; want a completed summary", ev, v)
	}
	if n := llmCalls(fake); n == 0 {
		t.Fatal("the LLM was not called")
	}
	b, err := json.Marshal(v)
	if err != nil || len(b) > maxPayload {
		t.Fatalf("value of %d bytes (%v); want it under the max payload %d", len(b), err, maxPayload)
	}
}
