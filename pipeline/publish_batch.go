package pipeline

import (
	"context"
	"fmt"

	"github.com/compactor/compactor/schemas"
)

// DefaultBatchWindow is how many of a batch's publishes wait for their acks at once
// when BatchOptions.Window is 0.
const DefaultBatchWindow = 1000

// MaxBatchWindow bounds BatchOptions.Window: the client's JetStream context lets 4,000
// asynchronous publishes wait for their acks at once, shared by every PublishAsync and
// batch of the store, and a publish over that limit fails after a short stall.
const MaxBatchWindow = 2000

// BatchMsg is one message of a batch: the conversation it is appended to, the message
// and, optionally, its MsgID.
type BatchMsg struct {
	Conv    string
	Message schemas.Message
	// MsgID, when set, makes the publish idempotent as MsgID does: a batch published
	// again with the same ids (after an error, or a lost answer) stores each message
	// once, and each gets its first copy's sequence.
	MsgID string
}

// BatchOptions configures PublishBatch.
type BatchOptions struct {
	// Window is the most publishes waiting for their acks at once: 0 is
	// DefaultBatchWindow, more than MaxBatchWindow is MaxBatchWindow.
	Window int
}

// BatchError is PublishBatch's error: the first message of the batch (in its order)
// that was not stored, or whose outcome is not known.
type BatchError struct {
	// Index is the message's position in the batch, Conv its conversation.
	Index int
	Conv  string
	// Err is the message's error, as Publish would return it.
	Err error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("batch message %d (conversation %s): %v", e.Index, e.Conv, e.Err)
}

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// PublishBatch publishes msgs, each checked as Publish checks it, in their order, with
// up to opts.Window of them waiting for their acks at once, and returns once every
// publish it made has its outcome. seqs[i] is the stream sequence of msgs[i], 0 when it
// was not stored or its outcome is not known (ctx ended, or its ack did not come within
// jetstream.PublishAsyncTimeout, before its ack came: it may be stored). The messages of one conversation are stored in their order in the
// batch (they go out in order on the client's connection), and the messages of many
// conversations may be mixed in one batch.
//
// The first message that fails (invalid, a tool message that answers no open call, or
// refused by the stream) stops the batch: no message after it is published, those
// already in flight are waited for, and the error is a *BatchError naming it (it
// matches the message's own error, e.g. schemas.ErrInvalid). A message the client
// refuses leaves every message before it stored and none after it. A message the stream
// refused, or did not answer in time, may have later messages in flight, and those may
// be stored: seqs tells which were. Give each message a MsgID to make the whole batch
// safe to publish again after an error (what was stored keeps its sequence; a message
// stored only then comes after the later messages stored the first time, so a tool call
// the stream refused can end up after results of it stored the first time, which readers
// treat as results without their call). Without ids, a batch whose error is not a
// refusal by the client or the stream (a done ctx, a timeout) cannot tell a message
// stored from one lost: publish again with ids, or read the conversation first.
//
// A batch waits for the acks itself, on the caller's goroutine, in the order it
// published, which is the order they come in; a done ctx stops it like a failure.
func (c *Client) PublishBatch(ctx context.Context, msgs []BatchMsg, opts BatchOptions) (seqs []uint64, err error) {
	window := opts.Window
	if window <= 0 {
		window = DefaultBatchWindow
	}
	window = min(window, MaxBatchWindow, max(len(msgs), 1))
	b := batch{c: c, ctx: ctx, seqs: make([]uint64, len(msgs)), ring: make([]batchFlight, window)}
	next, stop := encodeAhead(msgs)
	defer stop()
	for i := range msgs {
		if b.n == window {
			b.settleOldest()
		}
		if b.first != nil {
			break // an earlier message failed: none after it goes out
		}
		bm := &msgs[i]
		if err := ctx.Err(); err != nil {
			b.fail(i, bm.Conv, err)
			break
		}
		p, err := b.publish(bm, <-next)
		if err != nil {
			b.fail(i, bm.Conv, err)
			break
		}
		b.push(batchFlight{index: i, inFlight: p})
	}
	for b.n > 0 {
		b.settleOldest()
	}
	if b.first != nil {
		return b.seqs, b.first
	}
	return b.seqs, nil
}

// encodeAhead is how far the checks and encodings of a batch's messages may run ahead
// of its publishes.
const encodeAheadBy = 256

// encoded is a batch message checked on its own and encoded (encodeChecked).
type encoded struct {
	data []byte
	err  error
	// panicked is what checking or encoding the message panicked with: the caller's
	// goroutine panics with it, as it would have without the goroutine.
	panicked any
}

// encodeAhead checks and encodes msgs in their order on a goroutine of its own, up to
// encodeAheadBy messages ahead of the batch's publishes, so that the CPU work of the
// next messages overlaps the publishing of the earlier ones (on the caller's goroutine,
// which also checks each message against its conversation's tool calls, in order).
// stop ends the goroutine and returns once it has: no message is read after
// PublishBatch returns.
func encodeAhead(msgs []BatchMsg) (next <-chan encoded, stop func()) {
	out := make(chan encoded, encodeAheadBy)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range msgs {
			select {
			case out <- encodeOne(&msgs[i]):
			case <-quit:
				return
			}
		}
	}()
	return out, func() {
		close(quit)
		<-done
	}
}

// encodeOne checks and encodes bm, and catches a panic doing it.
func encodeOne(bm *BatchMsg) (e encoded) {
	defer func() {
		if v := recover(); v != nil {
			e = encoded{panicked: v}
		}
	}()
	e.data, e.err = encodeChecked(bm.Conv, &bm.Message)
	return e
}

// publish publishes bm, e its encoding, without waiting for the ack.
func (b *batch) publish(bm *BatchMsg, e encoded) (inFlight, error) {
	if e.panicked != nil {
		panic(e.panicked)
	}
	if e.err != nil {
		return inFlight{}, e.err
	}
	po := publishOptions{msgID: bm.MsgID}
	data, err := b.c.admit(b.ctx, bm.Conv, &bm.Message, &po, e.data)
	if err != nil {
		return inFlight{}, err
	}
	return b.c.send(bm.Conv, &bm.Message, po, data)
}

// batch is a PublishBatch under way: its publishes in flight, oldest first, in a ring.
type batch struct {
	c    *Client
	ctx  context.Context
	seqs []uint64
	// ring holds n publishes in flight from head on.
	ring    []batchFlight
	head, n int
	first   *BatchError
}

type batchFlight struct {
	index int
	inFlight
}

func (b *batch) push(f batchFlight) {
	b.ring[(b.head+b.n)%len(b.ring)] = f
	b.n++
}

// settleOldest waits for the oldest publish in flight and records its outcome.
func (b *batch) settleOldest() {
	f := b.ring[b.head]
	b.ring[b.head] = batchFlight{}
	b.head, b.n = (b.head+1)%len(b.ring), b.n-1
	ack := b.c.settle(b.ctx, f.inFlight)
	b.seqs[f.index] = ack.Seq
	if ack.Err != nil {
		b.fail(f.index, f.conv, ack.Err)
	}
}

// fail records message i's error; the first in the batch's order is kept.
func (b *batch) fail(i int, conv string, err error) {
	if b.first == nil || i < b.first.Index {
		b.first = &BatchError{Index: i, Conv: conv, Err: err}
	}
}
