package eval

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas/policy"
)

// TestRungs replays the two fixture transcripts of testdata/rungs with the three rungs
// and the LLM summarizer (the real go-openai client against the fake), at W = 4000
// with tool-rounds keeping one round:
//
//   - tool-heavy.jsonl: 10 tool rounds of ~600-token outputs. Its first compaction comes
//     at the fifth round (over 3000 tokens); masking the four rounds before the last
//     brings it near 1100 tokens, under the 2000 of the target, and so does the next:
//     mask and mask-then-summary call no LLM at all, summary does.
//   - talk-heavy.jsonl: 16 messages of ~300 tokens, no tool output: nothing to mask, so
//     mask-then-summary summarizes, and mask declines until the hard limit (3800),
//     then summarizes to keep the bound.
func TestRungs(t *testing.T) {
	f := newFakeLLM(t)
	r, err := policy.NewResolver(policy.Layer{"tool_rounds": "1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join("testdata", "rungs", "tool-heavy.jsonl"), filepath.Join("testdata", "rungs", "talk-heavy.jsonl")}
	rep := runEval(t, Config{Files: files, Strategies: []string{"tool-rounds"}, Rungs: policy.Rungs, Window: 4000,
		Resolver: r, Summarizers: f.summarizers(t), SummarizerName: "fake", Concurrency: 2})
	if rep.Broken() != 0 {
		t.Fatalf("%d broken tool pairs or missing pins; want 0", rep.Broken())
	}
	if len(rep.Strategies) != 3 {
		t.Fatalf("%d arms; want 3 (one strategy × three rungs)", len(rep.Strategies))
	}
	by := map[string]ConvResult{}
	calls := 0
	for _, c := range rep.Conversations {
		by[strings.TrimSuffix(c.File, ".jsonl")+"/"+c.Rungs] = c
		calls += c.SummarizerCalls
	}
	if int(f.summaries.Load()) != calls {
		t.Errorf("the fake LLM summarized %d times; the report counts %d calls", f.summaries.Load(), calls)
	}
	for _, tc := range []struct {
		key      string
		wantLLM  bool
		minCompa int
	}{
		{"tool-heavy/summary", true, 1},
		{"tool-heavy/mask", false, 2},
		{"tool-heavy/mask-then-summary", false, 2},
		{"talk-heavy/mask-then-summary", true, 1},
		{"talk-heavy/mask", true, 1},
	} {
		c, ok := by[tc.key]
		if !ok {
			t.Fatalf("no replay %s in %v", tc.key, rep.Conversations)
		}
		if (c.SummarizerCalls > 0) != tc.wantLLM || c.Compactions < tc.minCompa {
			t.Errorf("%s: %d LLM calls, %d compactions; want calls %v and at least %d compactions", tc.key, c.SummarizerCalls, c.Compactions, tc.wantLLM, tc.minCompa)
		}
		// Every compaction swapped in changes the prefix once at most; an unchanged
		// conversation keeps it every turn.
		breaks := c.Cache.Compared - c.Cache.PrefixKept
		if breaks < 1 || breaks > c.Compactions || c.Cache.SwapWrite == 0 || c.Cache.SwapWrite > c.Cache.CacheWrite {
			t.Errorf("%s: %d prefix breaks for %d compactions, swap writes %d of %d; want 1 to %d, and some of the writes",
				tc.key, breaks, c.Compactions, c.Cache.SwapWrite, c.Cache.CacheWrite, c.Compactions)
		}
		if c.Cache.Sent != c.TokensWith || c.Cache.CacheRead+c.Cache.CacheWrite != c.Cache.Sent {
			t.Errorf("%s: %+v against %d tokens sent; want sent = read + writes = tokens sent", tc.key, c.Cache, c.TokensWith)
		}
		w := c.CacheWithout
		if w.PrefixKept != w.Compared || w.SwapWrite != 0 || w.Sent != c.TokensWithout {
			t.Errorf("%s: without compaction %+v; want every prefix kept, no swap writes, %d sent", tc.key, w, c.TokensWithout)
		}
	}
	if m := by["tool-heavy/mask"]; m.Cache.Sent >= m.CacheWithout.Sent {
		t.Errorf("tool-heavy mask sent %d tokens; want fewer than the %d without compaction", m.Cache.Sent, m.CacheWithout.Sent)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tool-rounds mask-then-summary", "prefix identical", "Published figures for LLM summaries", Baselines, "no price table"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, table.String())
		}
	}
}

// TestProbeFile asks a probe file's four dimensions of the fake, which answers every
// one of them the same: "The parser overflow was fixed in keep.py; next, run check.py."
// Each dimension's score is the share of its expected terms in that answer.
func TestProbeFile(t *testing.T) {
	probes, err := ParseProbes([]byte(`{"note": "test", "probes": [
		{"dimension": "recall", "question": "PROBE: what overflowed?", "expect": ["Parser", "overflow"]},
		{"dimension": "artifact", "question": "PROBE: which files?", "expect": ["keep", "missing"]},
		{"dimension": "continuation", "question": "PROBE: what next?", "expect": ["check"]},
		{"dimension": "decision", "question": "PROBE: decided?", "expect": ["nothing"]},
		{"dimension": "decision", "question": "PROBE: elsewhere?", "expect": ["keep"], "file": "other.jsonl"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeLLM(t)
	p := NewProber(f.srv.URL, "test", "fake-model")
	p.Questions = probes
	file := writeJSONL(t, t.TempDir(), "session.jsonl", agentSession())
	rep := runEval(t, Config{Files: []string{file}, Strategies: []string{"all"}, Window: 2000,
		Summarizers: f.summarizers(t), SummarizerName: "fake", Prober: p})
	c := rep.Conversations[0]
	if c.Probes == nil {
		t.Fatalf("no probe scores (error %q)", c.ProbeError)
	}
	want := map[string]float64{"recall": 1, "artifact": 0.5, "continuation": 1, "decision": 0}
	if !reflect.DeepEqual(c.Probes.Dimensions, want) {
		t.Errorf("dimensions %v; want %v (the probe of other.jsonl not asked)", c.Probes.Dimensions, want)
	}
	if n := f.fileProbes.Load(); n != 4 {
		t.Errorf("%d probe-file questions asked; want 4", n)
	}
	if s := rep.Strategies[0].Probes; s == nil || !reflect.DeepEqual(s.Dimensions, want) {
		t.Errorf("the strategy's probes %+v; want the conversation's dimensions", s)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "continuation") {
		t.Errorf("the table has no dimension column:\n%s", table.String())
	}
}

func TestParseProbesRefuses(t *testing.T) {
	for _, tc := range []struct{ name, give, want string }{
		{"unknown dimension", `{"probes":[{"dimension":"vibes","question":"q","expect":["a"]}]}`, `dimension "vibes"`},
		{"no question", `{"probes":[{"dimension":"recall","question":" ","expect":["a"]}]}`, "want a question"},
		{"no terms", `{"probes":[{"dimension":"recall","question":"q","expect":[]}]}`, "expected terms"},
		{"a phrase", `{"probes":[{"dimension":"recall","question":"q","expect":["two words"]}]}`, "one word"},
		{"unknown field", `{"probes":[{"dimension":"recall","question":"q","expect":["a"],"weight":2}]}`, "unknown field"},
		{"none", `{"probes":[]}`, "want 1 to"},
		{"two documents", `{"probes":[{"dimension":"recall","question":"q","expect":["a"]}]} {}`, "more than one"},
	} {
		_, err := ParseProbes([]byte(tc.give))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an ErrConfig saying %q", tc.name, err, tc.want)
		}
	}
}
