package evidence_test

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// TestCorpusRecallAcrossGenerations replays every corpus conversation as a chain of
// compactions (each covering all but the newest eight messages seen so far, every
// twelve messages), carrying the evidence forward, and measures which of the paths and
// commands the tool calls name (ArgumentEvidence, plus the paths extraction finds in
// commands) the final context holds: in the section or in the verbatim tail. At the
// default evidence_budget with W = 32,000 (2,400 tokens) the targets hold:
// at least 95% of the paths and 90% of the commands.
func TestCorpusRecallAcrossGenerations(t *testing.T) {
	s := policy.Defaults()
	s.ContextWindow = 32000
	b := s.Budget()
	limit := b.EvidenceTokens()
	var paths, pathsFound, cmds, cmdsFound, sectionMax int
	for _, c := range corpustest.Load(t) {
		es := c.Entries
		var ev *schemas.Evidence
		covered := 0
		for end := 12; end <= len(es); end += 12 {
			through := max(end-8, covered)
			ev = evidence.Merge(ev, es[covered:through], es[through-1].Seq)
			covered = through
		}
		var section string
		if ev != nil {
			section = evidence.Render(ev, ev.ThroughSeq, limit, tokens.Chars4{})
			sectionMax = max(sectionMax, tokens.Text(section))
		}
		var tail strings.Builder
		for _, e := range es[covered:] {
			tail.WriteString(e.Message.Content.String())
			for _, tc := range e.Message.ToolCalls {
				tail.WriteString(tc.Function.Arguments)
			}
		}
		// The tail holds its tool calls' arguments verbatim: their decoded paths and commands.
		tailPaths, tailCmds := evidence.ArgumentEvidence(es[covered:])
		for _, x := range append(tailPaths, tailCmds...) {
			tail.WriteString("\n" + x)
		}
		inContext := func(s string) bool { return strings.Contains(section, s) || strings.Contains(tail.String(), s) }
		wantPaths, wantCmds := evidence.ArgumentEvidence(es)
		for _, it := range evidence.Extract(es) {
			if it.Kind == schemas.EvidenceFile {
				wantPaths = append(wantPaths, it.Value)
			}
		}
		seen := map[string]bool{}
		for _, p := range wantPaths {
			if !seen["p"+p] {
				seen["p"+p] = true
				paths++
				if inContext(p) {
					pathsFound++
				}
			}
		}
		for _, cmd := range wantCmds {
			if !seen["c"+cmd] {
				seen["c"+cmd] = true
				cmds++
				if inContext(cmd) || inContext(strings.TrimSuffix(cmd, evidence.CutMarker)) {
					cmdsFound++
				}
			}
		}
	}
	pr, cr := float64(pathsFound)/float64(paths), float64(cmdsFound)/float64(cmds)
	t.Logf("W=%d, section budget %d tokens (largest %d): paths %d/%d (%.1f%%), commands %d/%d (%.1f%%)",
		b.ContextWindow, limit, sectionMax, pathsFound, paths, 100*pr, cmdsFound, cmds, 100*cr)
	if pr < 0.95 || cr < 0.90 {
		t.Fatalf("recall under the targets: paths %.1f%% (want ≥ 95%%), commands %.1f%% (want ≥ 90%%)", 100*pr, 100*cr)
	}
}
