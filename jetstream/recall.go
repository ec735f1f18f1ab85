package jetstream

import (
	"bytes"
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
	// recallWindowBytes bounds the bytes of one window as stored (a window of one
	// message may hold up to the max payload): the window narrows until it fits.
	recallWindowBytes = 8 << 20
	// DefaultRecallMaxBytes bounds the JSON bytes of the messages one recall returns
	// when the caller names no other bound (the service names its max payload). A stub
	// counts with its object's size, and only the objects of what is returned are
	// fetched, so this bounds what a recall holds beside one window and one object.
	DefaultRecallMaxBytes = 16 << 20
)

// Recall reads a conversation's raw messages for the recall operation: those in
// [req.FromSeq, req.ToSeq] that match req.Query, newest first within req.MaxTokens
// and maxBytes of JSON (0: DefaultRecallMaxBytes), a tool round whole or not at all
// (package schemas/recall decides). It reads CHAT in windows newest to oldest, at most
// recallPage messages and about recallWindowBytes in memory at once, and stops after
// scanLimit messages (0: DefaultRecallScanLimit), saying so in the answer.
//
// Stubs of messages over the max payload are selected by their references' sizes and
// fetched only when returned; to match a query, a stub's object is fetched, matched
// and dropped, one at a time. One whose object is gone counts as invalid (its unit is
// left out and named in SkippedSeqs when that is found only once it was selected).
func (s *Store) Recall(ctx context.Context, req schemas.RecallRequest, scanLimit int, maxBytes ...int) (*schemas.RecallResponse, error) {
	scanLimit, err := recallScanLimit(req, scanLimit)
	if err != nil {
		return nil, err
	}
	limit := DefaultRecallMaxBytes
	if len(maxBytes) > 0 && maxBytes[0] > 0 {
		limit = maxBytes[0]
	}
	sc := s.newRecallScan(req, scanLimit, limit)
	for {
		done, err := sc.window(ctx)
		if err != nil {
			return nil, err
		}
		if done {
			return sc.response(ctx)
		}
	}
}

// recallScanLimit validates a recall request and returns the scan limit it runs with.
func recallScanLimit(req schemas.RecallRequest, scanLimit int) (int, error) {
	if err := schemas.ValidateConversationID(req.Conversation); err != nil {
		return 0, err
	}
	if err := req.Validate(); err != nil {
		return 0, err
	}
	switch {
	case scanLimit == 0:
		return DefaultRecallScanLimit, nil
	case scanLimit < 0 || scanLimit > MaxRecallScanLimit:
		return 0, &schemas.ValidationError{Field: "scan_limit", Rule: fmt.Sprintf("must be 1 to %d (0: the default, %d), got %d", MaxRecallScanLimit, DefaultRecallScanLimit, scanLimit)}
	}
	return scanLimit, nil
}

// recallScan is one recall's walk over CHAT, one window at a time, newest first.
type recallScan struct {
	s         *Store
	conv      string
	sel       *recall.Selector
	query     string
	matched   map[uint64]bool // the stubs whose objects hold the query
	floor, hi uint64          // what is left to scan: [floor, hi]
	scanLimit int
	scanned   int
	span      uint64 // the next window's width in stream sequences
	// from and to are the scanned range the answer reports; complete, that the scan
	// reached floor.
	from, to uint64
	complete bool
	// carry is the start of a tool round whose call is older than the last window:
	// it is selected with the next one.
	carry []schemas.Entry
}

func (s *Store) newRecallScan(req schemas.RecallRequest, scanLimit, maxBytes int) *recallScan {
	sc := &recallScan{
		s:         s,
		conv:      req.Conversation,
		query:     req.Query,
		matched:   map[uint64]bool{},
		floor:     max(req.FromSeq, 1),
		hi:        req.ToSeq,
		scanLimit: scanLimit,
		span:      recallSpan,
		complete:  true,
	}
	if sc.hi == 0 {
		sc.hi = ^uint64(0)
	}
	sc.sel = recall.NewSelector(recall.Options{Query: req.Query, MaxTokens: req.MaxTokens, MaxBytes: maxBytes,
		StubMatches: func(e *schemas.Entry) bool { return sc.matched[e.Seq] }})
	return sc
}

// window reads and selects the next window; done reports that the scan is over.
func (sc *recallScan) window(ctx context.Context) (done bool, err error) {
	// Skip to the conversation's newest message at or before hi: a stretch of other
	// conversations' messages costs one request.
	newest, err := sc.s.lastAtOrBefore(ctx, sc.conv, sc.hi)
	if err != nil {
		return false, err
	}
	if newest < sc.floor {
		sc.from = sc.floor
		return true, nil
	}
	sc.hi = newest
	if sc.to == 0 {
		sc.to = sc.hi
	}
	lo := sc.floor
	if sc.hi-sc.floor >= sc.span {
		lo = sc.hi - sc.span + 1
	}
	msgs, full, err := sc.s.loadWindow(ctx, sc.conv, lo, sc.hi, min(recallPage, sc.scanLimit-sc.scanned), recallWindowBytes)
	if err != nil {
		return false, err
	}
	if full && sc.span > 1 {
		sc.span /= 2 // too many messages in [lo, hi]: a narrower window
		return false, nil
	}
	sc.scanned += len(msgs)
	chunk := append(entries(msgs), sc.carry...)
	if err := sc.matchStubs(ctx, chunk[:len(msgs)]); err != nil {
		return false, err
	}
	sc.from = lo
	last := lo == sc.floor || sc.scanned >= sc.scanLimit
	k := sc.carried(chunk, lo, last)
	sc.sel.Add(chunk[k:])
	sc.carry = slices.Clone(chunk[:k])
	if last {
		sc.complete = lo == sc.floor
		sc.carry = nil // left to the next page
		return true, nil
	}
	if len(msgs) < recallPage/4 && storedBytes(msgs) < recallWindowBytes/4 {
		sc.span = min(sc.span*4, recallMaxSpan)
	}
	sc.hi = lo - 1
	return false, nil
}

// carried returns how many of chunk's first entries (the window [lo, hi], then what
// the last window carried) are not selected now: the start of a tool round whose call
// may be older. last reports that this window is the scan's last.
func (sc *recallScan) carried(chunk []schemas.Entry, lo uint64, last bool) int {
	switch {
	case !last:
		// A round that reaches back past lo is selected with the next window; a carry
		// that grew past a page (no assistant message in a whole window) is not
		// carried further: its results count as incomplete.
		if k := recall.Carry(chunk); k <= recallPage {
			return k
		}
		return 0
	case lo != sc.floor:
		// Stopped by the scan limit: a round that reaches back past lo is left whole
		// to the next page (to_seq below ScannedFromSeq), which then holds its call
		// too. Only when this page covered something else: a round that fills the
		// whole page is counted incomplete, or the next page would be this one again.
		k := recall.Carry(chunk)
		for k > 0 && chunk[k-1].Err == nil && chunk[k-1].Message.Role != schemas.RoleTool {
			k-- // what follows the round's last result stands on its own: select it now
		}
		if k == 0 || k > recallPage || chunk[k-1].Seq >= sc.to {
			return 0
		}
		sc.from = chunk[k-1].Seq + 1
		return k
	}
	return 0
}

// matchStubs finds which stubs among es hold the query: each stub's object is fetched,
// matched and dropped, one at a time. A stub whose own fields match needs no fetch; one
// whose object is gone or refused becomes invalid, as Objects.Resolve makes it.
func (sc *recallScan) matchStubs(ctx context.Context, es []schemas.Entry) error {
	if sc.query == "" {
		return nil
	}
	for i := range es {
		e := &es[i]
		if e.Err != nil || e.Message.ContentRef == nil {
			continue
		}
		own := e.Message
		own.Content = schemas.Content{}
		if recall.Matches(&own, sc.query) {
			sc.matched[e.Seq] = true
			continue
		}
		one := []schemas.Entry{*e}
		if err := sc.s.objects.Resolve(ctx, sc.conv, one); err != nil {
			return err
		}
		if one[0].Err != nil {
			e.Message, e.Err = one[0].Message, one[0].Err
			continue
		}
		if recall.Matches(&one[0].Message, sc.query) {
			sc.matched[e.Seq] = true
		}
	}
	return nil
}

// response is the scan's answer, the objects of the stubs it returns fetched.
func (sc *recallScan) response(ctx context.Context) (*schemas.RecallResponse, error) {
	if len(sc.carry) > 0 {
		sc.sel.Add(sc.carry) // nothing older in range: a result carried here has lost its call
	}
	err := sc.sel.ResolveStubs(func(seq uint64, stub *schemas.Message) (schemas.Message, bool, error) {
		one := []schemas.Entry{{Seq: seq, Message: *stub}}
		if err := sc.s.objects.Resolve(ctx, sc.conv, one); err != nil {
			return schemas.Message{}, false, err
		}
		return one[0].Message, one[0].Err == nil, nil
	})
	if err != nil {
		return nil, err
	}
	out := sc.sel.Result()
	out.Conversation = sc.conv
	from, to := sc.from, sc.to
	if to == 0 { // nothing in range
		from, to = 0, 0
	}
	out.ScannedFromSeq, out.ScannedToSeq, out.ScanComplete = from, to, sc.complete
	return &out, nil
}

// storedBytes is the size of msgs' payloads.
func storedBytes(msgs []StoredMsg) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Data)
	}
	return n
}

// lastAtOrBefore returns the sequence of conversation conv's newest message at or
// before seq, 0 when it has none, with one batched direct get of the last message of
// each of its subjects up to seq.
func (s *core) lastAtOrBefore(ctx context.Context, conv string, seq uint64) (uint64, error) {
	filter, err := s.cfg.ChatFilter(conv)
	if err != nil {
		return 0, err
	}
	req := map[string]any{"multi_last": []string{filter}, "batch": DirectBatchSize}
	if seq != ^uint64(0) {
		req["up_to_seq"] = seq
	}
	lasts, _, err := s.directRequest(ctx, s.cfg.ChatStream, req, filter)
	if err == nil && len(lasts) == 0 && seq != ^uint64(0) {
		// The server answers nothing for an up_to_seq past the stream's last sequence:
		// then every message is at or before seq, and the newest ones are the answer.
		delete(req, "up_to_seq")
		lasts, _, err = s.directRequest(ctx, s.cfg.ChatStream, req, filter)
	}
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
// reports that the window holds more than limit of them, or more than maxBytes in more
// than one message (msgs is then incomplete).
func (s *core) loadWindow(ctx context.Context, conv string, lo, hi uint64, limit, maxBytes int) (msgs []StoredMsg, full bool, err error) {
	size := 0
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
				size += len(m.Data)
			}
			if len(msgs) > limit || (size > maxBytes && len(msgs) > 1) {
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

// StoredBytes measures, without holding them, the bytes of conversation conv's CHAT
// messages from sequence from on as stored, a stub counted with its object's size. It
// reads them in batches of at most about limit bytes (batched direct gets with
// max_bytes) and stops once the count passes limit: over then reports that there is
// more than limit, and n is what was counted so far. A reader that must refuse what
// is too large (compactor.context with a format) asks this first.
func (s *Store) StoredBytes(ctx context.Context, conv string, from uint64, limit int64) (n int64, over bool, err error) {
	subjects, err := s.chatSubjects(ctx, conv, max(from, 1))
	if err != nil {
		return 0, false, err
	}
	for _, sub := range subjects {
		next := max(from, 1)
		for {
			req := map[string]any{"seq": next, "next_by_subj": sub.name, "batch": DirectBatchSize,
				"max_bytes": max(min(limit-n+1, 1<<30), 1)}
			page, more, err := s.directRequest(ctx, s.cfg.ChatStream, req, sub.name)
			if err != nil {
				return 0, false, err
			}
			for _, m := range page {
				n += storedSize(m)
				if n > limit {
					return n, true, nil
				}
			}
			if !more || len(page) == 0 {
				break
			}
			next = page[len(page)-1].Seq + 1
		}
	}
	return n, false, nil
}

// storedSize is a stored message's bytes, a stub's with its object's size.
func storedSize(m StoredMsg) int64 {
	n := int64(len(m.Data))
	if bytes.Contains(m.Data, []byte(`"content_ref"`)) {
		if e := m.Entry(); e.Err == nil && e.Message.ContentRef != nil {
			n += e.Message.ContentRef.Size
		}
	}
	return n
}
