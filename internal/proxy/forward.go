package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// bounds are what a turn may send the model.
type bounds struct {
	// limit is the most the model may be sent: the hard limit of its window, less the
	// output the request reserves, never under a quarter of the window.
	limit int
	// stale is the size past which a compaction sent before is given up for a newer
	// one although the provider may still cache it: the compaction threshold.
	stale int
}

// bounds reads conv's window.
func (s *Store) bounds(ctx context.Context, conv string, maxOutput int) (bounds, error) {
	set, err := s.settings(ctx, conv)
	if err != nil {
		return bounds{}, err
	}
	w := set.ContextWindow
	limit := max(min(set.Budget().HardLimitTokens(), w-maxOutput), w/4)
	return bounds{limit: limit, stale: min(limit, int(set.Threshold*float64(w)))}, nil
}

// forward reads what the model is sent for a history the conversation holds whole:
// the compaction last sent while the provider's cache likely holds it and the window
// allows, else the newest; a pending compaction is waited for (up to opts.Wait) when
// the context is over the limit, and the context is cut at read time when it still is.
func (s *Store) forward(ctx context.Context, t *Turn, pl place, b bounds, opts TurnOptions) error {
	limit := b.limit
	read := func(more ...pipeline.ContextOption) (*assemble.Context, error) {
		return s.c.Context(ctx, pl.conv, append([]pipeline.ContextOption{pipeline.AtLeastSeq(pl.last)}, more...)...)
	}
	earlier := s.cached(pl.conv, opts.CacheTTL)
	cx, err := read(pipeline.Value(earlier))
	if err != nil {
		return err
	}
	if cx.Tokens > b.stale && earlier != nil && cx.Generation == earlier.Generation {
		if cx, err = read(); err != nil {
			return err
		}
	}
	if cx.Tokens > limit && opts.Wait > 0 {
		start := s.now()
		s.compactNow(ctx, pl.conv, opts.Wait)
		t.Waited = s.now().Sub(start)
		if cx, err = read(); err != nil {
			return err
		}
	}
	if cx.Tokens > limit {
		if cx, err = read(pipeline.MaxTokens(limit)); err != nil {
			return err
		}
		dropOldest(cx, limit)
		t.Cut = true
	}
	if err := s.keep(ctx, pl.conv, cx.Generation, earlier); err != nil {
		return err
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
	if !ok || ttl <= 0 || s.now().Sub(v.at) > ttl {
		return nil
	}
	return v.value
}

// keep remembers the value of generation gen as the one conv was sent with now.
func (s *Store) keep(ctx context.Context, conv string, gen uint64, earlier *schemas.Result) error {
	v := earlier
	if gen == 0 {
		v = nil
	} else if earlier == nil || earlier.Generation != gen {
		live, err := s.c.Result(ctx, conv)
		if err != nil {
			return err
		}
		if live == nil || live.Generation != gen {
			live = nil // a newer one landed meanwhile: the next turn takes it
		}
		v = live
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == nil {
		delete(s.sticky, conv)
		return nil
	}
	if len(s.sticky) >= maxRemembered {
		clear(s.sticky)
	}
	s.sticky[conv] = stickyValue{value: v, at: s.now()}
	return nil
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
		kept = &assemble.Context{Messages: msgs, Seqs: make([]uint64, len(msgs))}
	}
	for i := range kept.Messages {
		kept.Messages[i] = kept.Messages[i].StripMetadata()
	}
	kept.Tokens = tokens.Messages(kept.Messages)
	if kept.Tokens > limit {
		kept = cut(kept, limit)
		t.Cut = true
	}
	t.Context = kept
	return nil
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

// cut is cx cut at read time to fit limit, the way readers cut (oldest tool outputs
// first, then the head and tail of what is still over).
func cut(cx *assemble.Context, limit int) *assemble.Context {
	tail := make([]schemas.Entry, len(cx.Messages))
	for i := range cx.Messages {
		tail[i] = schemas.Entry{Seq: uint64(i + 1), Message: cx.Messages[i]}
	}
	out := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: limit})
	out.Generation, out.HasSummary, out.TailStartSeq = cx.Generation, cx.HasSummary, cx.TailStartSeq
	copy(out.Seqs, cx.Seqs)
	dropOldest(&out, limit)
	return &out
}

// dropOldest drops the oldest messages after the summary (a tool call with its results,
// whole) while cx is over limit: what a cut at read time cannot bring under the window,
// because it keeps some of every message, is left out. The newest message stays.
func dropOldest(cx *assemble.Context, limit int) {
	first := 0
	for i, seq := range cx.Seqs {
		if seq == 0 {
			first = i + 1
		}
	}
	for cx.Tokens > limit && first < len(cx.Messages)-1 {
		end := first + 1
		if ids := cx.Messages[first].ToolCalls; len(ids) > 0 {
			for end < len(cx.Messages)-1 && cx.Messages[end].Role == schemas.RoleTool {
				end++
			}
		}
		if end >= len(cx.Messages) {
			break
		}
		cx.Tokens -= tokens.Messages(cx.Messages[first:end])
		cx.Messages = append(cx.Messages[:first:first], cx.Messages[end:]...)
		cx.Seqs = append(cx.Seqs[:first:first], cx.Seqs[end:]...)
	}
	// A tool result whose call was dropped would be refused by every provider.
	for first < len(cx.Messages)-1 && cx.Messages[first].Role == schemas.RoleTool {
		cx.Tokens -= tokens.Message(&cx.Messages[first])
		cx.Messages = append(cx.Messages[:first:first], cx.Messages[first+1:]...)
		cx.Seqs = append(cx.Seqs[:first:first], cx.Seqs[first+1:]...)
	}
}
