package summarizer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
)

// maxWitnessed bounds the ranges a value's witnessed list keeps: past it the two
// oldest are merged (verify then names holes in them less closely).
const maxWitnessed = 32

// checkHoles decides whether the job must decline because the conversation's raw
// history has a hole where it would summarize: a hole a worker recorded on the value
// before, or messages the trigger saw (the request's witness) that are no longer
// stored now, neither forgotten (the tombstone) nor aged out (below CHAT's oldest
// message). done says the request was declined (err is the decline's).
//
// A request without a witness (an older trigger's, a manual one, a worker's
// re-evaluation) is checked against the recorded holes only. What is missing at or
// below the value's LossAcceptedThroughSeq is not a hole: an operator accepted its loss.
func (p *Pool) checkHoles(ctx context.Context, c *compaction) (done bool, err error) {
	j := c.j
	if c.cur != nil && len(c.cur.Holes) > 0 {
		j.holes = slices.Clone(c.cur.Holes)
		return true, p.decline(ctx, j, c.ld, c.before.Tokens, c.before.Tokens, holeReason(j.holes, "recorded before; still"))
	}
	w := j.req.Witness
	if w == nil {
		return false, nil
	}
	found, err := p.storedIn(ctx, c, *w)
	if err != nil {
		return false, fmt.Errorf("read the witnessed range: %w", err)
	}
	goneThrough := excusedThrough(c)
	if uint64(len(found)) < w.Count { // something is missing: CHAT's oldest is read only then
		if goneThrough, err = p.agedThrough(ctx, goneThrough, w.ThroughSeq); err != nil {
			return false, err
		}
	}
	h, why := holes.Check(*w, found, goneThrough)
	if why != "" {
		j.log.Warn().Uint64("from_seq", w.FromSeq).Uint64("through_seq", w.ThroughSeq).Str("witness", why).Msg("the raw history differs from what the trigger saw; not a hole")
	}
	if h == nil {
		return false, nil
	}
	return true, p.declineHole(ctx, c, *h, "messages the trigger saw are no longer stored", "seen by the trigger,")
}

// excusedThrough is the sequence at or below which a message of the conversation may
// be missing for a reason the value or tombstone tells: a forget (the tombstone) or an
// operator's accepted loss (compactor verify --accept), summarized across as a message
// forgotten would be.
func excusedThrough(c *compaction) uint64 {
	var through uint64
	if c.j.tomb != nil {
		through = c.j.tomb.ThroughSeq
	}
	if c.cur != nil {
		through = max(through, c.cur.LossAcceptedThroughSeq)
	}
	return through
}

// agedThrough raises goneThrough to what CHAT's age limit or a purge of the stream
// removed: everything below its oldest message, everything through upTo when CHAT
// holds nothing at all.
func (p *Pool) agedThrough(ctx context.Context, goneThrough, upTo uint64) (uint64, error) {
	first, err := p.store.Chat().StreamFirstSeq(ctx)
	if err != nil {
		return 0, fmt.Errorf("read CHAT's first sequence: %w", err)
	}
	if first == 0 {
		return max(goneThrough, upTo), nil
	}
	return max(goneThrough, first-1), nil
}

// declineHole records h on the job (the decline's marker and event carry it) and
// declines, saying what was found (what) and where it was seen (seen).
func (p *Pool) declineHole(ctx context.Context, c *compaction, h schemas.Hole, what, seen string) error {
	j := c.j
	j.holes = []schemas.Hole{h}
	j.log.Error().Interface("seqs", h.Seqs).Uint64("missing", h.Missing).Uint64("from_seq", h.FromSeq).Uint64("through_seq", h.ThroughSeq).
		Msg("hole in the raw history: " + what + "; not summarized over")
	return p.decline(ctx, j, c.ld, c.before.Tokens, c.before.Tokens, holeReason(j.holes, seen))
}

// holeReason is a hole decline's reason: which messages, and what to do.
func holeReason(hs []schemas.Hole, seen string) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = holes.String(h)
	}
	return fmt.Sprintf("hole in the raw history: %s %s no longer stored (lost or deleted, neither forgotten nor aged out); not summarized over: restore them, forget the conversation, or accept the loss (compactor verify --accept <conv>)",
		strings.Join(parts, "; "), seen)
}

// storedIn is the conversation's sequences stored now in w's range: those the job
// loaded, and from the stream leader those below what it loaded (the trigger counted
// from an older tail start than the value's now).
func (p *Pool) storedIn(ctx context.Context, c *compaction, w schemas.Witness) ([]uint64, error) {
	var seqs []uint64
	for _, l := range [][]schemas.Entry{c.ld.pinned, c.ld.kept, c.ld.entries} {
		for _, e := range l {
			if e.Seq >= w.FromSeq && e.Seq <= w.ThroughSeq {
				seqs = append(seqs, e.Seq)
			}
		}
	}
	upTo := w.ThroughSeq // the load may have started above w.FromSeq: what lies between
	if n := len(c.ld.entries); n > 0 {
		upTo = min(upTo, c.ld.entries[0].Seq-1)
	}
	if upTo >= w.FromSeq {
		msgs, err := p.store.Chat().LoadLeader(ctx, c.j.req.Conversation, w.FromSeq, upTo)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			seqs = append(seqs, m.Seq)
		}
	}
	slices.Sort(seqs)
	return slices.Compact(seqs), nil
}

// witnessed is the next value's witnessed ranges: the current value's, and one more for
// the messages this job loaded after them (through ld.lastSeq). Only entries above the
// ranges before are counted, so a message is in one range only.
func witnessed(j *job, cur *schemas.Result, ld *loaded) []schemas.Witness {
	var prev []schemas.Witness
	var after uint64
	if cur != nil {
		for _, w := range cur.Witnessed {
			if w.Validate() != nil || w.FromSeq <= after {
				j.log.Warn().Msg("the value's witnessed ranges do not validate; starting them afresh")
				prev, after = nil, 0
				break
			}
			prev, after = append(prev, w), w.ThroughSeq
		}
	}
	var seqs []uint64
	for _, e := range ld.entries {
		if e.Seq > after {
			seqs = append(seqs, e.Seq)
		}
	}
	if len(seqs) == 0 {
		return prev
	}
	// The load read everything of the conversation from loadFrom on (load): the new
	// range starts there, or after the ranges before when they reach it. A value an
	// older worker advanced keeps ranges that stop short of its tail start.
	loadFrom := uint64(1)
	if j.tomb != nil {
		loadFrom = j.tomb.ThroughSeq + 1
	}
	if cur != nil && cur.TailStartSeq > 0 {
		loadFrom = max(loadFrom, cur.TailStartSeq)
	}
	from := max(after+1, loadFrom)
	out := append(prev, holes.Of(from, max(ld.lastSeq, seqs[len(seqs)-1]), seqs))
	for len(out) > maxWitnessed {
		out = append([]schemas.Witness{holes.Merge(out[0], out[1])}, out[2:]...)
	}
	return out
}

// checkRepairHoles checks, before a repair summarizes the range its fallback covers
// again from CHAT, the ranges compactions read there (the value's witnessed ranges)
// against what is stored now, with the cut checkHoles uses: a message lost in the
// covered range (a corrupted block, a delete on the stream) would otherwise be
// summarized over, and the repair's summary would take the fallback's place. A hole
// ends the job with a decline naming it, recorded on the value as checkHoles does.
// The range is read a page at a time, keeping sequences only.
func (p *Pool) checkRepairHoles(ctx context.Context, c *compaction) (done bool, err error) {
	j, rp := c.j, c.repair
	if c.cur == nil || len(c.cur.Witnessed) == 0 {
		return false, nil
	}
	goneThrough, err := p.agedThrough(ctx, excusedThrough(c), rp.through)
	if err != nil {
		return false, err
	}
	for _, w := range c.cur.Witnessed {
		if w.ThroughSeq < rp.from || w.FromSeq > rp.through || w.Validate() != nil {
			continue
		}
		var found []uint64
		for next := w.FromSeq; next <= w.ThroughSeq; {
			msgs, more, err := p.store.Chat().LoadPage(ctx, j.req.Conversation, next, w.ThroughSeq, repairPage)
			if err != nil {
				return false, fmt.Errorf("read the range to repair: %w", err)
			}
			for _, m := range msgs {
				found = append(found, m.Seq)
			}
			if len(msgs) == 0 || !more {
				break
			}
			next = msgs[len(msgs)-1].Seq + 1
		}
		h, why := holes.Check(w, found, goneThrough)
		if why != "" {
			j.log.Warn().Uint64("from_seq", w.FromSeq).Uint64("through_seq", w.ThroughSeq).Str("witness", why).Msg("the range to repair differs from what a compaction read; not a hole")
		}
		if h == nil {
			continue
		}
		return true, p.declineHole(ctx, c, *h, "a message of the range a repair would summarize again is no longer stored", "read by a compaction before,")
	}
	return false, nil
}
