package summarizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/summarizer/pretrim"
)

// A value whose summary is, or was built on, an extractive fallback is repaired once the
// LLM answers again: the worker that wrote it keeps its request queued, handed back
// with a backoff (Pool.finish); each later delivery finds the value holding the request
// and tries the repair, again after a longer backoff for as long as the LLM fails. Any
// compaction of such a value tries the repair first too. A repair has the LLM summarize
// the raw messages the value covers, read again from CHAT, with the newly covered ones:
// never the fallback's text. Where some of those messages left CHAT, the fallback stays
// and the value says so (repair_gap).

// repairPlan is the repair a job tries: the range of CHAT the current value's summary
// covers, read again window by window (repairReader), without its pinned and kept
// messages; or a gap where some of them left CHAT.
type repairPlan struct {
	from, through uint64
	skip          []uint64 // the value's pinned and kept sequences: not summarized
	gap           bool
}

// planRepair decides whether the job repairs the current value, and whether the
// messages its summary covers are all still in CHAT. A request other than the value's
// own repairs only when it compacts anything: one with nothing to compact is declined
// as before. Nothing of the covered range is loaded here: repairSummary reads it in
// windows.
func (p *Pool) planRepair(ctx context.Context, c *compaction) error {
	j, cur := c.j, c.cur
	if !cur.NeedsRepair() || (!j.repairing() && len(c.pl.covered) == 0) {
		return nil
	}
	if until, ok := p.repairPostponed(cur); ok {
		j.log.Info().Time("repair_not_before", until).Int("repair_failures", cur.RepairFailures).
			Msg("the repair of the fallback summary is postponed: the summarizer could not make the last ones")
		return nil
	}
	from := uint64(1)
	if j.tomb != nil {
		from = j.tomb.ThroughSeq + 1
	}
	rp := &repairPlan{from: max(from, cur.FirstSeq), through: cur.CoveredThroughSeq, skip: cur.PinnedSeqs}
	c.repair = rp
	// The value's first sequence is its conversation's first message (see
	// schemas.Result.FirstSeq): CHAT loses its oldest messages first, so when that one
	// is gone, messages the fallback covers may be gone too.
	if cur.FirstSeq == 0 || cur.FirstSeq > cur.CoveredThroughSeq {
		return nil
	}
	for _, es := range [][]schemas.Entry{c.ld.pinned, c.ld.kept} {
		for _, e := range es {
			if e.Seq == cur.FirstSeq {
				return nil
			}
		}
	}
	msgs, _, err := p.store.Chat().LoadPage(ctx, j.req.Conversation, cur.FirstSeq, cur.FirstSeq, 1)
	if err != nil {
		return fmt.Errorf("load the messages to repair: %w", err)
	}
	if len(msgs) == 0 {
		rp.gap = true
		j.repair = RepairGap
		j.log.Warn().Uint64("first_seq", cur.FirstSeq).Uint64("covered_through_seq", cur.CoveredThroughSeq).
			Msg("the fallback summary cannot be repaired: messages it covers left CHAT; it stays")
	}
	return nil
}

// repairInput is what the summarizer is asked for one window of a repair: the raw
// messages of the window (with the newly covered ones in the last), in order, after
// the summary the LLM wrote of the windows before it (none for the first): never the
// fallback's text, whose excerpts and marker would be copied into the repair.
func repairInput(c *compaction, window []schemas.Entry, previous string) Input {
	in := summaryInput(c)
	in.PreviousSummary, in.SummaryMessage = previous, nil
	kept, _ := rounds.Normalize(window)
	msgs := make([]schemas.Message, 0, len(kept))
	for _, e := range kept {
		msgs = append(msgs, e.Message.StripMetadata())
	}
	in.Messages = pretrim.TotalBudget(pretrim.ToolOutputs(msgs, c.s.ToolOutputCap), c.s.ToolOutputBudget)
	return in
}

// repairSummary asks the LLM for the repair's summary, a window of the covered range
// at a time (each window summarized on the summary of those before it), so a repair
// holds at most repairWindowBytes of the conversation; c.out is it when it answers.
func (p *Pool) repairSummary(ctx context.Context, c *compaction) error {
	j := c.j
	j.repair = RepairFailed // until the repaired value is written
	rd := &repairReader{p: p, conv: j.req.Conversation, rp: c.repair, next: c.repair.from}
	var (
		in       Input
		previous string
		usage    *schemas.Usage
		spent    int
	)
	for i := 0; ; i++ {
		window, last, err := rd.window(ctx)
		if err != nil {
			return err
		}
		if last {
			window = sortedBySeq(window, c.pl.coveredEntries)
		}
		if len(window) == 0 && !last {
			continue
		}
		in = repairInput(c, window, previous)
		// Under a quota the repair spends what it reserved, never more: a window that
		// would pass it is not sent, and the repair waits for the quota.
		if cost := windowCost(c, repairInput(c, window, ""), i > 0); c.repairBudget > 0 && spent+cost > c.repairBudget {
			return &quotaError{retryIn: p.cfg.BackoffMax, reason: fmt.Sprintf(
				"quota: the repair spent %d of the %d tokens it reserved and its next window needs about %d; it waits for the quota", spent, c.repairBudget, cost)}
		}
		if err := p.llmSummary(ctx, c, in, "compactor.repair"); err != nil {
			j.log.Warn().Err(err).Uint64("generation", c.cur.Generation).Msg("repair of the fallback summary failed; it stays until a later repair")
			return err
		}
		if c.out.Fallback {
			// The conversation's profile has no LLM (any more): no repair can be made.
			c.out = Output{}
			return errNoLLM
		}
		previous, usage = c.out.Summary, addUsage(usage, c.out.Usage)
		if c.out.Usage != nil {
			spent += max(c.out.Usage.PromptTokens, 0) + max(c.out.Usage.CompletionTokens, 0)
		} else {
			spent += requestTokens(c.sum, in)
		}
		if last {
			break
		}
	}
	c.out.Usage = usage
	c.in, c.repaired = in, true
	return nil
}

// repairCost is about the tokens the repair c plans will send: each window of the
// range it covers read again (as repairSummary reads it, nothing held but one window),
// summarized on the summary of those before. It is what a quota reserves for the
// repair, and what the repair may spend (repairSummary stops at it).
//
// A repair waiting for the quota is asked again every few seconds on the same value:
// the pool remembers the last cost of each conversation's value (its revision and the
// newly covered messages), so the covered range is not read again each time.
func (p *Pool) repairCost(ctx context.Context, c *compaction) (int, error) {
	key := repairCostKey{conv: c.j.req.Conversation, rev: c.rev, covered: len(c.pl.coveredEntries)}
	if n := len(c.pl.coveredEntries); n > 0 {
		key.lastCovered = c.pl.coveredEntries[n-1].Seq
	}
	p.mu.Lock()
	cost, ok := p.repairCosts[key]
	p.mu.Unlock()
	if ok {
		return cost, nil
	}
	cost, err := p.readRepairCost(ctx, c)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if p.repairCosts == nil || len(p.repairCosts) >= maxRepairCosts {
		p.repairCosts = map[repairCostKey]int{}
	}
	p.repairCosts[key] = cost
	p.mu.Unlock()
	return cost, nil
}

// repairCostKey is what a repair's cost depends on: the value (its revision) and the
// newly covered messages.
type repairCostKey struct {
	conv        string
	rev         uint64
	covered     int
	lastCovered uint64
}

// maxRepairCosts bounds the costs a pool remembers (all are dropped when it is reached).
const maxRepairCosts = 4096

// readRepairCost reads the covered range, a window at a time, to cost it (repairCost).
func (p *Pool) readRepairCost(ctx context.Context, c *compaction) (int, error) {
	rd := &repairReader{p: p, conv: c.j.req.Conversation, rp: c.repair, next: c.repair.from}
	total := 0
	for i := 0; ; i++ {
		window, last, err := rd.window(ctx)
		if err != nil {
			return 0, err
		}
		if last {
			window = sortedBySeq(window, c.pl.coveredEntries)
		}
		if len(window) > 0 || last {
			total += windowCost(c, repairInput(c, window, ""), i > 0)
		}
		if last {
			return total, nil
		}
	}
}

// windowCost is about what one window of a repair sends (in, without the summary of
// the windows before it): its request, the summary before it at its cap when it follows
// another window, and when it is larger than the summarizer's window, the chunks and
// merges the map-reduce makes of it (each chunk's prompt and summary, once more to
// merge).
func windowCost(c *compaction, in Input, follows bool) int {
	n := requestTokens(c.sum, in)
	if follows {
		n += in.MaxSummaryTokens
	}
	if w := c.s.SummarizerContextWindow; w > 0 {
		if room := int(float64(w) * fitMargin); n > room && room > 0 {
			chunks := (n + room - 1) / room
			n += chunks * (PromptOverhead + 2*in.MaxSummaryTokens)
		}
	}
	return n
}

// repairWindowBytes bounds the bytes of covered messages a repair holds at once (one
// message larger than it is held alone). A variable for the tests.
var repairWindowBytes = 4 << 20

// repairPage is how many messages a repair reads from CHAT at a time; their objects
// are read one by one, as the window has room.
const repairPage = 64

// repairReader reads the range a repair covers again, a window at a time.
type repairReader struct {
	p      *Pool
	conv   string
	rp     *repairPlan
	next   uint64          // the next sequence to read from CHAT
	queued []schemas.Entry // read, objects not yet resolved
	carry  []schemas.Entry // the open round at the end of the last window
	done   bool            // CHAT has nothing more of the range
}

// window returns the next window of the range: messages up to repairWindowBytes,
// never ending inside a tool round that goes on (it is carried to the next window);
// last says it is the range's last.
func (r *repairReader) window(ctx context.Context) (window []schemas.Entry, last bool, err error) {
	window, r.carry = r.carry, nil
	size := 0
	for _, e := range window {
		size += entryBytes(e)
	}
	for size < repairWindowBytes || len(window) == 0 {
		if len(r.queued) == 0 {
			if err := r.read(ctx); err != nil {
				return nil, false, err
			}
			if len(r.queued) == 0 {
				break
			}
		}
		e := r.queued[0]
		r.queued = r.queued[1:]
		one := []schemas.Entry{e}
		if err := r.p.store.Objects().Resolve(ctx, r.conv, one); err != nil {
			return nil, false, fmt.Errorf("load the messages to repair: %w", err)
		}
		window = append(window, one[0])
		size += entryBytes(one[0])
	}
	last = r.done && len(r.queued) == 0
	if !last {
		if us := rounds.Units(window); len(us) > 0 {
			u := us[len(us)-1]
			if u.Kind == rounds.Round && !u.Complete && u.End == len(window) && u.Start > 0 {
				window, r.carry = window[:u.Start], slices.Clone(window[u.Start:])
			}
		}
	}
	return window, last, nil
}

// read reads the next page of the range from CHAT, without the value's pinned and kept
// messages.
func (r *repairReader) read(ctx context.Context) error {
	if r.done || r.next > r.rp.through {
		r.done = true
		return nil
	}
	msgs, more, err := r.p.store.Chat().LoadPage(ctx, r.conv, r.next, r.rp.through, repairPage)
	if err != nil {
		return fmt.Errorf("load the messages to repair: %w", err)
	}
	if len(msgs) == 0 || !more {
		r.done = true
	}
	if n := len(msgs); n > 0 {
		r.next = msgs[n-1].Seq + 1
	}
	for _, m := range msgs {
		if !slices.Contains(r.rp.skip, m.Seq) {
			r.queued = append(r.queued, m.Entry())
		}
	}
	return nil
}

// entryBytes is about what an entry takes in memory: its content as stored (every
// part: an image's data weighs what it holds), reasoning, tool calls and extra fields.
func entryBytes(e schemas.Entry) int {
	m := e.Message
	n := len(m.Content.Raw()) + len(m.Reasoning) + len(m.Extra) + len(m.Name)
	for _, tc := range m.ToolCalls {
		n += len(tc.Function.Name) + len(tc.Function.Arguments) + len(tc.ID)
	}
	return n
}

// errNoLLM is the outcome of a repair when the conversation's summarizer is not an LLM.
var errNoLLM = errors.New("the conversation's summarizer is not an LLM: a fallback summary cannot be repaired")

// markFallbackState records in the next value whether it is built on a fallback: a
// fallback written because the summarizer failed is, and so is every summary built on
// one, until a repair (RepairOf). A gap found once stays: the messages do not come back.
// The repairs the summarizer could not make are counted with it, and postpone the next.
func (p *Pool) markFallbackState(c *compaction) {
	next, cur := c.next, c.ld.cur
	gap := c.repair != nil && c.repair.gap
	degraded := cur != nil && cur.BuiltOnFallback
	switch {
	case c.repaired:
		next.RepairOf = cur.Generation
	case c.j.fallbackFor != nil || degraded:
		next.BuiltOnFallback = true
		next.RepairGap = gap || (degraded && cur.RepairGap)
		if degraded {
			next.RepairFailures, next.RepairNotBefore = cur.RepairFailures, cur.RepairNotBefore
		}
		if c.repairFailed {
			p.countRepairFailure(next)
		}
	}
}

// A repair the summarizer cannot make (its summaries stay over their cap, nothing fits
// its window, it refuses the raw messages for good) costs the whole covered history in
// tokens, and the next one would cost as much again. So each such failure is recorded
// in the conversation's value (repair_failures, repair_not_before), which every worker
// reads and a restart keeps, and the next repair waits: BackoffMax after the first
// failure, doubling after each, up to maxRepairHold. Meanwhile compactions build on the
// fallback, and a request kept for the repair ends. A repair that is made, or a value
// no longer built on a fallback, starts again from none.

// maxRepairHold bounds how long a repair is postponed: with the default BackoffMax of
// 2 minutes, a summarizer that never makes one gets about 11 repairs of a fallback the
// first day and one a day after.
const maxRepairHold = 24 * time.Hour

// repairPostponed reports whether cur's repair must wait, and until when.
func (p *Pool) repairPostponed(cur *schemas.Result) (time.Time, bool) {
	if cur == nil || cur.RepairNotBefore == nil || !p.now().Before(*cur.RepairNotBefore) {
		return time.Time{}, false
	}
	return *cur.RepairNotBefore, true
}

// countRepairFailure records one more failed repair in next and postpones the next.
func (p *Pool) countRepairFailure(next *schemas.Result) {
	next.RepairFailures++
	hold := p.cfg.BackoffMax
	for i := 1; i < next.RepairFailures && hold < maxRepairHold; i++ {
		hold *= 2
	}
	until := p.now().Add(min(hold, maxRepairHold)).UTC()
	next.RepairNotBefore = &until
}

// errRepairPostponed ends a request kept for a repair while the repair is postponed
// (repairPostponed) and the request has nothing else to compact.
var errRepairPostponed = errors.New("the repair is postponed: the summarizer could not make the last ones")

// markGap ends a repair whose messages left CHAT: the value is kept, marked repair_gap
// (so no repair is tried again), the tombstone checked, the request acked, and a
// declined event says why.
func (p *Pool) markGap(ctx context.Context, c *compaction) error {
	j := c.j
	next := *c.cur
	next.RepairGap = true
	next.FirstSeq = j.firstSeq
	if err := p.writeMarker(ctx, j, &next, c.rev, "planning its repair"); err != nil {
		return err
	}
	j.outcome, j.repair = OutcomeDeclined, RepairGap
	if err := j.d.AckSync(ctx); err != nil {
		j.log.Warn().Err(err).Msg("ack repair request; it will be redelivered")
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventDeclined, Generation: next.Generation, RepairGap: true,
		TokensBefore: next.TokensAfter, TokensAfter: next.TokensAfter,
		Error: fmt.Sprintf("cannot repair the fallback summary of generation %d: messages it covers left CHAT", next.Generation)})
	return nil
}

// endRepair acks a request kept for a repair that cannot be made (err says why: the
// conversation's summarizer is no LLM now, or the messages do not fit it); the fallback
// stays until a later compaction repairs it, and a declined event says why.
func (p *Pool) endRepair(ctx context.Context, c *compaction, err error) error {
	j := c.j
	if c.repairFailed && c.cur != nil {
		// The value records the failure, so no worker tries again before its time.
		next := *c.cur
		next.RepairOf = 0
		p.countRepairFailure(&next)
		if werr := p.writeMarker(ctx, j, &next, c.rev, "recording the failed repair"); werr != nil {
			return werr
		}
	}
	j.outcome = OutcomeDeclined
	j.log.Warn().Err(err).Uint64("generation", genOf(c.cur)).Msg("the fallback summary cannot be repaired now; it stays")
	if aerr := j.d.AckSync(ctx); aerr != nil {
		j.log.Warn().Err(aerr).Msg("ack the request of a repair that ends; it will be redelivered")
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventDeclined, Generation: genOf(c.cur),
		TokensBefore: c.before.Tokens, TokensAfter: c.before.Tokens, Error: "cannot repair the fallback summary: " + err.Error()})
	return nil
}

// errRepairEnds wraps the error of a repair that no retry can make.
var errRepairEnds = errors.New("the repair cannot be made")

// An endpoint that answered with a Retry-After is not asked again before that time by
// this pool's repairs: the repair's request is handed back for a short while only (a
// request held for the endpoint's hour would keep the conversation's place in the
// queue, and nothing could compact it past its hard limit meanwhile), and each
// delivery before that time skips the LLM: past the hard limit it covers the new
// messages with a fallback, otherwise it waits again.

// holdOff records that the endpoint of sum asked, with err, not to be called again for
// a while.
func (p *Pool) holdOff(sum Summarizer, err error) {
	var hint interface{ RetryAfter() time.Duration }
	if !errors.As(err, &hint) || hint.RetryAfter() <= 0 {
		return
	}
	until := p.now().Add(hint.RetryAfter())
	ep := endpointOf(sum)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.quiet == nil {
		p.quiet = map[endpoint]time.Time{}
	}
	if until.After(p.quiet[ep]) {
		p.quiet[ep] = until
	}
}

// heldOff is the error of a repair that skips its LLM call because the endpoint of sum
// asked to be left alone until a later time (nil: it may be called).
func (p *Pool) heldOff(sum Summarizer) error {
	ep := endpointOf(sum)
	p.mu.Lock()
	until, ok := p.quiet[ep]
	if ok && !p.now().Before(until) {
		delete(p.quiet, ep)
		ok = false
	}
	p.mu.Unlock()
	if !ok {
		return nil
	}
	return &waitErr{until: until, left: until.Sub(p.now())}
}

// waitErr says the summarizer's endpoint asked not to be called before until.
type waitErr struct {
	until time.Time
	left  time.Duration
}

func (e *waitErr) Error() string {
	return fmt.Sprintf("the summarizer's endpoint asked not to be called before %s (Retry-After)", e.until.UTC().Format(time.RFC3339))
}

// RetryAfter is how long is left to wait.
func (e *waitErr) RetryAfter() time.Duration { return e.left }

// maxRepairDelay is the longest a repair's request is handed back for: repairBackoff's
// cap, without its jitter. Whatever an endpoint asks, the request comes back within it
// and keeps the conversation's hard limit.
func (p *Pool) maxRepairDelay() time.Duration {
	d := p.cfg.BackoffBase
	for i := 0; i < maxRepairDoublings && d < p.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.cfg.BackoffMax) * 5 / 4
}

// permanent reports whether err is a failure no retry can help.
func (p *Pool) permanent(err error) bool {
	return errors.Is(err, errPermanent) || (p.retryable != nil && !p.retryable(err))
}
