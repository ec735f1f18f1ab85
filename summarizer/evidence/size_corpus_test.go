package evidence_test

import (
	"slices"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/corpustest"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// TestCorpusSectionSize reports how many tokens each conversation's whole evidence
// section takes, the figure the default evidence_budget was chosen from, and checks that
// no section exceeds its budget.
func TestCorpusSectionSize(t *testing.T) {
	var sizes []int
	for _, c := range corpustest.Load(t) {
		ev := evidence.Merge(nil, c.Entries, uint64(len(c.Entries)))
		whole := evidence.Render(ev, ev.ThroughSeq, 1<<30, tokens.Chars4{})
		sizes = append(sizes, tokens.Text(whole))
		for _, budget := range []int{100, 1000, 3200} {
			if got := tokens.Text(evidence.Render(ev, ev.ThroughSeq, budget, tokens.Chars4{})); got > budget {
				t.Errorf("%s: section of %d tokens over its budget %d", c.Name, got, budget)
			}
		}
		_ = schemas.EvidenceFile
	}
	slices.Sort(sizes)
	n := len(sizes)
	t.Logf("whole section, tokens: median %d, p90 %d, p99 %d, max %d", sizes[n/2], sizes[n*9/10], sizes[n*99/100], sizes[n-1])
}
