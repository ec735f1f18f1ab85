package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/compactor/compactor/internal/proxy/swaprule"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// bounds are what a turn may send the model.
type bounds struct {
	// limit is the most the model may be sent: the hard limit of its window, less the
	// output and the rest of the request (tools...) it reserves.
	limit int
	// stale is the size past which a compaction sent before is given up for a newer
	// one although the provider may still cache it: the compaction threshold.
	stale int
}

// bounds reads conv's window. A request whose output and tools alone leave no room for
// its messages is refused.
func (s *Store) bounds(ctx context.Context, conv string, reserved int) (bounds, error) {
	set, err := s.settings(ctx, conv)
	if err != nil {
		return bounds{}, err
	}
	w := set.ContextWindow
	limit := min(set.Budget().HardLimitTokens(), w-reserved)
	if limit <= 0 {
		return bounds{}, fmt.Errorf("%w: the request's max_tokens and tools take %d of the model's %d-token window (the conversation's context_window): no room is left for its messages",
			ErrBadRequest, reserved, w)
	}
	return bounds{limit: limit, stale: min(limit, int(set.Threshold*float64(w)))}, nil
}

// pendingSeq marks, in a context sent upstream, a client message not stored yet.
const pendingSeq = ^uint64(0)

// withPending is cx with the client's messages not stored yet after it.
func withPending(cx *assemble.Context, pending []schemas.Message) *assemble.Context {
	out := *cx
	out.Messages = append(append(make([]schemas.Message, 0, len(cx.Messages)+len(pending)), cx.Messages...), pending...)
	out.Seqs = append(append(make([]uint64, 0, len(out.Messages)), cx.Seqs...), make([]uint64, len(pending))...)
	for i := len(cx.Seqs); i < len(out.Seqs); i++ {
		out.Seqs[i] = pendingSeq
	}
	out.Tokens = cx.Tokens + tokens.Messages(pending)
	return &out
}

// forward is what the model is sent for a history that extends a stored conversation:
// its context (the compaction last sent while the provider's cache likely holds it and
// the threshold allows, else the newest) and the client's new messages after it. Over
// the limit, a pending compaction is waited for (up to opts.Wait), then the context is
// cut at read time.
func (s *Store) forward(ctx context.Context, t *Turn, pl place, msgs []schemas.Message, b bounds, opts TurnOptions) error {
	more := tokens.Messages(msgs[pl.from:])
	// live is the conversation's live value as the last read saw it.
	var live *schemas.Result
	read := func(value *schemas.Result) (cx *assemble.Context, err error) {
		cx, live, err = s.readContext(ctx, pl.conv, pl.at.seq, value)
		return cx, err
	}
	earlier := s.cached(pl.conv, opts.CacheTTL)
	cx, err := read(earlier)
	if err != nil {
		return err
	}
	if swaprule.Reread(cx.Tokens+more, b.stale, earlier, cx.Generation) {
		if cx, err = read(nil); err != nil {
			return err
		}
	}
	if cx.Tokens+more > b.limit && opts.Wait > 0 && !pl.at.empty {
		start := s.now()
		s.compactNow(ctx, pl.conv, opts.Wait)
		t.Waited = s.now().Sub(start)
		if cx, err = read(nil); err != nil {
			return err
		}
	}
	s.keep(pl.conv, cx.Generation, earlier, live)
	if cx.HasSummary && cx.TailStartSeq > pl.at.seq+1 {
		// The summary covers messages stored after the newest resolve saw (another
		// continuation of the conversation, compacted while this turn waited): they are
		// not this client's. Its own messages are sent, cut to fit.
		return s.send(t, withPending(&assemble.Context{}, msgs), b.limit)
	}
	t.Stored = throughSeq(cx, pl.at.seq)
	if pl.managed {
		out, err := s.managedContext(ctx, pl, cx, msgs)
		if err != nil {
			return err
		}
		return s.send(t, out, b.limit)
	}
	cx = throughSeq(cx, pl.at.seq)
	left, from, err := s.leftOut(ctx, pl, cx)
	if err != nil {
		return err
	}
	return s.send(t, withPending(withPending(cx, left), msgs[from:]), b.limit)
}

// throughSeq is cx without what was stored after seq, the newest message resolve saw
// (another turn's, stored meanwhile): the client's own copies of those follow it.
func throughSeq(cx *assemble.Context, seq uint64) *assemble.Context {
	out := *cx
	out.Messages, out.Seqs = nil, nil
	for i, s := range cx.Seqs {
		if seq > 0 && s <= seq {
			out.Messages = append(out.Messages, cx.Messages[i])
			out.Seqs = append(out.Seqs, s)
		}
	}
	if len(out.Messages) == len(cx.Messages) {
		return cx
	}
	out.Tokens = tokens.Messages(out.Messages)
	out.HasSummary = out.HasSummary && slices.Contains(out.Seqs, 0)
	return &out
}

// leftOut is what the reader left out of cx of the messages pl.conv holds, and how many
// of the client's messages cx and those hold. The reader leaves out the newest messages
// when they are an open tool round (the call is stored, and its results are what the
// client sends now): they are sent as stored, so the bytes of the call do not change
// once its round is whole.
func (s *Store) leftOut(ctx context.Context, pl place, cx *assemble.Context) ([]schemas.Message, int, error) {
	last := uint64(0)
	for _, seq := range cx.Seqs {
		last = max(last, seq)
	}
	if pl.at.empty || last >= pl.at.seq {
		return nil, pl.from, nil
	}
	stored, err := s.st.Chat().LoadLeader(ctx, pl.conv, max(last+1, cx.TailStartSeq), pl.at.seq)
	if err != nil {
		return nil, 0, err
	}
	var left []schemas.Message
	for _, m := range stored {
		e := m.Entry()
		if _, _, ok := position(&e.Message); !ok || e.Err != nil || e.Message.Meta[MetaSeed] != "" || e.Message.ContentRef != nil {
			// Not a message of the client's history as sent (or one stored as an
			// object, a stub here): the client's copies are sent.
			return nil, s.firstLeft(stored, pl.from), nil
		}
		left = append(left, e.Message.StripMetadata())
	}
	return left, pl.from, nil
}

// firstLeft is how many of the client's messages come before the first of stored that
// has a position (from when none has).
func (s *Store) firstLeft(stored []jetstream.StoredMsg, from int) int {
	for _, m := range stored {
		e := m.Entry()
		if pos, _, ok := position(&e.Message); ok && e.Err == nil {
			from = min(from, pos-1)
		}
	}
	return from
}

// forwardFresh is what the model is sent for a history that starts a branch not made
// yet: the parent's summary it is seeded with, or nothing, and the client's messages
// after what that covers.
func (s *Store) forwardFresh(t *Turn, pl place, msgs []schemas.Message, limit int) error {
	seed := pl.seed
	if seed == nil {
		seed = &assemble.Context{}
	}
	return s.send(t, withPending(seed, msgs[pl.from:]), limit)
}

// send makes cx what t sends, cut to fit limit when it is over.
func (s *Store) send(t *Turn, cx *assemble.Context, limit int) error {
	if cx.Tokens > limit {
		fitted, err := fit(cx, limit)
		if err != nil {
			return err
		}
		cx, t.Cut = fitted, true
	}
	t.Context = cx
	return nil
}

// compactNow asks for a compaction of conv and waits up to d for its outcome. A
// compactor that does not answer, or is busy, leaves the read-time cut to keep the bound.
func (s *Store) compactNow(ctx context.Context, conv string, d time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r, err := s.c.Compact(wctx, conv, pipeline.Wait(d))
	switch {
	case err == nil:
		s.log.Debug().Str("conversation", conv).Str("status", string(r.Status)).Msg("proxy: compaction before forwarding")
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		s.log.Info().Str("conversation", conv).Dur("waited", d).Msg("proxy: the compaction did not finish in time; the context is cut at read time")
	default:
		s.log.Warn().Err(err).Str("conversation", conv).Msg("proxy: could not ask for a compaction; the context is cut at read time")
	}
}

// cached is the value conv was last sent with, while the provider likely still caches
// its prefix (within ttl of the last turn).
func (s *Store) cached(conv string, ttl time.Duration) *schemas.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.sticky[conv]
	if !ok || !swaprule.Warm(s.now().Sub(v.at), ttl) {
		return nil
	}
	return v.value
}

// keep remembers the value of generation gen as the one conv was sent with now:
// earlier, or live, the live value the context was read with.
func (s *Store) keep(conv string, gen uint64, earlier, live *schemas.Result) {
	v := swaprule.Keep(gen, earlier, live)
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == nil {
		delete(s.sticky, conv)
		return
	}
	if len(s.sticky) >= maxRemembered {
		clear(s.sticky)
	}
	s.sticky[conv] = stickyValue{value: v, at: s.now()}
}

// forwardPrefix is what the model is sent when the client dropped the conversation's
// newest messages (it regenerates the last reply, or cut its history): the context up
// to the client's last message. When the summary covers a message the client dropped,
// the client's own messages are sent, cut at read time to fit.
func (s *Store) forwardPrefix(ctx context.Context, t *Turn, pl place, msgs []schemas.Message, limit int) error {
	cx, err := s.c.Context(ctx, pl.conv, pipeline.Raw())
	if err != nil {
		return err
	}
	kept, ok := upToPosition(cx, pl.upTo)
	if !ok {
		kept = withPending(&assemble.Context{}, msgs)
	} else {
		t.Stored = kept
	}
	for i := range kept.Messages {
		kept.Messages[i] = kept.Messages[i].StripMetadata()
	}
	kept.Tokens = tokens.Messages(kept.Messages)
	return s.send(t, kept, limit)
}

// upToPosition is cx without the messages after the client's position upTo; ok is false
// when its summary covers one of them (or where it stops cannot be told).
func upToPosition(cx *assemble.Context, upTo int) (*assemble.Context, bool) {
	out := &assemble.Context{Generation: cx.Generation, TailStartSeq: cx.TailStartSeq, HasSummary: cx.HasSummary}
	summary := -1
	for i, seq := range cx.Seqs {
		if seq == 0 {
			summary = i
		}
	}
	firstTail := 0
	for i := range cx.Messages {
		pos, _, ok := position(&cx.Messages[i])
		if !ok && cx.Seqs[i] != 0 {
			return nil, false
		}
		if i > summary && cx.Seqs[i] != 0 && firstTail == 0 {
			firstTail = pos
		}
		if cx.Seqs[i] != 0 && pos > upTo {
			continue
		}
		out.Messages = append(out.Messages, cx.Messages[i])
		out.Seqs = append(out.Seqs, cx.Seqs[i])
	}
	if summary >= 0 && (firstTail == 0 || firstTail-1 > upTo) {
		return nil, false
	}
	return out, true
}

// fit cuts cx to limit tokens the way readers cut at read time (the oldest tool
// outputs, then the largest messages, each down to its head and tail), then leaves out
// the oldest messages after the leading system messages and the summary, a tool call
// with its results at once, while it is still over. The newest round (the newest
// message, and when it is a tool result the call it answers with every result since)
// is never left out. When that round alone is over the limit the request is refused:
// the model is never sent more than its window.
func fit(cx *assemble.Context, limit int) (*assemble.Context, error) {
	tail := make([]schemas.Entry, len(cx.Messages))
	for i := range cx.Messages {
		tail[i] = schemas.Entry{Seq: uint64(i + 1), Message: cx.Messages[i]}
	}
	cut := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: limit})
	for j, seq := range cut.Seqs { // back to the sequences cx gave each message
		cut.Seqs[j] = cx.Seqs[seq-1]
	}
	cut.Generation, cut.HasSummary, cut.TailStartSeq = cx.Generation, cx.HasSummary, cx.TailStartSeq
	dropOldest(&cut, limit)
	if cut.Tokens > limit {
		return nil, fmt.Errorf("%w: the conversation's newest messages alone take %d tokens, over the %d the model's window leaves for them",
			ErrBadRequest, cut.Tokens, limit)
	}
	return &cut, nil
}

// dropOldest leaves out the oldest messages that may go (see fit) while cx is over limit.
func dropOldest(cx *assemble.Context, limit int) {
	first := 0
	for first < len(cx.Messages) && cx.Messages[first].Role == schemas.RoleSystem {
		first++
	}
	if cx.HasSummary {
		for i, seq := range cx.Seqs {
			if seq == 0 {
				first = max(first, i+1)
				break
			}
		}
	}
	keep := newestRound(cx.Messages)
	drop := func(from, to int) {
		cx.Tokens -= tokens.Messages(cx.Messages[from:to])
		cx.Messages = append(cx.Messages[:from:from], cx.Messages[to:]...)
		cx.Seqs = append(cx.Seqs[:from:from], cx.Seqs[to:]...)
		keep -= to - from
	}
	for cx.Tokens > limit && first < keep {
		end := first + 1
		if len(cx.Messages[first].ToolCalls) > 0 {
			for end < len(cx.Messages) && cx.Messages[end].Role == schemas.RoleTool {
				end++
			}
		}
		if end > keep {
			break // the call's results reach into the newest round
		}
		drop(first, end)
	}
	// A tool result whose call was left out would be refused by every provider.
	for first < keep && cx.Messages[first].Role == schemas.RoleTool {
		drop(first, first+1)
	}
}

// newestRound is the index where the newest round of msgs starts: the last message,
// or when it is a tool result, the assistant message whose calls it answers.
func newestRound(msgs []schemas.Message) int {
	i := len(msgs) - 1
	for i > 0 && msgs[i].Role == schemas.RoleTool {
		i--
	}
	if i < len(msgs)-1 && len(msgs[i].ToolCalls) == 0 {
		return i + 1 // results without their call: only the results are the round
	}
	return max(i, 0)
}
