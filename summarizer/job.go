package summarizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/pretrim"
	"github.com/compactor/compactor/summarizer/split"
	"github.com/compactor/compactor/summarizer/summary"
)

// loaded is what a job read before summarizing.
type loaded struct {
	cur     *schemas.Result
	rev     uint64
	pinned  []schemas.Entry // pinned forever: cur.PinnedSeqs without cur.KeptSeqs
	kept    []schemas.Entry // kept ahead of the summary by the last split: cur.KeptSeqs
	missing []schemas.Entry // pinned or kept messages no longer in CHAT: dropped
	// repinned are messages the pins policy key names that were summarized before they
	// were pinned (below the loaded range, not in cur.PinnedSeqs): pinned from this
	// compaction on, so they come back verbatim. They are not in the agent's context yet.
	repinned []schemas.Entry
	// badPins are sequences of the pins key that are not this conversation's messages
	// (another conversation's, gone, or never stored): ignored, and reported.
	badPins []uint64
	entries []schemas.Entry // everything from the current tail start
	leading bool            // entries start at the conversation's first message
	lastSeq uint64
}

// compaction is what the steps of one job decided, for the steps after them: the
// value read from the leader and its revision, the conversation's settings and
// collaborators, what was loaded and planned, the summary and the value to write.
type compaction struct {
	j     *job
	cur   *schemas.Result // the current value (nil: none)
	rev   uint64          // cur's revision, the compare-and-set's base
	s     policy.Settings // the conversation's settings, escalated for the plan only
	sum   Summarizer
	count tokens.Counter

	ld     *loaded
	pl     plan
	before assemble.Context // the agent's context before this compaction
	in     Input            // what the summarizer is asked
	out    Output           // its summary, or the fallback's
	next   *schemas.Result  // the value to write
	after  assemble.Context // the agent's context with next

	// repair is the repair of a value built on a fallback this job tries (nil: none);
	// repaired says the LLM wrote the summary from the raw messages.
	repair   *repairPlan
	repaired bool
	// repairBudget is what the quota reserved for the repair (repairCost), which it
	// may not pass (0: no quota, no bound).
	repairBudget int
	// repairFailed says the summarizer could not make the repair (a failure no retry
	// helps): the value records it and postpones the next (countRepairFailure).
	repairFailed bool
}

// pastHardLimit reports whether the agent's context before this compaction is past its
// hard limit: then a fallback keeps the bound when no summary by the LLM may be had.
func (c *compaction) pastHardLimit() bool {
	return c.before.Tokens >= c.s.Budget().HardLimitTokens()
}

// process runs steps 2–6 of the job protocol. A nil error means the request was acked.
// JetStream hears that the job is alive from the start: loading and planning a huge
// conversation count as work too.
func (p *Pool) process(ctx context.Context, j *job) error {
	stop := j.keepAlive(p.cfg.InProgressEvery)
	defer stop()
	if err := p.checkForgotten(ctx, j); err != nil {
		return err
	}
	// 2. The current value, from the leader.
	c, err := p.readCurrent(ctx, j)
	if err != nil {
		return err
	}
	if j.outdatedBy(c.cur) {
		return errStale
	}
	if p.checkDone(c) {
		return p.finish(ctx, j, c.cur, 0, policy.Settings{}, nil)
	}
	if err := p.resolve(ctx, c); err != nil {
		return err
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventStarted, Generation: genOf(c.cur)})
	// 3. Load, split, pre-trim, summarize.
	if err := p.loadAndPlan(ctx, c); err != nil {
		return err
	}
	if done, err := p.checkHoles(ctx, c); done || err != nil {
		return err
	}
	if done, err := p.maskFirst(ctx, c); done || err != nil {
		return err
	}
	if err := p.planRepair(ctx, c); err != nil {
		return err
	}
	if j.repairing() && c.repair != nil && c.repair.gap {
		return p.markGap(ctx, c)
	}
	if c.repair != nil && !c.repair.gap {
		// A repair summarizes the covered range again, from CHAT: never across a hole.
		if done, err := p.checkRepairHoles(ctx, c); done || err != nil {
			return err
		}
	}
	if j.repairing() && c.repair == nil && len(c.pl.covered) == 0 {
		return p.endRepair(ctx, c, errRepairPostponed) // no marker: the value says until when
	}
	if len(c.pl.covered) == 0 && c.repair == nil {
		return p.decline(ctx, j, c.ld, c.before.Tokens, c.before.Tokens, "nothing to compact: every message is pinned, kept or must stay in the tail")
	}
	q, err := p.quotaAllows(ctx, c)
	if err != nil {
		return err
	}
	if q.Release != nil {
		defer q.Release() // on every path out, a panic's too
	}
	if q.Reason != "" {
		if err = p.overQuota(ctx, c, q); err == nil && !c.out.Fallback {
			return nil // declined
		}
	} else {
		err = p.summarizeOrFallBack(summary.ChargeTo(ctx, q.Tag), c)
		if q.Release != nil {
			q.Release() // the calls are made and counted: the reservation goes before the value is written
		}
	}
	if err != nil {
		if errors.Is(err, errNoLLM) || errors.Is(err, errRepairEnds) {
			return p.endRepair(ctx, c, err)
		}
		return err
	}
	// 4. Guard.
	c.next = p.result(j, c.ld, c.pl, c.out, c.before, c.s)
	p.markFallbackState(c)
	if err := p.addEvidence(ctx, c); err != nil {
		return err
	}
	if reason := p.guard(c); reason != "" {
		return p.decline(ctx, j, c.ld, c.before.Tokens, c.after.Tokens, reason)
	}
	// 5. Compare-and-set on the revision read in step 2, then the tombstone check.
	if err := p.commit(ctx, c); err != nil {
		return err
	}
	if err := p.checkCommitted(ctx, j); err != nil {
		return err
	}
	if c.repaired {
		j.repair = RepairRepaired
	}
	// 6. Ack, report, re-evaluate.
	return p.finish(ctx, j, c.next, c.ld.lastSeq, c.s, c.count)
}

// quotaAllows asks the pool's quota whether c may be summarized (any decision allows
// it without a quota): its estimate is the size of the request its summarizer makes
// (prompt, previous summary, the newly covered messages, and the completion tokens it
// reserves), so what is reserved covers what the call may spend.
//
// A repair reserves what it sends (repairCost: every window of the raw messages the
// fallback covers) with the usual request, which it makes when the repair fails, and
// spends no more than that (repairBudget). A repair that does not fit waits for the
// quota: its own request stays queued (the value keeps the bound meanwhile), and any
// other compaction goes on without it, built on the fallback, which stays to be
// repaired.
func (p *Pool) quotaAllows(ctx context.Context, c *compaction) (QuotaDecision, error) {
	if p.quota == nil {
		return QuotaDecision{}, nil
	}
	conv, compacted := c.j.req.Conversation, c.cur != nil && c.cur.Generation > 0
	estimate := requestTokens(c.sum, summaryInput(c))
	if c.repair != nil && !c.repair.gap && p.heldOff(c.sum) == nil {
		cost, err := p.repairCost(ctx, c)
		if err != nil {
			return QuotaDecision{}, err
		}
		q, err := p.quota.Allow(ctx, conv, compacted, estimate+cost)
		if err != nil || q.Reason == "" {
			c.repairBudget = cost
			return q, err
		}
		if c.j.repairing() && len(c.pl.covered) == 0 {
			return q, nil // nothing but the repair to do: it waits
		}
		c.j.log.Info().Int("repair_tokens", cost).Str("reason", q.Reason).Msg("the repair of the fallback summary waits for the quota; compacting without it")
		c.repair, c.j.repair = nil, RepairFailed
	}
	return p.quota.Allow(ctx, conv, compacted, estimate)
}

// overQuota is a compaction its quota does not allow now. A repair of a fallback stays
// queued, asked again once the quota allows it (its value keeps the bound meanwhile). A
// context past its hard limit gets the extractive fallback, which spends no tokens and is
// repaired once the quota allows it: the bound holds whatever the quota (c.out is then
// the fallback, and the compaction goes on). Any other is declined with the reason.
func (p *Pool) overQuota(ctx context.Context, c *compaction, q QuotaDecision) error {
	qerr := &quotaError{reason: q.Reason, retryIn: q.RetryIn}
	switch {
	case c.j.repairing():
		c.j.repair = RepairFailed
		return qerr
	case c.pastHardLimit():
		c.in = summaryInput(c)
		return p.writeFallback(ctx, c, qerr, true)
	}
	return p.decline(ctx, c.j, c.ld, c.before.Tokens, c.before.Tokens, q.Reason)
}

// checkForgotten decides whether the request was made before its conversation was
// forgotten (errForgotten: it is dropped), and keeps the tombstone for the later reads.
// A dropped request may be the redelivery of one whose job wrote its value and died,
// or could not check, before taking it back: a value the tombstone covers is removed.
func (p *Pool) checkForgotten(ctx context.Context, j *job) error {
	tomb, err := p.store.Forgotten(ctx, j.req.Conversation)
	if err != nil {
		return err
	}
	j.tomb = tomb
	if !tomb.Covers(j.req.UpToSeq) {
		return nil
	}
	cur, rev, err := p.store.Results().Get(ctx, j.req.Conversation, true)
	if err != nil && !errors.Is(err, schemas.ErrInvalid) {
		var newer *schemas.ErrNewerSchema
		if !errors.As(err, &newer) {
			return err
		}
	}
	if cur != nil && tomb.Covers(cur.FirstSeq) {
		if err := p.store.Results().Remove(ctx, j.req.Conversation, rev); err != nil {
			return err
		}
		j.log.Warn().Uint64("revision", rev).Msg("removed a value of the forgotten conversation")
	}
	return errForgotten
}

// readCurrent reads the current value from the leader; a value it cannot decode is a
// permanent failure. A value of the forgotten conversation is removed and not built on.
func (p *Pool) readCurrent(ctx context.Context, j *job) (*compaction, error) {
	conv := j.req.Conversation
	cur, rev, err := p.store.Results().Get(ctx, conv, true)
	if err != nil {
		var newer *schemas.ErrNewerSchema
		if errors.As(err, &newer) || errors.Is(err, schemas.ErrInvalid) {
			return nil, fmt.Errorf("%w: %v", errPermanent, err)
		}
		return nil, err
	}
	if cur != nil && j.tomb.Covers(cur.FirstSeq) {
		// A value of the forgotten conversation is still there: the forget has not
		// reached it yet, or the process that wrote it died before taking it back. The new
		// conversation does not build on it.
		if err := p.store.Results().Remove(ctx, conv, rev); err != nil {
			return nil, err
		}
		j.log.Warn().Uint64("revision", rev).Msg("removed a value of the forgotten conversation")
		cur, rev = nil, 0
	}
	if cur != nil {
		j.firstSeq = min(j.firstSeq, cur.FirstSeq)
	}
	return &compaction{j: j, cur: cur, rev: rev}, nil
}

// checkDone decides whether the work was done before a crash: the value holds this
// request (its queue sequence and its id), which is then only reported and acked.
func (p *Pool) checkDone(c *compaction) bool {
	j := c.j
	if c.cur == nil || c.cur.RequestSeq != j.seq || c.cur.RequestID != j.req.RequestID {
		return false
	}
	if c.cur.NeedsRepair() {
		// Its value is a fallback (or built on one): the request stayed queued to
		// repair it (finish), and this delivery is the repair.
		j.repairOfOwn = true
		return false
	}
	j.outcome = OutcomeAlreadyDone
	j.log.Info().Uint64("generation", c.cur.Generation).Msg("request already done before a restart; acking")
	return true
}

// resolve finds the conversation's settings, its summarizer and its token counter; a
// policy, profile or tokenizer that cannot be used is a permanent failure.
func (p *Pool) resolve(ctx context.Context, c *compaction) error {
	s, err := p.policies.Settings(ctx, c.j.req.Conversation)
	if err != nil {
		if errors.Is(err, policy.ErrPolicy) {
			return fmt.Errorf("%w: %v", errPermanent, err)
		}
		return err
	}
	c.s = s
	if c.sum, err = p.summarizers(s); err != nil {
		return fmt.Errorf("%w: summarizer of profile %q: %v", errPermanent, s.Profile, err)
	}
	if c.count, err = p.cfg.counter(s.Tokenizer); err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	return nil
}

// loadAndPlan loads the conversation above the forgotten one's messages, splits it
// (escalated as the request asks) into pinned, kept, covered and tail, and measures the
// agent's context before the compaction; a split that fails is a permanent failure.
func (p *Pool) loadAndPlan(ctx context.Context, c *compaction) error {
	j := c.j
	var forgottenThrough uint64 // the forgotten conversation's messages are not read
	if j.tomb != nil {
		forgottenThrough = j.tomb.ThroughSeq
	}
	err := p.step(ctx, "compactor.load", func(ctx context.Context) (err error) {
		c.ld, err = p.load(ctx, j.req.Conversation, c.cur, c.rev, j.req.UpToSeq, forgottenThrough, c.s.PinnedSeqs())
		return err
	})
	if err != nil {
		return err
	}
	ld := c.ld
	for _, l := range [][]schemas.Entry{ld.pinned, ld.kept, ld.entries, ld.repinned} {
		for _, e := range l {
			j.firstSeq = min(j.firstSeq, e.Seq)
		}
	}
	for _, e := range ld.missing {
		j.log.Warn().Err(e.Err).Uint64("seq", e.Seq).Msg("pinned message is gone; dropped from the value")
	}
	for _, seq := range ld.badPins {
		j.log.Warn().Uint64("seq", seq).Msg("the pins policy key names a sequence that is not a message of this conversation; ignored")
	}
	for _, e := range ld.repinned {
		j.log.Info().Uint64("seq", e.Seq).Msg("a message summarized before it was pinned comes back verbatim")
	}
	if c.pl, err = p.plan(ld, escalate(c.s, j.req.Escalation), c.count); err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	for _, sk := range c.pl.skipped {
		j.log.Warn().Uint64("seq", sk.Seq).Str("reason", sk.Reason).Msg("message not summarized")
	}
	c.before = assemble.Assemble(assemble.Input{Value: ld.cur, Pinned: sortedBySeq(ld.pinned, ld.kept), Tail: ld.entries}, assemble.Options{Counter: c.count})
	return nil
}

// summaryInput is what the summarizer is asked for the planned messages.
func summaryInput(c *compaction) Input {
	return Input{
		Conversation:    c.j.req.Conversation,
		PreviousSummary: summaryOf(c.ld.cur),
		SystemPrompt:    c.pl.systemPrompt,
		Pinned:          agentPinned(c.before, c.pl),
		SummaryMessage:  summaryMessageOf(c.ld.cur),
		Messages:        pretrim.TotalBudget(pretrim.ToolOutputs(c.pl.covered, c.s.ToolOutputCap), c.s.ToolOutputBudget),
		Instructions:    joinInstructions(c.s.Instructions, c.j.req.Instructions),
		// Ask for less than the cap: the model counts its own tokens, the guard counts
		// with the conversation's counter, and a summary a little over the cap would be
		// declined.
		MaxSummaryTokens: c.s.Budget().SummaryCap() * 85 / 100,
	}
}

// summarizeOrFallBack asks the summarizer (once more, firmer, when its summary is over
// the cap) and decides when its failure is the job's (retried or dead-lettered) and
// when the deterministic fallback summary is written instead. A value built on a
// fallback is repaired first: the LLM summarizes the raw messages it covers with the
// newly covered ones (see repairSummary).
func (p *Pool) summarizeOrFallBack(ctx context.Context, c *compaction) error {
	j := c.j
	c.in = summaryInput(c)
	pastHard := c.pastHardLimit()
	if c.repair != nil && !c.repair.gap {
		err := p.heldOff(c.sum)
		if err == nil {
			err = p.repairSummary(ctx, c)
		} else {
			j.repair = RepairFailed
			j.log.Info().Err(err).Bool("past_hard_limit", pastHard).Msg("repair of the fallback summary skipped: its endpoint asked to wait")
		}
		if err == nil {
			return nil
		}
		if done, err := p.afterFailedRepair(ctx, c, err, pastHard); done {
			return err
		}
	}
	err := p.llmSummary(ctx, c, c.in, "compactor.summarize")
	if err == nil {
		return nil
	}
	if !pastHard && !isGiveUp(err) {
		return err
	}
	return p.writeFallback(ctx, c, err, pastHard)
}

// afterFailedRepair decides what a job does once its repair failed with err: done says
// the job's summary step ends with the error returned; otherwise the job goes on with
// the usual summary, built on the fallback, which stays to be repaired.
func (p *Pool) afterFailedRepair(ctx context.Context, c *compaction, err error, pastHard bool) (done bool, _ error) {
	j := c.j
	// A repair no retry can make (its summaries stay over their cap, nothing fits the
	// window, the endpoint refuses the raw messages for good) is given up.
	giveUp := isGiveUp(err) || p.permanent(err)
	c.repairFailed = giveUp && !errors.Is(err, errNoLLM)
	var overQuota *quotaError
	switch {
	case errors.As(err, &overQuota) && (!j.repairing() || len(c.pl.covered) > 0):
		// The repair stopped at what it reserved: the usual summary, reserved with it,
		// goes on, built on the fallback, which stays to be repaired.
		return false, nil
	case errors.Is(err, errNoLLM) && j.repairing():
		return true, err // the repair ends (process)
	case errors.Is(err, errNoLLM):
		return false, nil // the usual summary, by the summarizer the profile has
	case j.repairing() && !pastHard:
		// A repair never writes a fallback below the hard limit: that would be a new
		// fallback to repair. One that no retry can make ends.
		if giveUp {
			return true, fmt.Errorf("%w: %w", errRepairEnds, err)
		}
		return true, err
	case giveUp:
		return false, nil
	case !pastHard:
		return true, err
	default:
		// Past the hard limit (an endpoint that asked to wait was not asked): the new
		// messages are covered by a fallback at once.
		return true, p.writeFallback(ctx, c, err, pastHard)
	}
}

// isGiveUp reports whether a summarizer's error says no retry can help: its summaries
// stay over their cap, or nothing fits its window.
func isGiveUp(err error) bool {
	return errors.Is(err, errSummaryTooLong) || errors.Is(err, ErrNothingFits)
}

// llmSummary asks the conversation's summarizer for in's summary (once more, firmer,
// when it is over the cap) in a step of the given name; the summary is c.out.
func (p *Pool) llmSummary(ctx context.Context, c *compaction, in Input, step string) error {
	b := c.s.Budget()
	return p.step(ctx, step, func(ctx context.Context) (err error) {
		out, err := p.summarizeToFit(ctx, c.j, c.sum, in, c.s.SummarizerContextWindow)
		if err == nil {
			out, err = p.firmer(ctx, c.j, c.sum, in, out, b.SummaryCap(), c.s.SummarizerContextWindow, c.count)
		}
		if err != nil {
			p.holdOff(c.sum, err)
			return err
		}
		c.out = out
		return nil
	}, attribute.Int("compactor.messages", len(in.Messages)), attribute.Int("compactor.tokens_before", c.before.Tokens))
}

// writeFallback writes the deterministic summary of c.in instead of the summarizer's,
// which failed with err. The bound wins: past the hard limit it is written at once,
// whatever the attempt; so it is when the summarizer cannot do the job at all (its
// summaries stay over their cap, or nothing fits its window). The failure is still
// reported (completed event with the error, dead letter), and the request stays queued
// to repair the value once it is written (finish).
func (p *Pool) writeFallback(ctx context.Context, c *compaction, err error, pastHard bool) error {
	j := c.j
	j.log.Warn().Err(err).Bool("past_hard_limit", pastHard).Msg("writing the fallback summary")
	fb, ferr := p.fallback.Summarize(ctx, c.in)
	if ferr != nil {
		return fmt.Errorf("%w; fallback summary: %v", err, ferr)
	}
	c.out = fb
	c.out.Fallback = true
	j.fallbackFor = err
	return nil
}

// addEvidence adds the evidence of the covered messages to the next value, within its
// budget and the max payload, without the items whose messages have left CHAT.
func (p *Pool) addEvidence(ctx context.Context, c *compaction) error {
	first, err := p.store.Chat().FirstSeq(ctx, c.j.req.Conversation)
	if err != nil {
		return fmt.Errorf("first message: %w", err)
	}
	withEvidence(c.j.log, c.next, c.ld.cur, c.pl.coveredEntries, c.s.Budget(), c.count, int(p.store.MaxPayload())-jetstream.HeaderRoom, first)
	return nil
}

// guard measures the agent's context with the next value and decides whether it is
// worth writing: a summary over its cap, or a context that shrinks less than
// min_progress, is the reason of a decline ("" when it is worth writing).
func (p *Pool) guard(c *compaction) (reason string) {
	c.after = assemble.Assemble(assemble.Input{Value: c.next, Pinned: c.pl.pinned, Tail: c.pl.tail}, assemble.Options{Counter: c.count})
	c.next.TokensAfter, c.next.MessagesAfter = c.after.Tokens, len(c.after.Messages)
	before, after := c.before.Tokens, c.after.Tokens
	if st, limit := c.count.Count(c.out.Summary), c.s.Budget().SummaryCap(); st > limit {
		return fmt.Sprintf("summary has %d tokens, over max_summary_tokens %d", st, limit)
	}
	if c.repaired {
		// A repair is worth writing for what it restores, not for what it saves; it may
		// not make the context grow past the threshold.
		if threshold := c.s.Budget().ThresholdTokens(); after > before && after >= threshold {
			return fmt.Sprintf("the repair would grow the context from %d to %d tokens, over the threshold %d", before, after, threshold)
		}
		return ""
	}
	if float64(after) > float64(before)*(1-c.s.MinProgress) {
		return fmt.Sprintf("context would shrink from %d to %d tokens, less than min_progress %g", before, after, c.s.MinProgress)
	}
	return ""
}

// commit writes the next value with a compare-and-set on the revision read in step 2.
// A write whose answer was lost counts when the leader holds this request's value; a
// value changed meanwhile discards the result (the request is tried again). Once the
// value is in KV, a fallback's summarizer failure is recorded as a dead letter.
func (p *Pool) commit(ctx context.Context, c *compaction) error {
	j := c.j
	if rev, err := p.putResult(ctx, c.next, c.ld.rev); err == nil {
		j.writes.Result(rev)
	} else {
		// A write whose answer was lost (a timeout while the bucket's leader changed)
		// may have been stored: the leader says whether the value is ours.
		now, nowRev, rerr := p.store.Results().Get(ctx, j.req.Conversation, true)
		switch {
		case rerr != nil:
			return fmt.Errorf("%w; reading the value back: %v", err, rerr)
		case now != nil && now.RequestSeq == j.seq && now.RequestID == j.req.RequestID &&
			now.Generation == c.next.Generation && now.CreatedAt.Equal(c.next.CreatedAt):
			c.next = now // our own write, acknowledged before a lost reply
			j.writes.Result(nowRev)
		case now != nil && (now.RequestSeq == j.seq && now.RequestID == j.req.RequestID || j.outdatedBy(now)):
			// Another worker did this request (delivered to it again while this one was
			// held past the ack wait), and maybe a later one: nothing of this job's counts.
			return errStale
		case errors.Is(err, jetstream.ErrRevisionMismatch):
			return fmt.Errorf("compaction value changed while summarizing; result discarded: %w", err)
		default:
			return err
		}
	}
	next := c.next
	j.log.Info().Uint64("generation", next.Generation).Int("tokens_before", next.TokensBefore).
		Int("tokens_after", next.TokensAfter).Uint64("tail_start_seq", next.TailStartSeq).
		Str("strategy", next.Strategy).Bool("fallback", next.Fallback).Msg("compacted")
	if j.fallbackFor != nil {
		// Recorded once the fallback is in KV: the LLM's failure is on file for operators.
		dead := schemas.DeadLetter{Request: j.req, Error: j.fallbackFor.Error() + " (fallback summary written)", Attempts: j.attempt, At: p.now()}
		if derr := p.store.Events().PublishDeadRecorded(ctx, j.req.Conversation, dead, &j.writes); derr != nil {
			j.log.Warn().Err(derr).Msg("record dead letter")
		}
	}
	return nil
}

// errSummaryTooLong means the summarizer kept writing summaries over their cap.
var errSummaryTooLong = errors.New("summary over max_summary_tokens")

// firmer asks once more, with a firmer and smaller cap, when a summary came back over
// its cap; a summary still over it is errSummaryTooLong (the caller falls back).
func (p *Pool) firmer(ctx context.Context, j *job, sum Summarizer, in Input, out Output, limit, window int, count tokens.Counter) (Output, error) {
	got := count.Count(out.Summary)
	if got <= limit {
		return out, nil
	}
	j.log.Warn().Int("summary_tokens", got).Int("max_summary_tokens", limit).Msg("summary over its cap; asking again with a firmer one")
	in.MaxSummaryTokens = max(limit/2, 1)
	in.Instructions = joinInstructions(in.Instructions, fmt.Sprintf(
		"The previous attempt was %d tokens long; the summary MUST be shorter than %d tokens. Drop detail before exceeding it.", got, in.MaxSummaryTokens))
	again, err := p.summarizeToFit(ctx, j, sum, in, window)
	if err != nil {
		return Output{}, err
	}
	if n := count.Count(again.Summary); n > limit {
		return Output{}, fmt.Errorf("%w: %d then %d tokens, over max_summary_tokens %d", errSummaryTooLong, got, n, limit)
	}
	again.Usage = addUsage(out.Usage, again.Usage)
	return again, nil
}

func joinInstructions(parts ...string) string {
	var out []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n\n")
}

func genOf(r *schemas.Result) uint64 {
	if r == nil {
		return 0
	}
	return r.Generation
}

func summaryOf(r *schemas.Result) string {
	if r == nil {
		return ""
	}
	return r.Summary
}

// summaryMessageOf is the message that carries r's summary, exactly as readers render
// it, or nil when there is none.
func summaryMessageOf(r *schemas.Result) *schemas.Message {
	if r == nil || r.Summary == "" {
		return nil
	}
	m := assemble.SummaryMessage(r)
	return &m
}

// agentPinned are the messages at the start of the agent's context (before, as its
// reader assembled it) that stay ahead of the summary after this compaction (pinned,
// or kept by the split), in the reader's order and exactly as it shows them: with the
// summary's message and the oldest covered messages after them, they are the prefix of
// the agent's own request. With a summary they are the messages before it (a kept
// message the split now covers is left out: it is summarized with the covered ones);
// without one, the leading messages up to the first covered one.
func agentPinned(before assemble.Context, pl plan) []schemas.Message {
	stays := make(map[uint64]bool, len(pl.pinned))
	for _, e := range pl.pinned {
		stays[e.Seq] = true
	}
	var out []schemas.Message
	for i, seq := range before.Seqs {
		switch {
		case seq == 0: // the summary's message
			return out
		case stays[seq]:
			out = append(out, before.Messages[i])
		case !before.HasSummary:
			return out
		}
	}
	return out
}

// sortedBySeq merges entry lists into one in sequence order.
func sortedBySeq(lists ...[]schemas.Entry) []schemas.Entry {
	var out []schemas.Entry
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortFunc(out, func(a, b schemas.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// load reads the pinned and kept messages and everything from the current tail start,
// at least through upTo (the newest message the request was made for): a replica that
// lags behind is caught up from the stream leader. A pinned or kept message that left
// the stream is reported in missing and dropped from the next value. Nothing at or
// below forgottenThrough is read: those are a forgotten conversation's messages, which
// the forget may not have deleted yet.
//
// pins are the sequences of the conversation's pins policy key: one below the loaded
// range that the value does not pin yet (summarized before it was pinned) is read too,
// into repinned; one that is not this conversation's message is reported in badPins.
func (p *Pool) load(ctx context.Context, conv string, cur *schemas.Result, rev, upTo, forgottenThrough uint64, pins []uint64) (*loaded, error) {
	ld := &loaded{cur: cur, rev: rev}
	from := forgottenThrough + 1
	if cur != nil && cur.TailStartSeq > 0 {
		from = max(from, cur.TailStartSeq)
	}
	ld.leading = cur == nil || cur.CoveredThroughSeq == 0
	if cur != nil {
		pinned, err := p.store.Chat().LoadPinned(ctx, conv, cur.PinnedSeqs)
		if err != nil {
			return nil, err
		}
		for _, e := range pinned {
			switch {
			case errors.Is(e.Err, jetstream.ErrMissingMessage):
				ld.missing = append(ld.missing, e)
			case slices.Contains(cur.KeptSeqs, e.Seq):
				ld.kept = append(ld.kept, e)
			default:
				ld.pinned = append(ld.pinned, e)
			}
		}
	}
	var err error
	if upTo >= from {
		ld.entries, err = p.store.Chat().LoadEntriesThrough(ctx, conv, from, upTo)
		if err == nil {
			var more []schemas.Entry
			more, err = p.store.Chat().LoadEntries(ctx, conv, upTo+1, 0)
			ld.entries = append(ld.entries, more...)
		}
	} else {
		ld.entries, err = p.store.Chat().LoadEntries(ctx, conv, from, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("load conversation: %w", err)
	}
	if n := len(ld.entries); n > 0 {
		ld.lastSeq = ld.entries[n-1].Seq
	} else if cur != nil {
		ld.lastSeq = cur.TailStartSeq - 1
	}
	if err := p.loadRepinned(ctx, conv, ld, from, forgottenThrough, pins); err != nil {
		return nil, err
	}
	// The summarizer and the split see messages over the max payload whole, as readers
	// do; a stub whose object is gone or refused is an invalid entry, reported and not
	// summarized.
	for _, es := range [][]schemas.Entry{ld.pinned, ld.kept, ld.entries, ld.repinned} {
		if err := p.store.Objects().Resolve(ctx, conv, es); err != nil {
			return nil, fmt.Errorf("load conversation: %w", err)
		}
	}
	return ld, nil
}

// loadRepinned reads the messages pins names below the loaded range (which starts at
// from) and above the forgotten conversation's, that the value does not pin yet: they
// were summarized before they were pinned. LoadPinned reads only conv's messages: a
// sequence of another conversation, or one no longer stored, is reported in badPins, as
// is one in the loaded range that is not among its entries.
func (p *Pool) loadRepinned(ctx context.Context, conv string, ld *loaded, from, forgottenThrough uint64, pins []uint64) error {
	var below []uint64
	for _, seq := range pins {
		switch {
		case seq <= forgottenThrough:
		case seq < from:
			if ld.cur == nil || !slices.Contains(ld.cur.PinnedSeqs, seq) {
				below = append(below, seq)
			}
		case seq <= ld.lastSeq:
			if !slices.ContainsFunc(ld.entries, func(e schemas.Entry) bool { return e.Seq == seq }) {
				ld.badPins = append(ld.badPins, seq)
			}
		}
	}
	if len(below) == 0 {
		return nil
	}
	slices.Sort(below)
	got, err := p.store.Chat().LoadPinned(ctx, conv, below)
	if err != nil {
		return fmt.Errorf("load pinned messages: %w", err)
	}
	for _, e := range got {
		if e.Err != nil {
			ld.badPins = append(ld.badPins, e.Seq)
			continue
		}
		ld.repinned = append(ld.repinned, e)
	}
	return nil
}

// plan is the split of one job.
type plan struct {
	tailStartSeq uint64
	tail         []schemas.Entry    // the new verbatim tail
	pinned       []schemas.Entry    // pinned and kept entries of the new value, by sequence
	keptSeqs     []uint64           // the kept part of pinned
	overrides    []schemas.Override // the strategy's truncations of kept messages
	covered      []schemas.Message  // the newly covered messages the summarizer sees
	skipped      []rounds.Skipped   // covered entries the summarizer does not see, and why
	systemPrompt string

	// coveredEntries are the newly covered entries as loaded, before any pre-trim: the
	// evidence is extracted from them.
	coveredEntries []schemas.Entry
}

// escalate makes the split more aggressive for a conversation still over budget right
// after a compaction: level 1 halves what the strategy keeps, level 2 summarizes
// everything (strategy all).
func escalate(s policy.Settings, level int) policy.Settings {
	switch {
	case level >= 2:
		s.Strategy = split.StrategyAll
	case level == 1:
		s.KeepLastN = max(s.KeepLastN/2, 1)
		s.ToolRounds = max(s.ToolRounds/2, 1)
		s.UserMessageTokens /= 2
		s.TokenFraction /= 2
		s.RecentTurns = max(s.RecentTurns/2, 1)
		s.Target /= 2 // halves the tail budget
	}
	return s
}

// plan runs the conversation's strategy over the kept messages and everything from
// the tail start, and sorts every entry into pinned, kept, covered or tail.
func (p *Pool) plan(ld *loaded, s policy.Settings, count tokens.Counter) (plan, error) {
	var pl plan
	cand := append(slices.Clone(ld.kept), ld.entries...)
	pins := s.PinnedSeqs()
	flags := append(split.PinnedWith(ld.kept, false, pins), split.PinnedWith(ld.entries, ld.leading, pins)...)
	knobs := split.DefaultKnobs()
	knobs.KeepLastN, knobs.ToolRounds, knobs.UserMessageTokens = s.KeepLastN, s.ToolRounds, s.UserMessageTokens
	knobs.TokenFraction, knobs.RecentTurns = s.TokenFraction, s.RecentTurns
	sp, err := split.Apply(s.Strategy, split.Input{Entries: cand, Pinned: flags, Carried: len(ld.kept),
		OtherPinnedTokens: tokens.EntriesWith(count, ld.pinned) + tokens.EntriesWith(count, ld.repinned), Budget: s.Budget(), Knobs: knobs, Counter: count})
	if err != nil {
		return pl, err
	}
	keep := make(map[int]bool, len(sp.Keep))
	for _, i := range sp.Keep {
		keep[i] = true
	}
	tailStart := sp.TailStart // never among the carried messages (split.Input.Carried)
	pl.pinned = append(slices.Clone(ld.pinned), ld.repinned...)
	var covered []schemas.Entry
	for i := 0; i < tailStart; i++ {
		switch {
		case flags[i]:
			pl.pinned = append(pl.pinned, cand[i])
		case keep[i] && cand[i].Err == nil:
			pl.pinned = append(pl.pinned, cand[i])
			pl.keptSeqs = append(pl.keptSeqs, cand[i].Seq)
		default:
			covered = append(covered, cand[i])
		}
	}
	pl.pinned = sortedBySeq(pl.pinned)
	pl.tail = cand[tailStart:]
	if tailStart < len(cand) {
		pl.tailStartSeq = cand[tailStart].Seq
	} else {
		pl.tailStartSeq = ld.lastSeq + 1
	}
	pl.overrides = sp.Overrides
	pl.coveredEntries = covered
	// The summarizer sees the same messages a reader would: orphans, invalid entries
	// and abandoned rounds are reported, not summarized.
	kept, skipped := rounds.Normalize(covered)
	pl.skipped = skipped
	for _, e := range kept {
		pl.covered = append(pl.covered, e.Message.StripMetadata())
	}
	for _, e := range pl.pinned {
		if e.Err == nil && e.Message.Role == schemas.RoleSystem && !e.Message.Pinned() {
			if pl.systemPrompt != "" {
				pl.systemPrompt += "\n\n"
			}
			pl.systemPrompt += e.Message.Content.String()
		}
	}
	return pl, nil
}

// summarize calls one summarizer (process tells JetStream the job is alive meanwhile).
func (p *Pool) summarize(ctx context.Context, j *job, sum Summarizer, in Input) (Output, error) {
	out, err := sum.Summarize(ctx, in)
	if err != nil {
		return Output{}, err
	}
	if strings.TrimSpace(out.Summary) == "" {
		return Output{}, errors.New("summarizer returned an empty summary")
	}
	return out, nil
}

// result builds the next value from the current one.
func (p *Pool) result(j *job, ld *loaded, pl plan, out Output, before assemble.Context, s policy.Settings) *schemas.Result {
	next := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: j.req.Conversation}
	if ld.cur != nil {
		next.Unknown = ld.cur.Unknown
		next.LLMBaseGeneration = ld.cur.LLMBaseGeneration
		next.LossAcceptedThroughSeq = ld.cur.LossAcceptedThroughSeq
	}
	next.Generation = genOf(ld.cur) + 1
	next.Summary = out.Summary
	next.SummaryRole = schemas.Role(s.SummaryRole)
	next.TailStartSeq = pl.tailStartSeq
	next.CoveredThroughSeq = next.TailStartSeq - 1
	for _, e := range pl.pinned {
		next.PinnedSeqs = append(next.PinnedSeqs, e.Seq)
	}
	next.PinnedSeqs = slices.Compact(next.PinnedSeqs)
	next.KeptSeqs = pl.keptSeqs
	// The split's overrides are the whole answer for kept messages: an old truncation
	// of a message kept again, or summarized now, does not carry over.
	reconsidered := map[uint64]bool{}
	for _, e := range ld.kept {
		reconsidered[e.Seq] = true
	}
	if ld.cur != nil {
		for _, o := range ld.cur.Overrides {
			if !reconsidered[o.Seq] && (o.Seq >= next.TailStartSeq || slices.Contains(next.PinnedSeqs, o.Seq)) {
				next.Overrides = append(next.Overrides, o)
			}
		}
	}
	next.Overrides = append(next.Overrides, pl.overrides...)
	next.Strategy = s.Strategy
	next.Trigger = j.req.Trigger
	next.Reason = j.req.Reason
	next.RequestID = j.req.RequestID
	next.RequestSeq = j.seq
	next.Fallback = out.Fallback
	if !out.Fallback {
		next.LLMBaseGeneration = next.Generation
	}
	next.Model = out.Model
	next.PromptHash = out.PromptHash
	next.Usage = out.Usage
	next.TokensBefore = before.Tokens
	next.MessagesBefore = len(before.Messages)
	next.LoadedThroughSeq = ld.lastSeq
	next.FirstSeq = j.firstSeq
	next.Witnessed = witnessed(j, ld.cur, ld)
	if j.req.Escalation > 0 {
		next.Reason = fmt.Sprintf("%s (escalation %d)", next.Reason, j.req.Escalation)
	}
	next.CreatedAt = p.now().UTC()
	return next
}

// decline records that this state of the conversation cannot be compacted usefully, so
// triggers wait for it to grow, then checks the tombstone and acks. A marker that stands alone (no compaction
// yet) carries the figures of this decline, not of the first one. When the value
// changed meanwhile, nothing is recorded and the request is tried again on the new one.
func (p *Pool) decline(ctx context.Context, j *job, ld *loaded, before, after int, reason string) error {
	next := declineMarker(ld, j.req.Conversation)
	if next.Generation == 0 {
		next.TokensBefore, next.TokensAfter, next.CreatedAt = before, before, p.now().UTC()
	}
	next.DeclinedAtSeq = ld.lastSeq
	next.FirstSeq = j.firstSeq
	if len(j.holes) > 0 {
		next.Holes = j.holes // recorded: no later job summarizes across them
	}
	if err := p.writeMarker(ctx, j, &next, ld.rev, "deciding to decline"); err != nil {
		return err
	}
	j.outcome = OutcomeDeclined
	j.log.Info().Str("reason", reason).Int("tokens_before", before).Int("tokens_after", after).Msg("compaction declined")
	if err := j.d.AckSync(ctx); err != nil {
		// The marker is written; a redelivery declines again on the same state.
		j.log.Warn().Err(err).Msg("ack declined request; it will be redelivered")
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventDeclined, Generation: next.Generation,
		TokensBefore: before, TokensAfter: after, Error: reason, Holes: j.holes})
	return nil
}

// writeMarker writes next, a value that ends the request without a compaction (a
// decline, a repair's gap), on the revision rev the job read, then checks the
// tombstone before the caller acks, as a compaction's commit does. When the value
// changed meanwhile (while doing what), nothing is written and the request is tried
// again on the new one.
func (p *Pool) writeMarker(ctx context.Context, j *job, next *schemas.Result, rev uint64, doing string) error {
	newRev, err := p.putResult(ctx, next, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrRevisionMismatch) {
			return fmt.Errorf("compaction value changed while %s; trying again on the new one: %w", doing, err)
		}
		return err
	}
	j.writes.Result(newRev)
	return p.checkCommitted(ctx, j)
}

// declineMarker is the value a decline writes: the value before it, as the next
// compaction builds on it, without what is stale now: pinned and kept messages gone
// from CHAT are dropped (with their overrides), as a compaction drops them, and the
// audit of the write before (repair_of: a marker repairs nothing) is not carried.
func declineMarker(ld *loaded, conv string) schemas.Result {
	if ld.cur == nil {
		return schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: conv, TailStartSeq: 1}
	}
	next := *ld.cur
	next.RepairOf = 0
	if len(ld.missing) == 0 {
		return next
	}
	gone := func(seq uint64) bool {
		return slices.ContainsFunc(ld.missing, func(e schemas.Entry) bool { return e.Seq == seq })
	}
	next.PinnedSeqs = slices.DeleteFunc(slices.Clone(next.PinnedSeqs), gone)
	next.KeptSeqs = slices.DeleteFunc(slices.Clone(next.KeptSeqs), gone)
	next.Overrides = slices.DeleteFunc(slices.Clone(next.Overrides), func(o schemas.Override) bool { return gone(o.Seq) })
	return next
}

// finish acks the request (freeing the conversation's slot), publishes completed and,
// when loadedThrough > 0, queues another compaction if messages that arrived meanwhile
// put the conversation over its threshold again.
//
// The result is in KV when finish runs: an ack that fails is logged, not reported as a
// failure (a redelivery finds the value holding this request and acks then).
//
// A value that needs a repair (a fallback, or built on one) keeps its request queued
// instead, handed back with a backoff: its next delivery finds the value holding it and
// repairs it (checkDone). So the repair survives the process: a crash leaves the
// request to the ack wait, never lost between an ack and a new request.
func (p *Pool) finish(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64, s policy.Settings, count tokens.Counter) error {
	if j.outcome == "" {
		j.outcome, j.tokensBefore, j.tokensAfter = OutcomeCompleted, r.TokensBefore, r.TokensAfter
	}
	if r.NeedsRepair() && r.RequestSeq == j.seq && j.outcome == OutcomeCompleted {
		delay := p.repairBackoff(j.attempt)
		if err := j.d.NakAfter(ctx, delay); err != nil {
			j.log.Warn().Err(err).Msg("keep the request queued for the repair of its fallback; it is redelivered after the ack wait")
		} else {
			j.log.Info().Uint64("generation", r.Generation).Dur("repair_in", delay).Msg("the request stays queued to repair the fallback summary")
		}
	} else if err := j.d.AckSync(ctx); err != nil {
		j.log.Warn().Err(err).Uint64("generation", r.Generation).Msg("ack completed request failed; a redelivery will find it done")
	}
	ev := schemas.Event{Type: schemas.EventCompleted, Generation: r.Generation,
		TokensBefore: r.TokensBefore, TokensAfter: r.TokensAfter}
	if j.fallbackFor != nil {
		ev.Error = "summarizer failed, fallback summary written: " + j.fallbackFor.Error()
	}
	if j.maskShort != "" {
		ev.Error = j.maskShort
	}
	if j.repair == RepairRepaired {
		ev.RepairOf = r.RepairOf
	}
	ev.RepairGap = j.repair == RepairGap
	p.event(ctx, j, ev)
	if loadedThrough > 0 && !r.NeedsRepair() { // else the request stays queued, and compacts again
		p.reevaluate(ctx, j, r, loadedThrough, s, count)
	}
	return nil
}

// reevaluate reads what arrived after the job loaded the conversation and queues the
// next request when the context is over the threshold again and no tool call is open.
func (p *Pool) reevaluate(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64, s policy.Settings, count tokens.Counter) {
	conv := j.req.Conversation
	tail, err := p.store.Chat().LoadEntries(ctx, conv, r.TailStartSeq, 0)
	if err != nil {
		j.log.Warn().Err(err).Msg("re-evaluate after compaction")
		return
	}
	var newer []schemas.Entry
	for _, e := range tail {
		if e.Seq > loadedThrough {
			newer = append(newer, e)
		}
	}
	if len(newer) == 0 || len(rounds.Pending(tail)) > 0 {
		return
	}
	threshold := s.Budget().ThresholdTokens()
	total := r.TokensAfter + tokens.EntriesWith(count, newer)
	if total < threshold {
		return
	}
	level := j.req.Escalation + 1
	if level > schemas.MaxEscalation {
		j.log.Warn().Int("tokens", total).Msg("still over the threshold after the most aggressive compaction; waiting for the trigger")
		return
	}
	req := schemas.Request{
		RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerBudget, Escalation: level,
		Reason:      fmt.Sprintf("re-evaluation after generation %d: %d tokens ≥ threshold %d", r.Generation, total, threshold),
		RequestedAt: p.now().UTC(), UpToSeq: newer[len(newer)-1].Seq,
	}
	seq, err := p.enqueueTraced(ctx, req)
	if err != nil && !errors.Is(err, jetstream.ErrRequestPending) {
		j.log.Warn().Err(err).Msg("queue compaction after re-evaluation")
		return
	}
	if err == nil {
		j.writes.Request(seq)
	}
	j.log.Info().Int("tokens", total).Int("escalation", level).Msg("still over the threshold after compaction; queued a more aggressive one")
}
