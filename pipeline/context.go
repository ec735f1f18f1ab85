package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
)

// ContextOption configures a read.
type ContextOption func(*contextOptions)

type contextOptions struct {
	atLeast     uint64
	raw         bool
	maxTokens   int
	waitPending time.Duration
	value       *schemas.Result

	// Recall's options.
	query          string
	fromSeq, toSeq uint64
	scanLimit      int
}

// AtLeastSeq makes the read include sequence n (the one a Publish returned): it
// retries, falling back to the stream leader, until the tail covers n. Read-your-writes.
func AtLeastSeq(n uint64) ContextOption { return func(o *contextOptions) { o.atLeast = n } }

// Raw keeps Compactor's metadata (tokens, usage, context_generation, meta) on messages.
func Raw() ContextOption { return func(o *contextOptions) { o.raw = true } }

// MaxTokens cuts the context at read time to fit n tokens (deterministic; the result is
// flagged Degraded). For Recall it is the budget of the recalled messages.
func MaxTokens(n int) ContextOption { return func(o *contextOptions) { o.maxTokens = n } }

// WaitPending makes the read wait, up to d, for the outcome of a compaction that is
// pending or running for the conversation, then read. Without it Context never waits
// for a compaction: with compaction ahead of time (soft_threshold) the result is usually
// in KV before it is needed.
func WaitPending(d time.Duration) ContextOption { return func(o *contextOptions) { o.waitPending = d } }

// Value makes the read assemble with v, an earlier value of the same conversation,
// instead of the live one, so that a caller can keep sending the prefix a provider has
// cached. v is used only while it is still safe: not newer than the live value and not
// covered by a forget (the conversation's tombstone); otherwise the read uses the live
// value, as without the option. Context.Generation says which one was used.
func Value(v *schemas.Result) ContextOption { return func(o *contextOptions) { o.value = v } }

// Context is what a model should be sent for a conversation.
type Context = assemble.Context

// ErrNotCovered means an AtLeastSeq read could not see the sequence it asked for.
var ErrNotCovered = errors.New("read does not cover the requested sequence")

// Context reads "pinned + summary + tail" for a conversation: the reader algorithm of
// the README, the same in every language.
func (c *Client) Context(ctx context.Context, conv string, opts ...ContextOption) (_ *Context, err error) {
	ctx, done := c.readable(ctx, c.conversationStreams()...)
	defer func() { err = done(err) }()
	var o contextOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if c.svc != nil {
		return c.serviceContext(ctx, conv, o)
	}
	if o.waitPending > 0 {
		if err := c.waitPending(ctx, conv, o.waitPending); err != nil {
			return nil, err
		}
	}
	leader := false
	for attempt := 0; ; attempt++ {
		v, from, err := c.readValue(ctx, conv, leader, o.value)
		if err != nil {
			return nil, err
		}
		in := assemble.Input{Value: v}
		if v != nil {
			if in.Pinned, err = c.store.Chat().LoadPinned(ctx, conv, v.PinnedSeqs); err != nil {
				return nil, err
			}
		}
		var msgs []jetstream.StoredMsg
		if leader {
			msgs, err = c.store.Chat().LoadLeader(ctx, conv, from, 0)
		} else {
			msgs, err = c.store.Chat().Load(ctx, conv, from, 0)
		}
		if err != nil {
			return nil, err
		}
		covered := o.atLeast == 0 || (v != nil && v.TailStartSeq > o.atLeast) ||
			(len(msgs) > 0 && msgs[len(msgs)-1].Seq >= o.atLeast)
		if covered {
			in.Tail = make([]schemas.Entry, len(msgs))
			for i, m := range msgs {
				in.Tail[i] = m.Entry()
			}
			// Stubs of messages over the max payload are shown whole; one whose object
			// is gone or refused is skipped and reported in Skipped.
			if err := c.store.Objects().Resolve(ctx, conv, in.Pinned); err != nil {
				return nil, err
			}
			if err := c.store.Objects().Resolve(ctx, conv, in.Tail); err != nil {
				return nil, err
			}
			out := assemble.Assemble(in, assemble.Options{Raw: o.raw, MaxTokens: o.maxTokens})
			return &out, nil
		}
		if attempt >= 5 {
			return nil, fmt.Errorf("%w: %s has not reached sequence %d", ErrNotCovered, conv, o.atLeast)
		}
		leader = attempt >= 1 // one more direct read, then ask the leader
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
}

// readValue is liveValue, or earlier when it is still safe to read with: the same
// conversation, no newer than the live value, and not covered by its tombstone.
func (c *Client) readValue(ctx context.Context, conv string, leader bool, earlier *schemas.Result) (*schemas.Result, uint64, error) {
	if earlier == nil || earlier.Conversation != conv {
		return c.liveValue(ctx, conv, leader)
	}
	v, _, tomb, err := c.store.Results().Live(ctx, conv, leader)
	if err != nil {
		return nil, 0, err
	}
	if v != nil && earlier.Generation <= v.Generation && !tomb.Covers(earlier.FirstSeq) {
		v = earlier
	}
	return v, tailFrom(v, tomb), nil
}

// waitPending waits up to d for the outcome of the conversation's pending request, if
// it has one. Running out of time is not an error: the read then shows the context as
// it is.
func (c *Client) waitPending(ctx context.Context, conv string, d time.Duration) error {
	req, err := c.store.Queue().Pending(ctx, conv)
	if err != nil || req == nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := c.WaitForOutcome(wctx, conv, req.RequestID); err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// Skipped lists messages a read left out and why.
type Skipped = rounds.Skipped
