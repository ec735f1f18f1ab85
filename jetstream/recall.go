package jetstream

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

// Bounds of one recall's scan.
const (
	// DefaultRecallScanLimit is how many of a conversation's messages one recall reads
	// at most, newest first, when the caller names no other bound. A recall over a
	// longer history says where it stopped (ScannedFromSeq, ScanComplete false).
	DefaultRecallScanLimit = 20_000
	// MaxRecallScanLimit is the largest scan bound a caller may set.
	MaxRecallScanLimit = 1_000_000
	// recallPage is how many messages one window of the scan holds at most: the
	// memory a recall needs beyond what it returns.
	recallPage = 1024
	// recallSpan is the first window's width in stream sequences; it grows while the
	// conversation is sparse in the stream (others' messages in between) and shrinks
	// when a window holds more than recallPage messages.
	recallSpan    = 1024
	recallMaxSpan = 1 << 24
)

// Recall reads a conversation's raw messages for the recall operation: those in
// [req.FromSeq, req.ToSeq] that match req.Query, newest first within req.MaxTokens, a
// tool round whole or not at all (package schemas/recall decides). It reads CHAT in
// windows newest to oldest, at most recallPage messages in memory at once, and stops
// after scanLimit messages (0: DefaultRecallScanLimit), saying so in the answer.
// Stubs of messages over the max payload are resolved; one whose object is gone
// counts as invalid.
func (s *Store) Recall(ctx context.Context, req schemas.RecallRequest, scanLimit int) (*schemas.RecallResponse, error) {
	if err := schemas.ValidateConversationID(req.Conversation); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	switch {
	case scanLimit == 0:
		scanLimit = DefaultRecallScanLimit
	case scanLimit < 0 || scanLimit > MaxRecallScanLimit:
		return nil, &schemas.ValidationError{Field: "scan_limit", Rule: fmt.Sprintf("must be 1 to %d (0: the default, %d), got %d", MaxRecallScanLimit, DefaultRecallScanLimit, scanLimit)}
	}
	conv := req.Conversation
	sel := recall.NewSelector(recall.Options{Query: req.Query, MaxTokens: req.MaxTokens})
	floor := max(req.FromSeq, 1)
	hi := req.ToSeq
	if hi == 0 {
		hi = ^uint64(0)
	}
	var (
		carry    []schemas.Entry
		scanned  int
		span     = uint64(recallSpan)
		from, to uint64
		complete = true
	)
	for {
		// Skip to the conversation's newest message at or before hi: a stretch of
		// other conversations' messages costs one request.
		newest, err := s.lastAtOrBefore(ctx, conv, hi)
		if err != nil {
			return nil, err
		}
		if newest < floor {
			from = floor
			break
		}
		hi = newest
		if to == 0 {
			to = hi
		}
		lo := floor
		if hi-floor >= span {
			lo = hi - span + 1
		}
		msgs, full, err := s.loadWindow(ctx, conv, lo, hi, min(recallPage, scanLimit-scanned))
		if err != nil {
			return nil, err
		}
		if full && span > 1 {
			span /= 2 // too many messages in [lo, hi]: a narrower window
			continue
		}
		scanned += len(msgs)
		chunk := append(entries(msgs), carry...)
		if err := s.ResolveEntries(ctx, conv, chunk[:len(msgs)]); err != nil {
			return nil, err
		}
		from = lo
		last := lo == floor || scanned >= scanLimit
		k := 0
		switch {
		case !last:
			// A round that reaches back past lo is selected with the next window; a
			// carry that grew past a page (no assistant message in a whole window) is
			// not carried further: its results count as incomplete.
			if k = recall.Carry(chunk); k > recallPage {
				k = 0
			}
		case lo != floor:
			// Stopped by the scan limit: a round that reaches back past lo is left
			// whole to the next page (to_seq below ScannedFromSeq), which then holds
			// its call too. Only when this page covered something else: a round that
			// fills the whole page is counted incomplete, or the next page would be
			// this one again.
			k = recall.Carry(chunk)
			for k > 0 && chunk[k-1].Err == nil && chunk[k-1].Message.Role != schemas.RoleTool {
				k-- // what follows the round's last result stands on its own: select it now
			}
			if k == 0 || k > recallPage || chunk[k-1].Seq >= to {
				k = 0
			} else {
				from = chunk[k-1].Seq + 1
			}
		}
		sel.Add(chunk[k:])
		carry = slices.Clone(chunk[:k])
		if last {
			complete = lo == floor
			carry = nil // left to the next page
			break
		}
		if len(msgs) < recallPage/4 {
			span = min(span*4, recallMaxSpan)
		}
		hi = lo - 1
	}
	if len(carry) > 0 {
		sel.Add(carry) // nothing older in range: a result carried here has lost its call
	}
	out := sel.Result()
	out.Conversation = conv
	if to == 0 { // nothing in range
		from, to = 0, 0
	}
	out.ScannedFromSeq, out.ScannedToSeq, out.ScanComplete = from, to, complete
	return &out, nil
}

// lastAtOrBefore returns the sequence of conversation conv's newest message at or
// before seq, 0 when it has none, with one batched direct get of the last message of
// each of its subjects up to seq.
func (s *Store) lastAtOrBefore(ctx context.Context, conv string, seq uint64) (uint64, error) {
	filter, err := s.cfg.ChatFilter(conv)
	if err != nil {
		return 0, err
	}
	req := map[string]any{"multi_last": []string{filter}, "batch": DirectBatchSize}
	if seq != ^uint64(0) {
		req["up_to_seq"] = seq
	}
	lasts, _, err := s.directRequest(ctx, s.cfg.ChatStream, req, filter)
	if err != nil {
		return 0, err
	}
	newest := uint64(0)
	for _, m := range lasts {
		if m.Seq <= seq {
			newest = max(newest, m.Seq)
		}
	}
	return newest, nil
}

// loadWindow reads conversation conv's messages in [lo, hi], in stream order; full
// reports that the window holds more than limit of them (msgs is then incomplete).
func (s *Store) loadWindow(ctx context.Context, conv string, lo, hi uint64, limit int) (msgs []StoredMsg, full bool, err error) {
	subjects, err := s.chatSubjects(ctx, conv, lo)
	if err != nil {
		return nil, false, err
	}
	for _, sub := range subjects {
		from := lo
		for batch := 1; ; batch = min(batch*4, DirectBatchSize) {
			page, more, err := s.directBatch(ctx, s.cfg.ChatStream, sub.name, from, min(batch, limit+1-len(msgs)))
			if err != nil {
				return nil, false, err
			}
			done := !more || len(page) == 0
			for _, m := range page {
				if m.Seq > hi {
					done = true
					break
				}
				msgs = append(msgs, m)
			}
			if len(msgs) > limit {
				return nil, true, nil
			}
			if done {
				break
			}
			from = page[len(page)-1].Seq + 1
		}
	}
	if len(subjects) > 1 {
		slices.SortFunc(msgs, func(a, b StoredMsg) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return msgs, false, nil
}
