package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// ErrDuplicate is matched by the error of a chat publish whose message id the stream
// already had, within its duplicate window, for another message (other content, or
// another conversation): nothing was stored. A retry of the same message is no error.
var ErrDuplicate = errors.New("message id already used by another message")

// DuplicateError is the error of a publish whose message id names another stored
// message: Seq is that message's sequence, not this one's (this one was not stored).
type DuplicateError struct {
	Conversation string
	MsgID        string
	Seq          uint64
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("publish to %s: message id %q was used by another message, stored at seq %d within the duplicate window; "+
		"this one was not stored (give each message an id of its own)", e.Conversation, e.MsgID, e.Seq)
}

// Is makes a DuplicateError match ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// CheckDuplicate tells a retry from a reuse when the stream answered a publish of data
// to conv with message id msgID as a duplicate of the message at seq: nil when that
// message is this one (same conversation, same bytes: a retry, stored once), a
// DuplicateError when it is another, and an error when it cannot be read.
func (ch *Chat) CheckDuplicate(ctx context.Context, conv string, data []byte, msgID string, seq uint64) error {
	m, err := ch.leaderGet(ctx, ch.cfg.ChatStream, map[string]any{"seq": seq})
	if errors.Is(err, errNoMessage) {
		return fmt.Errorf("publish to %s: message id %q names the message stored at seq %d, which is gone (forgotten or aged out); this one was not stored", conv, msgID, seq)
	}
	if err != nil {
		return fmt.Errorf("publish to %s: message id %q names the message stored at seq %d, which cannot be read to tell a retry from another message: %w", conv, msgID, seq, err)
	}
	if got, ok := ch.cfg.ConversationOf(m.Subject); ok && got == conv && bytes.Equal(m.Data, data) {
		return nil
	}
	return &DuplicateError{Conversation: conv, MsgID: msgID, Seq: seq}
}
