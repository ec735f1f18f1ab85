package evidence_test

import (
	"slices"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// TestCorpusSectionSize reports how many tokens each conversation's whole evidence
// section takes, the figure the default evidence_budget was chosen from, and checks that
// no section exceeds its budget and that, at the defaults (W = 128,000), every corpus
// conversation's whole evidence fits.
func TestCorpusSectionSize(t *testing.T) {
	var sizes []int
	limit := policy.Defaults().Budget().EvidenceTokens()
	for _, c := range corpustest.Load(t) {
		ev := evidence.Merge(nil, c.Entries, uint64(len(c.Entries)))
		whole := evidence.Render(ev, ev.ThroughSeq, 1<<30, tokens.Chars4{})
		sizes = append(sizes, tokens.Text(whole))
		for _, budget := range []int{100, 1000, 3200} {
			if got := tokens.Text(evidence.Render(ev, ev.ThroughSeq, budget, tokens.Chars4{})); got > budget {
				t.Errorf("%s: section of %d tokens over its budget %d", c.Name, got, budget)
			}
		}
		if got := evidence.Render(ev, ev.ThroughSeq, limit, tokens.Chars4{}); got != whole {
			t.Errorf("%s: the default budget (%d tokens) cuts its evidence (%d tokens)", c.Name, limit, tokens.Text(whole))
		}
	}
	slices.Sort(sizes)
	n := len(sizes)
	t.Logf("whole section, tokens: median %d, p90 %d, p99 %d, max %d", sizes[n/2], sizes[n*9/10], sizes[n*99/100], sizes[n-1])
}
