package summarizer

import (
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// withEvidence gives next its evidence: the previous value's, plus what the newly
// covered entries (as loaded, before pre-trim) hold, and the section rendered within
// the budget's EvidenceTokens. An evidence budget of 0 turns it off: next has neither.
// A previous value whose evidence does not validate is not built on (it is reported);
// the new evidence starts from the covered entries.
func withEvidence(log zerolog.Logger, next, prev *schemas.Result, covered []schemas.Entry, b budget.Budget, count tokens.Counter) {
	limit := b.EvidenceTokens()
	if limit <= 0 {
		return
	}
	var base *schemas.Evidence
	if prev != nil && prev.Evidence != nil {
		if err := prev.Evidence.Validate(); err != nil {
			log.Warn().Err(err).Uint64("generation", prev.Generation).Msg("previous evidence is invalid; not carried forward")
		} else {
			base = prev.Evidence
		}
	}
	next.Evidence = evidence.Merge(base, covered, next.CoveredThroughSeq)
	next.EvidenceText = evidence.Render(next.Evidence, next.CoveredThroughSeq, limit, count)
}
