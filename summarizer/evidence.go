package summarizer

import (
	"encoding/json"
	"math"
	"slices"

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
// the new evidence starts from the covered entries. Items whose messages have all left
// CHAT (their newest reference is older than firstSeq, the conversation's oldest message
// still there, 0 when none is) are dropped: evidence lives no longer than its messages.
//
// The value must fit one NATS message (maxValue, the connection's max payload less
// room for headers) whatever the evidence holds: JSON escapes some characters six
// bytes to one, and the section repeats the values. When the value would be too large,
// the section is rendered within half the budget, again and again, then the evidence
// is left out, so a compaction is never lost to its evidence (invariant 9).
func withEvidence(log zerolog.Logger, next, prev *schemas.Result, covered []schemas.Entry, b budget.Budget, count tokens.Counter, maxValue int, firstSeq uint64) {
	limit := b.EvidenceTokens()
	if limit <= 0 {
		return
	}
	var base *schemas.Evidence
	if prev != nil && prev.Evidence != nil {
		if err := prev.Evidence.Validate(); err != nil {
			log.Warn().Err(err).Uint64("generation", prev.Generation).Msg("previous evidence is invalid; not carried forward")
		} else {
			base = evidence.Since(prev.Evidence, firstSeq)
		}
	}
	next.Evidence = evidence.Merge(base, covered, next.CoveredThroughSeq)
	for {
		for l := limit; ; l /= 2 {
			next.EvidenceText = evidence.Render(next.Evidence, next.CoveredThroughSeq, l, count)
			if encodedSize(next) <= maxValue {
				return
			}
			if l <= 1 {
				break
			}
		}
		// The items themselves are too large: keep the better ranked half, and again.
		if len(next.Evidence.Items) == 0 {
			log.Warn().Int("max_bytes", maxValue).Uint64("generation", next.Generation).
				Msg("the value would not fit one NATS message even without evidence items; written without evidence")
			next.Evidence, next.EvidenceText = nil, ""
			return
		}
		log.Warn().Int("items", len(next.Evidence.Items)).Int("max_bytes", maxValue).Uint64("generation", next.Generation).
			Msg("the value with its evidence would not fit one NATS message; keeping the better ranked half of the evidence")
		next.Evidence = betterHalf(next.Evidence)
	}
}

// betterHalf returns ev with the better ranked half of its items (evidence.Rank), in
// their stored order.
func betterHalf(ev *schemas.Evidence) *schemas.Evidence {
	ranked := slices.Clone(ev.Items)
	slices.SortFunc(ranked, evidence.Rank)
	type key struct{ kind, value string }
	keep := make(map[key]bool, len(ranked)/2)
	for _, it := range ranked[:len(ranked)/2] {
		keep[key{it.Kind, it.Value}] = true
	}
	out := &schemas.Evidence{ThroughSeq: ev.ThroughSeq}
	for _, it := range ev.Items {
		if keep[key{it.Kind, it.Value}] {
			out.Items = append(out.Items, it)
		}
	}
	return out
}

// encodedSize is the size of v as written to the bucket (math.MaxInt when it does not
// encode, so the caller drops what it can).
func encodedSize(v *schemas.Result) int {
	b, err := json.Marshal(v)
	if err != nil {
		return math.MaxInt
	}
	return len(b)
}
