package eval

import (
	"strings"
	"testing"
)

// A share of nothing is not 100%: with no conversation compacted (and no facts, no
// commands), the tables say n/a where there is nothing to count, in text and Markdown,
// and the JSON says how many items each share is of.
func TestReportPrintsNoShareOfNothing(t *testing.T) {
	sr := StrategyReport{Strategy: "keep-last-n", Conversations: 2, TokensWith: 100, TokensWithout: 100}
	sr.Paths.add(Count{Total: 4, Kept: 4, KeptWithoutEvidence: 4, KeptByConstruction: 4}, false)
	sr.Paths.add(Count{Total: 2, Kept: 1, KeptWithoutEvidence: 1, KeptByConstruction: 1}, false)
	for _, s := range []*Survival{&sr.Paths, &sr.Commands, &sr.Facts} {
		s.finish()
	}
	if sr.Paths.CompactedTotal != 0 || sr.Paths.CompactedMicro != 0 || sr.Commands.Micro != 0 || sr.Commands.Macro != 0 {
		t.Fatalf("shares of nothing: %+v %+v", sr.Paths, sr.Commands)
	}
	rep := &Report{Files: 2, Window: 8000, Target: 0.5, Strategies: []StrategyReport{sr}}
	var text, md strings.Builder
	if err := rep.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"table": text.String(), "markdown": md.String()} {
		if strings.Contains(out, "100.0%") {
			t.Errorf("%s prints a share of nothing as 100%%:\n%s", name, out)
		}
		if !strings.Contains(out, "n/a") || !strings.Contains(out, "83.3%") {
			t.Errorf("%s:\n%s", name, out)
		}
	}
}
