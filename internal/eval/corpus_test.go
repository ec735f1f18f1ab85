package eval

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas/policy"
)

// TestCorpus replays a third of the shared corpus with the default strategy through the real
// pipeline: no context read breaks a tool pair or loses a pinned message, the counts
// are the ground truth's, and compaction sends fewer tokens. It skips without the
// corpus, and fails instead under CI=true.
func TestCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("the corpus replay takes a few seconds")
	}
	all := corpustest.Load(t)
	allFiles, err := Expand([]string{corpustest.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(allFiles) != len(all) {
		t.Fatalf("%d files; corpustest loaded %d", len(allFiles), len(all))
	}
	// Every third conversation (in name order, so every source is in), to keep it short
	// under -race: the whole corpus is the README's run.
	var files []string
	var convs []corpustest.Conversation
	for i := 0; i < len(all); i += 3 {
		files, convs = append(files, allFiles[i]), append(convs, all[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Files: files, Strategies: []string{"keep-last-n"}, Plant: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Broken() != 0 {
		t.Errorf("%d tool pairs broken or pinned messages missing; want 0", rep.Broken())
	}
	s := rep.Strategies[0]
	if s.Compacted < len(files)/4 || s.TokensWith >= s.TokensWithout {
		t.Errorf("compacted %d of %d, tokens %d with vs %d without; want a quarter compacted at W=%d and fewer tokens",
			s.Compacted, len(files), s.TokensWith, s.TokensWithout, DefaultWindow)
	}
	for i, c := range rep.Conversations {
		truth := Extract(convs[i].Messages())
		if c.File != convs[i].Name || c.Paths.Total != len(truth.Paths) || c.Commands.Total != len(truth.Commands) || c.Facts.Total != 1 {
			t.Errorf("%s: %d paths, %d commands, %d facts; want %d, %d and the 1 planted", c.File, c.Paths.Total, c.Commands.Total,
				c.Facts.Total, len(truth.Paths), len(truth.Commands))
		}
		if c.Compactions == 0 && (c.Paths.Kept != c.Paths.Total || c.Commands.Kept != c.Commands.Total ||
			c.Paths.KeptByConstruction != c.Paths.Total || c.Commands.KeptByConstruction != c.Commands.Total) {
			t.Errorf("%s: not compacted, yet paths %+v and commands %+v; want all kept, also by construction (the whole history is the context)",
				c.File, c.Paths, c.Commands)
		}
		for _, k := range []Count{c.Paths, c.Commands, c.Facts} {
			if k.KeptByConstruction > k.Kept {
				t.Errorf("%s: %+v: more kept by construction than with the summary; want at most as many", c.File, k)
			}
		}
	}
	// The evidence section (on by default) keeps paths and commands of the compacted
	// conversations whatever the summary says.
	if s.Paths.CompactedMicroByConstruction == 0 || s.Commands.CompactedMicroByConstruction == 0 ||
		s.Paths.CompactedMicroByConstruction > s.Paths.CompactedMicro || s.Commands.CompactedMicroByConstruction > s.Commands.CompactedMicro {
		t.Errorf("compacted: paths %.3f by construction (%.3f with the summary), commands %.3f (%.3f); want above 0 and at most as many",
			s.Paths.CompactedMicroByConstruction, s.Paths.CompactedMicro, s.Commands.CompactedMicroByConstruction, s.Commands.CompactedMicro)
	}
	if s.Paths.Total < 150 || s.Commands.Total < 300 {
		t.Errorf("%d paths, %d commands in a third of the corpus; want the ground truth to find hundreds", s.Paths.Total, s.Commands.Total)
	}
}

// TestCorpusRungs compares the three rungs on a ninth of the shared corpus: no context
// read breaks a tool pair, masking calls the summarizer less than summarizing, every
// compacted arm breaks the forwarded prefix at some turns while the uncompacted history
// never does, and a prompt cache narrows what compaction saves (the cache writes its
// swaps cause). It skips without the corpus, and fails instead under CI=true.
func TestCorpusRungs(t *testing.T) {
	if testing.Short() {
		t.Skip("the corpus replay takes a few seconds")
	}
	all := corpustest.Load(t)
	allFiles, err := Expand([]string{corpustest.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(allFiles) != len(all) {
		t.Fatalf("%d files; corpustest loaded %d", len(allFiles), len(all))
	}
	var files []string
	for i := 0; i < len(allFiles); i += 9 {
		files = append(files, allFiles[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Files: files, Rungs: policy.Rungs})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Broken() != 0 {
		t.Errorf("%d tool pairs broken or pinned messages missing; want 0", rep.Broken())
	}
	by := map[string]StrategyReport{}
	for _, s := range rep.Strategies {
		by[s.Rungs] = s
		c, w := s.Cache, s.CacheWithout
		if s.Strategy != "keep-last-n" || s.Compactions == 0 || c.Sent != s.TokensWith || c.Sent >= w.Sent {
			t.Errorf("%s: %d compactions, %d sent (%d read), %d without; want the policy's strategy, compactions and fewer tokens", s.Name(), s.Compactions, c.Sent, s.TokensWith, w.Sent)
		}
		if c.PrefixKept == c.Compared || c.PrefixKept == 0 || c.SwapWrite == 0 || w.PrefixKept != w.Compared {
			t.Errorf("%s: prefix kept %d of %d (%d swap writes), without compaction %d of %d; want some breaks, and none without",
				s.Name(), c.PrefixKept, c.Compared, c.SwapWrite, w.PrefixKept, w.Compared)
		}
		if s.Cost.UncachedRatio <= s.Cost.TokenRatio {
			t.Errorf("%s: uncached ratio %.3f, token ratio %.3f; want a cache to narrow the saving", s.Name(), s.Cost.UncachedRatio, s.Cost.TokenRatio)
		}
	}
	if m, s := by[policy.RungsMask], by[policy.RungsSummary]; m.SummarizerCalls >= s.SummarizerCalls {
		t.Errorf("mask called the summarizer %d times, summary %d; want fewer", m.SummarizerCalls, s.SummarizerCalls)
	}
}
