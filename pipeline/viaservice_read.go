package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/recall"
	"github.com/compactor/compactor/schemas/tokens"
)

// The reads of a client in service mode: what Context, Result, Exists, Pending and
// Recall read from the streams and buckets in the normal mode, read through
// compactor.context, compactor.status and compactor.recall, every answer checked.

// maxTailPages bounds the compactor.recall pages one read of a tail (or of the pinned
// messages) asks for: at least a max payload of messages each, or the scan bound of
// jetstream.DefaultRecallScanLimit messages.
const maxTailPages = 1024

// serviceContext is Context in service mode: the value and where the tail starts from
// compactor.context, the pinned messages and the tail from compactor.recall, assembled
// as in the normal mode.
func (c *Client) serviceContext(ctx context.Context, conv string, o contextOptions) (*Context, error) {
	switch {
	case o.raw:
		return nil, serviceModeError("Raw", "compactor.recall serves messages without Compactor's metadata")
	case o.waitPending > 0:
		return nil, serviceModeError("WaitPending", "the outcome of a compaction is an event of COMPACT_EVENTS, which the service does not serve; "+
			"ask with Compact and Wait instead")
	}
	for attempt := 0; ; attempt++ {
		cr, err := c.serviceValue(ctx, conv)
		if err != nil {
			return nil, err
		}
		v, from := earlierOrLive(cr, o.value)
		in := assemble.Input{Value: v}
		if v != nil {
			if in.Pinned, err = c.servicePinned(ctx, conv, v.PinnedSeqs, from); err != nil {
				return nil, err
			}
		}
		if in.Tail, err = c.serviceRange(ctx, conv, from, cr.LastSeq, nil); err != nil {
			return nil, err
		}
		covered := o.atLeast == 0 || (v != nil && v.TailStartSeq > o.atLeast) ||
			(len(in.Tail) > 0 && in.Tail[len(in.Tail)-1].Seq >= o.atLeast) || cr.LastSeq >= o.atLeast
		if covered {
			out := assemble.Assemble(in, assemble.Options{MaxTokens: o.maxTokens})
			return &out, nil
		}
		if attempt >= 5 {
			return nil, errNotCovered(conv, o.atLeast)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
}

// earlierOrLive is the value a read assembles with, and where its tail starts: the
// live value of cr, or earlier when it is still safe (the same conversation, no newer
// than the live value, and not covered by a forget). The service does not serve the
// tombstone; what it tells of it is enough: a live value is served only when the
// tombstone does not cover its FirstSeq (a value without FirstSeq only when there is
// none), and a tail start above the live value's is the forget's.
func earlierOrLive(cr *schemas.ContextResponse, earlier *schemas.Result) (*schemas.Result, uint64) {
	v, live := cr.Value, cr.Value
	if earlier == nil || live == nil || earlier.Conversation != cr.Conversation || earlier.Generation > live.Generation {
		return v, cr.TailStartSeq
	}
	forgotThrough := uint64(0) // what the answer shows of the forget
	if cr.TailStartSeq > max(live.TailStartSeq, 1) {
		forgotThrough = cr.TailStartSeq - 1
	}
	// A tombstone would cover a live value without FirstSeq: there is none.
	safe := live.FirstSeq == 0 || (earlier.FirstSeq >= live.FirstSeq && earlier.FirstSeq > forgotThrough)
	if !safe {
		return v, cr.TailStartSeq
	}
	return earlier, max(earlier.TailStartSeq, forgotThrough+1, 1)
}

// errNotCovered is ErrNotCovered for conv and seq.
func errNotCovered(conv string, seq uint64) error {
	return fmt.Errorf("%w: %s has not reached sequence %d", ErrNotCovered, conv, seq)
}

// serviceValue asks compactor.context where conv's context starts, and checks the
// answer: the conversation asked for, a value of it (valid, as readers decode it) and
// a tail start at or above the value's.
func (c *Client) serviceValue(ctx context.Context, conv string) (*schemas.ContextResponse, error) {
	var cr schemas.ContextResponse
	if err := c.call(ctx, schemas.ContextSubject, 0, schemas.ContextRequest{Conversation: conv}, &cr); err != nil {
		return nil, err
	}
	if err := checkValue(schemas.ContextSubject, conv, cr.Conversation, cr.Value); err != nil {
		return nil, err
	}
	if cr.TailStartSeq < 1 || (cr.Value != nil && cr.TailStartSeq < cr.Value.TailStartSeq) {
		return nil, badAnswer(schemas.ContextSubject, "tail_start_seq %d is below 1 or the value's tail start", cr.TailStartSeq)
	}
	return &cr, nil
}

// checkValue checks an answer's conversation and value.
func checkValue(subject, conv, answered string, v *schemas.Result) error {
	if answered != conv {
		return badAnswer(subject, "the answer is of conversation %q, not %q", answered, conv)
	}
	if v == nil {
		return nil
	}
	if v.Conversation != conv {
		return badAnswer(subject, "the value is of conversation %q, not %q", v.Conversation, conv)
	}
	b, err := json.Marshal(v)
	if err == nil {
		_, err = schemas.DecodeResult(b)
	}
	if err != nil {
		return badAnswer(subject, "the value is not one readers take: %v", err)
	}
	return nil
}

// serviceStatus asks compactor.status about conv and checks the answer.
func (c *Client) serviceStatus(ctx context.Context, conv string) (*schemas.ConversationStatus, error) {
	var st schemas.ConversationStatus
	if err := c.call(ctx, schemas.StatusSubject, 0, schemas.ConversationRequest{Conversation: conv}, &st); err != nil {
		return nil, err
	}
	if err := checkValue(schemas.StatusSubject, conv, st.Conversation, st.Value); err != nil {
		return nil, err
	}
	return &st, nil
}

// maxPinnedOneByOne is how many pinned messages servicePinned recalls one at a time at
// most; more are read with one read of the range they span.
const maxPinnedOneByOne = 16

// servicePinned reads the pinned messages at seqs below from (one at or above it is
// in the tail, where the reader shows it). Up to maxPinnedOneByOne are recalled each
// by its own sequence, which answers a message outside any tool round; the pinned
// messages of tool rounds, which a recall returns only with their whole round, are
// then read with one read of the range they span. More pinned messages are read with
// one read of the range all of them span. A pinned message the service does not
// return (gone, invalid, or in a round that is not whole there) is left out.
func (c *Client) servicePinned(ctx context.Context, conv string, seqs []uint64, from uint64) ([]schemas.Entry, error) {
	pinned := slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(seqs))), func(s uint64) bool { return s == 0 || s >= from })
	if len(pinned) > maxPinnedOneByOne {
		return c.serviceRange(ctx, conv, pinned[0], pinned[len(pinned)-1], setOf(pinned))
	}
	var out []schemas.Entry
	var rest []uint64
	for _, seq := range pinned {
		es, err := c.serviceRange(ctx, conv, seq, seq, nil)
		if err != nil {
			return nil, err
		}
		if len(es) == 0 {
			rest = append(rest, seq)
		}
		out = append(out, es...)
	}
	if len(rest) > 1 {
		es, err := c.serviceRange(ctx, conv, rest[0], rest[len(rest)-1], setOf(rest))
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// setOf is seqs as a set.
func setOf(seqs []uint64) map[uint64]bool {
	set := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		set[s] = true
	}
	return set
}

// serviceRange reads conv's messages in [lo, hi] (only those in keep, when not nil)
// through compactor.recall pages, newest first, and returns them in stream order. A
// page that the budget or the payload cut is taken up to its newest unit left out, and
// the next page ends below what was taken; one that the scan bound cut ends where the
// scan stopped. Every page is checked: the conversation, sequences in the range asked
// for and below what earlier pages took, none twice.
func (c *Client) serviceRange(ctx context.Context, conv string, lo, hi uint64, keep map[uint64]bool) ([]schemas.Entry, error) {
	var out []schemas.Entry
	for page := 0; hi >= lo && hi > 0; page++ {
		if page == maxTailPages {
			return nil, badAnswer(schemas.RecallSubject, "%s: more than %d pages for sequences %d to %d", conv, maxTailPages, lo, hi)
		}
		r, err := c.recallPage(ctx, schemas.RecallRequest{Conversation: conv, FromSeq: lo, ToSeq: hi, MaxTokens: schemas.MaxRecallMaxTokens})
		if err != nil {
			return nil, err
		}
		taken, next, err := pageTaken(conv, r, lo, hi)
		if err != nil {
			return nil, err
		}
		for _, m := range taken {
			if keep == nil || keep[m.Seq] {
				out = append(out, schemas.Entry{Seq: m.Seq, Message: m.Message})
			}
		}
		if next == 0 {
			break
		}
		hi = next
	}
	slices.SortFunc(out, func(a, b schemas.Entry) int { return compareSeq(a.Seq, b.Seq) })
	return out, nil
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// pageTaken checks one page of serviceRange over [lo, hi] and returns what it takes
// of it and the next page's upper bound (0: none).
func pageTaken(conv string, r *schemas.RecallResponse, lo, hi uint64) (taken []schemas.RecalledMessage, next uint64, err error) {
	if err := checkRecalled(conv, r, lo, hi); err != nil {
		return nil, 0, err
	}
	taken = r.Messages
	cut := r.CutByBudget || r.CutByPayload
	switch {
	case cut && len(r.SkippedSeqs) == 0:
		return nil, 0, badAnswer(schemas.RecallSubject, "%s: the answer says messages were cut but names none", conv)
	case cut:
		newest := slices.Max(r.SkippedSeqs)
		taken = slices.DeleteFunc(slices.Clone(taken), func(m schemas.RecalledMessage) bool { return m.Seq <= newest })
		if len(taken) == 0 {
			return nil, 0, badAnswer(schemas.RecallSubject, "%s: the messages from seq %d do not fit one answer of compactor.recall "+
				"(its max payload): the conversation cannot be read through the service", conv, newest)
		}
	case !r.ScanComplete:
		if r.ScannedFromSeq <= lo || r.ScannedFromSeq > hi {
			return nil, 0, badAnswer(schemas.RecallSubject, "%s: an incomplete scan from seq %d, outside %d to %d", conv, r.ScannedFromSeq, lo, hi)
		}
		return taken, r.ScannedFromSeq - 1, nil
	default:
		return taken, 0, nil
	}
	oldest := slices.MinFunc(taken, func(a, b schemas.RecalledMessage) int { return compareSeq(a.Seq, b.Seq) }).Seq
	if oldest <= lo {
		return taken, 0, nil
	}
	return taken, oldest - 1, nil
}

// checkRecalled checks a compactor.recall answer for conv over [lo, hi] (hi 0: no
// upper bound): the conversation, and every message's sequence in range, once.
func checkRecalled(conv string, r *schemas.RecallResponse, lo, hi uint64) error {
	if r.Conversation != conv {
		return badAnswer(schemas.RecallSubject, "the answer is of conversation %q, not %q", r.Conversation, conv)
	}
	seen := make(map[uint64]bool, len(r.Messages))
	for _, m := range r.Messages {
		switch {
		case m.Seq < max(lo, 1) || (hi > 0 && m.Seq > hi):
			return badAnswer(schemas.RecallSubject, "%s: message at seq %d, outside the range asked for (%d to %d)", conv, m.Seq, lo, hi)
		case seen[m.Seq]:
			return badAnswer(schemas.RecallSubject, "%s: seq %d answered twice", conv, m.Seq)
		}
		seen[m.Seq] = true
		if err := m.Message.Validate(); err != nil {
			return badAnswer(schemas.RecallSubject, "%s: message at seq %d: %v", conv, m.Seq, err)
		}
	}
	return nil
}

// recallPage asks compactor.recall once. A conversation with nothing in CHAT (the
// service's 404) is an empty answer, as the normal mode's read of it.
func (c *Client) recallPage(ctx context.Context, req schemas.RecallRequest) (*schemas.RecallResponse, error) {
	var r schemas.RecallResponse
	err := c.call(ctx, schemas.RecallSubject, 0, req, &r)
	if errors.Is(err, ErrNotFound) {
		max := req.MaxTokens
		if max == 0 {
			max = schemas.DefaultRecallMaxTokens
		}
		return &schemas.RecallResponse{Conversation: req.Conversation, Messages: []schemas.RecalledMessage{}, MaxTokens: max, ScanComplete: true}, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// serviceRecall is Recall in service mode: one compactor.recall, its answer checked.
func (c *Client) serviceRecall(ctx context.Context, req schemas.RecallRequest, scanLimit int) (*Recalled, error) {
	if scanLimit != 0 && scanLimit != jetstream.DefaultRecallScanLimit {
		return nil, serviceModeError("ScanLimit", "compactor.recall scans at most its default bound; page with ToSeq below ScannedFromSeq instead")
	}
	r, err := c.recallPage(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := checkRecalled(req.Conversation, r, req.FromSeq, req.ToSeq); err != nil {
		return nil, err
	}
	for i := range r.Messages { // not on the wire: weighed as the service weighs it
		r.Messages[i].Tokens = recall.Weigh(tokens.Chars4{}, &r.Messages[i].Message)
	}
	return r, nil
}
