package summarizer

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/attribute"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/mask"
)

// StrategyMask is the strategy recorded in a value the first rung wrote: old tool
// outputs masked, the summary and the tail start as they were.
const StrategyMask = "mask"

// maskFirst is the first rung of a conversation whose rungs are mask or
// mask-then-summary: before any LLM call, the tool outputs the split would summarize
// (the covered ones, as planned) are masked instead (mask.Outputs), every message
// staying where it is. done says the job ended here: the masked value was written
// (or, for rungs mask, the request declined); otherwise the job summarizes as
// usual.
//
//   - mask-then-summary writes the masked value when it passes the min_progress guard
//     and brings the context to the target; otherwise it summarizes.
//   - mask writes it when it passes the guard, at the target or not (a context left
//     over the target is reported: the completed event's error, a log line), and
//     declines when it does not; it summarizes only when the context is still past
//     the hard limit with its tool outputs masked: the bound wins over the rung.
//   - both summarize when the value with its masks would not fit one NATS message.
//
// A repair of a fallback summary is not masked: it summarizes.
func (p *Pool) maskFirst(ctx context.Context, c *compaction) (done bool, err error) {
	j := c.j
	if c.s.Rungs != policy.RungsMask && c.s.Rungs != policy.RungsMaskThenSummary || j.repairing() {
		return false, nil
	}
	var (
		next   *schemas.Result
		masked int
		after  assemble.Context
	)
	_ = p.step(ctx, "compactor.mask", func(context.Context) error {
		next, masked = p.maskValue(c)
		after = assemble.Assemble(assemble.Input{Value: next, Pinned: sortedBySeq(c.ld.pinned, c.ld.kept, c.ld.repinned), Tail: c.ld.entries},
			assemble.Options{Counter: c.count})
		return nil
	}, attribute.Int("compactor.tokens_before", c.before.Tokens))
	next.TokensAfter, next.MessagesAfter = after.Tokens, len(after.Messages)
	b := c.s.Budget()
	before, target, hard := c.before.Tokens, b.TargetTokens(), b.HardLimitTokens()
	progress := masked > 0 && float64(after.Tokens) <= float64(before)*(1-c.s.MinProgress)
	log := j.log.With().Str("rungs", c.s.Rungs).Int("masked", masked).Int("tokens_before", before).
		Int("tokens_after", after.Tokens).Int("target", target).Logger()
	maxValue := int(p.store.MaxPayload()) - jetstream.HeaderRoom
	switch {
	case masked > 0 && encodedSize(next) > maxValue:
		// The summary leaves fewer messages in the tail, and fewer overrides.
		log.Warn().Int("max_bytes", maxValue).Msg("the value with its masks would not fit one NATS message; summarizing")
		return false, nil
	case progress && after.Tokens <= target:
	case c.s.Rungs == policy.RungsMaskThenSummary:
		log.Info().Msg("masking old tool outputs cannot reach the target; summarizing")
		return false, nil
	case after.Tokens >= hard:
		log.Warn().Int("hard_limit", hard).Msg("past the hard limit with old tool outputs masked; summarizing to keep the bound")
		return false, nil
	case !progress:
		return true, p.decline(ctx, j, c.ld, before, after.Tokens, fmt.Sprintf(
			"masking %d old tool outputs would shrink the context from %d to %d tokens, less than min_progress %g", masked, before, after.Tokens, c.s.MinProgress))
	default:
		j.maskShort = fmt.Sprintf("masking left the context at %d tokens, over the target %d (rungs mask summarizes only past the hard limit, %d)",
			after.Tokens, target, hard)
		log.Warn().Msg("masking did not reach the target")
	}
	c.next, c.after = next, after
	if err := p.commit(ctx, c); err != nil {
		return true, err
	}
	if err := p.checkCommitted(ctx, j); err != nil {
		return true, err
	}
	return true, p.finish(ctx, j, c.next, c.ld.lastSeq, c.s, c.count)
}

// maskValue is the next value of the first rung, and how many tool outputs it masks
// that the current value did not: the current value (without the pinned and kept
// messages that left CHAT, as a decline's), its summary, evidence, tail start and
// fallback state as they are, with one more override per masked output, and the
// messages pinned since they were summarized (the pins policy key) in pinned_seqs. A
// tool output the pins key names is not masked: the plan does not cover it. No LLM
// wrote anything of it: no model, no usage, the LLM's base generation unchanged.
func (p *Pool) maskValue(c *compaction) (*schemas.Result, int) {
	j, ld := c.j, c.ld
	next := declineMarker(ld, j.req.Conversation)
	if ld.cur == nil && j.tomb != nil {
		next.TailStartSeq = j.tomb.ThroughSeq + 1 // the forgotten conversation is not read
	}
	keep := make(map[uint64]bool, len(next.Overrides))
	for _, o := range next.Overrides {
		keep[o.Seq] = true
	}
	old := make(map[uint64]bool, len(c.pl.coveredEntries))
	for _, e := range c.pl.coveredEntries {
		old[e.Seq] = true
	}
	masks := mask.Outputs(mask.Input{Conversation: j.req.Conversation, Entries: ld.entries,
		Old: func(seq uint64) bool { return old[seq] }, Keep: keep, Counter: c.count})
	next.Overrides = append(slices.Clone(next.Overrides), masks...)
	if len(ld.repinned) > 0 {
		next.PinnedSeqs = slices.Clone(next.PinnedSeqs)
		for _, e := range ld.repinned {
			next.PinnedSeqs = append(next.PinnedSeqs, e.Seq)
		}
		slices.Sort(next.PinnedSeqs)
		next.PinnedSeqs = slices.Compact(next.PinnedSeqs)
	}
	next.Generation = genOf(ld.cur) + 1
	next.Strategy = StrategyMask
	next.Trigger, next.Reason = j.req.Trigger, j.req.Reason
	if j.req.Escalation > 0 {
		next.Reason = fmt.Sprintf("%s (escalation %d)", next.Reason, j.req.Escalation)
	}
	next.RequestID, next.RequestSeq = j.req.RequestID, j.seq
	next.Model, next.PromptHash, next.Usage = "", "", nil
	next.DeclinedAtSeq = 0
	next.TokensBefore, next.MessagesBefore = c.before.Tokens, len(c.before.Messages)
	next.LoadedThroughSeq = ld.lastSeq
	next.FirstSeq = j.firstSeq
	next.Witnessed = witnessed(j, ld.cur, ld)
	next.CreatedAt = p.now().UTC()
	return &next, len(masks)
}
