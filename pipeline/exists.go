package pipeline

import (
	"context"
	"errors"

	"github.com/compactor/compactor/schemas"
)

// ErrNotFound is matched when a conversation has nothing stored: no message in CHAT and
// no value in KV. The library itself never returns it from a read (reading a
// conversation before its first message is normal for a service: its context is
// empty); Exists tells the two apart for callers to whom an unknown id is a mistake,
// such as the compactor command. Compact returns it (a 404 of the service): a
// compaction of nothing would write a value for a conversation that is not there.
var ErrNotFound = errors.New("conversation not found")

// Exists reports whether anything is stored for conv: a message in CHAT, or a value in
// KV (a compaction, or the marker of a declined one). A forgotten conversation does not
// exist until something is published to its id again. It reads the value and the
// conversation's newest message, each one lookup the server answers from its index.
func (c *Client) Exists(ctx context.Context, conv string) (_ bool, err error) {
	ctx, done := c.readable(ctx, c.conversationStreams()...)
	defer func() { err = done(err) }()
	if err := schemas.ValidateConversationID(conv); err != nil {
		return false, err
	}
	if c.svc != nil {
		st, err := c.serviceStatus(ctx, conv)
		if err != nil {
			return false, err
		}
		return st.Value != nil || st.LastSeq > 0, nil
	}
	v, _, err := c.liveValue(ctx, conv, false)
	if err != nil {
		return false, err
	}
	if v != nil {
		return true, nil
	}
	last, err := c.store.Chat().LastSeq(ctx, conv)
	if err != nil {
		return false, err
	}
	return last > 0, nil
}
