package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// PublishOption configures one publish.
type PublishOption func(*publishOptions)

type publishOptions struct {
	msgID string
	// trace is the trace context of the caller's span, when its ctx has one.
	trace jetstream.TraceHeader
	// Set by offload for a message stored as an object: its object and when the client
	// began storing it (see keepObject).
	object     []byte
	objectName string
	storedFrom time.Time
	// expectLast, when set, is the sequence the conversation's newest message must be
	// at for the publish to be stored (ExpectLastSeq).
	expectLast *uint64
}

// ExpectLastSeq makes the publish conditional: it is stored only when the
// conversation's newest message is at seq (0: when the conversation has none), else it
// fails with an error matching jetstream.ErrWrongLastSeq and nothing is stored. Two
// writers that read the same newest message and append after it: only the first is
// stored. The expectation is checked before MsgID: a retry once the conversation moved
// on fails the same way. Publish only (not PublishAsync or PublishBatch), and not in
// service mode (ViaService): an error matching ErrServiceMode.
func ExpectLastSeq(seq uint64) PublishOption { return func(o *publishOptions) { o.expectLast = &seq } }

// MsgID makes the publish idempotent: a retry with the same id within the stream's
// duplicate window (2 minutes by default) is stored once.
func MsgID(id string) PublishOption { return func(o *publishOptions) { o.msgID = id } }

// Publish validates m and appends it to the conversation, returning its stream
// sequence (pass it to AtLeastSeq to read your own write). A tool message must answer
// an open call of the conversation's newest tool round. A retry with the MsgID of a
// stored message returns that message's sequence; a MsgID the stream had for another
// message (other content, or another conversation) is an error matching ErrDuplicate,
// and nothing is stored.
//
// A publish the server refuses (the user may not publish to the conversation's subject
// or store objects) fails at once with a *jetstream.PermissionError naming the subject.
func (c *Client) Publish(ctx context.Context, conv string, m schemas.Message, opts ...PublishOption) (uint64, error) {
	ctx, cancel := c.refusable(ctx, c.publishSubject(conv))
	defer cancel()
	po := applyOptions(opts)
	data, err := c.prepare(ctx, conv, &m, &po)
	if err != nil {
		return 0, jetstream.PermissionCause(ctx, err)
	}
	if beforeStubHook != nil && po.object != nil {
		beforeStubHook()
	}
	seq, err := c.publishChat(ctx, conv, data, po)
	if err != nil {
		c.forget(conv, m.Role)
		return 0, jetstream.PermissionCause(ctx, err)
	}
	if afterStubHook != nil && po.object != nil {
		afterStubHook()
	}
	if err := c.keepObject(ctx, conv, seq, po); err != nil {
		return seq, jetstream.PermissionCause(ctx, err)
	}
	return seq, nil
}

// publishSubject accepts the subjects a publish to conv sends to: the conversation's
// subject and the objects bucket's.
func (c *Client) publishSubject(conv string) func(string) bool {
	cfg := c.config()
	chat, _ := cfg.ChatSubject(conv)
	objects := "$O." + cfg.ObjectsBucket + "."
	return func(s string) bool { return s == chat || strings.HasPrefix(s, objects) }
}

// PubAck is the outcome of an asynchronous publish.
type PubAck struct {
	Seq uint64
	Err error
}

// PublishAsync validates m and publishes it without waiting; the returned channel
// yields the outcome once, at the latest when ctx is done or after
// jetstream.PublishAsyncTimeout. Checking a tool message against the stream may read the
// conversation first (unless this client published the call itself). The outcomes are
// waited for in publish order, by one goroutine of the client's, not one per publish:
// an outcome whose ack came may wait behind an earlier publish's, at most until that
// one's context ends or its ack times out. To publish many messages with many in
// flight, PublishBatch waits for their acks itself.
//
// A publish the server refuses (the user may not publish to the conversation's subject
// or store objects) yields a *jetstream.PermissionError naming the subject as soon as
// the refusal comes, not a timeout.
func (c *Client) PublishAsync(ctx context.Context, conv string, m schemas.Message, opts ...PublishOption) (<-chan PubAck, error) {
	refused, release := c.refusable(ctx, c.publishSubject(conv))
	p, err := c.publishAsync(refused, conv, &m, applyOptions(opts))
	if err != nil {
		err = jetstream.PermissionCause(refused, err)
		release()
		return nil, err
	}
	return c.enqueue(ctx, refused, release, p), nil
}

// inFlight is an asynchronous publish waiting for its ack.
type inFlight struct {
	conv string
	role schemas.Role
	data []byte
	po   publishOptions
	f    jetstream.PubAckFuture
}

// publishAsync prepares m and publishes it without waiting for the ack.
func (c *Client) publishAsync(ctx context.Context, conv string, m *schemas.Message, po publishOptions) (inFlight, error) {
	data, err := c.prepare(ctx, conv, m, &po)
	if err != nil {
		return inFlight{}, err
	}
	return c.send(conv, m, po, data)
}

// send publishes data, m prepared, without waiting for the ack.
func (c *Client) send(conv string, m *schemas.Message, po publishOptions, data []byte) (inFlight, error) {
	f, err := c.publishChatAsync(conv, data, po)
	if err != nil {
		c.forget(conv, m.Role)
		return inFlight{}, err
	}
	return inFlight{conv: conv, role: m.Role, data: data, po: po, f: f}, nil
}

// settle waits for p's outcome. nats.go resolves a future when an ack or an error comes,
// or after jetstream.PublishAsyncTimeout (the store's JetStream context sets it), also on
// a closed connection; ctx may end the wait sooner.
func (c *Client) settle(ctx context.Context, p inFlight) PubAck {
	var err error
	select { // an outcome already in is taken, whatever ctx says
	case ack := <-p.f.Ok():
		return c.acked(ctx, p, ack)
	case err = <-p.f.Err():
		return c.failed(p, err)
	default:
	}
	select {
	case ack := <-p.f.Ok():
		return c.acked(ctx, p, ack)
	case err = <-p.f.Err():
	case <-ctx.Done():
		err = ctx.Err()
	}
	return c.failed(p, err)
}

// acked is the outcome of p, whose ack came: a duplicate is told from a retry, and an
// offloaded message's object is kept.
func (c *Client) acked(ctx context.Context, p inFlight, ack *natsjs.PubAck) PubAck {
	if err := c.checkDuplicate(ctx, p.conv, p.data, p.po.msgID, ack); err != nil {
		return c.failed(p, err)
	}
	if err := c.keepObject(ctx, p.conv, ack.Sequence, p.po); err != nil {
		return PubAck{Seq: ack.Sequence, Err: err}
	}
	return PubAck{Seq: ack.Sequence}
}

// failed is the outcome of p, which was not stored (or may not have been).
func (c *Client) failed(p inFlight, err error) PubAck {
	c.forget(p.conv, p.role)
	switch {
	case errors.Is(err, ErrDuplicate):
	case errors.Is(err, natsjs.ErrAsyncPublishTimeout):
		err = fmt.Errorf("publish to %s: no ack within %s (the message may still be stored: retry with the same MsgID): %w",
			p.conv, jetstream.PublishAsyncTimeout, err)
	default:
		err = fmt.Errorf("publish to %s: %w", p.conv, err)
	}
	return PubAck{Err: err}
}

// ErrDuplicate is matched by the error of a publish whose MsgID the stream had for
// another message; the error is a *DuplicateError naming that message's sequence.
var ErrDuplicate = jetstream.ErrDuplicate

// DuplicateError is the error of a publish whose MsgID names another stored message.
type DuplicateError = jetstream.DuplicateError

// checkDuplicate tells a retry from a reuse of a MsgID when the ack says duplicate. In
// service mode it checks the ack first (checkAck) and asks the service (serviceDuplicate).
func (c *Client) checkDuplicate(ctx context.Context, conv string, data []byte, msgID string, ack *natsjs.PubAck) error {
	if c.svc != nil {
		if err := c.svc.checkAck(conv, ack); err != nil || !ack.Duplicate {
			return err
		}
		return c.serviceDuplicate(ctx, conv, data, msgID, ack.Sequence)
	}
	if !ack.Duplicate {
		return nil
	}
	return c.store.Chat().CheckDuplicate(ctx, conv, data, msgID, ack.Sequence)
}

// PublishAsyncComplete is closed when every asynchronous publish has been acked.
func (c *Client) PublishAsyncComplete() <-chan struct{} {
	if c.svc != nil {
		return c.svc.js.PublishAsyncComplete()
	}
	return c.store.Chat().PublishAsyncComplete()
}

// applyOptions collects a publish's options.
func applyOptions(opts []PublishOption) publishOptions {
	var po publishOptions
	for _, o := range opts {
		o(&po)
	}
	return po
}

// prepare checks m (on its own, then against the conversation's open tool calls) and
// encodes it once: the encoding's length is the size check, and a message over the
// inline limit is offloaded (its object stored, po told of it) and its stub returned.
func (c *Client) prepare(ctx context.Context, conv string, m *schemas.Message, po *publishOptions) ([]byte, error) {
	data, err := encodeChecked(conv, m)
	if err != nil {
		return nil, err
	}
	return c.admit(ctx, conv, m, po, data)
}

// encodeChecked checks m on its own (and conv's id) and encodes it. It reads nothing
// but its arguments, so a batch runs it ahead of the publishes (see PublishBatch).
func encodeChecked(conv string, m *schemas.Message) ([]byte, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	if m.ContentRef != nil {
		// A stub is made here, from the whole message, after its object is stored: one
		// handed in names an object this client never saw stored.
		return nil, &schemas.ValidationError{Field: "content_ref", Rule: "is set by the client for a message over the max payload; publish the whole message"}
	}
	return m.Encode()
}

// admit checks m, encoded as data by encodeChecked, against the conversation's open
// tool calls, in publish order, and offloads it when data is over the inline limit.
func (c *Client) admit(ctx context.Context, conv string, m *schemas.Message, po *publishOptions, data []byte) ([]byte, error) {
	po.trace = traceOf(ctx)
	if err := c.checkToolPairing(ctx, conv, m); err != nil {
		// A retry with the same MsgID of a tool result that was stored (its ack lost) is
		// the stream's to de-duplicate: it answers with the first copy's sequence.
		if po.msgID == "" || !errors.Is(err, errAnswered) {
			return nil, err
		}
	}
	limit := c.inlineLimit(po.msgID)
	if len(data) <= limit {
		return data, nil
	}
	if c.svc != nil {
		c.forget(conv, m.Role)
		return nil, c.tooLargeViaService(len(data), limit)
	}
	data, err := c.offload(ctx, conv, m, len(data), po)
	if err != nil {
		// What checkToolPairing learnt from m is not true of the stream: the next
		// check reads it.
		c.forget(conv, m.Role)
		return nil, err
	}
	return data, nil
}

// traceOf is the trace context of ctx's span, carried by the message to the trigger:
// the compaction the message leads to links to the publisher's trace.
func traceOf(ctx context.Context) jetstream.TraceHeader {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return jetstream.TraceHeader{}
	}
	h := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, h)
	return jetstream.TraceHeader{Parent: h["traceparent"], State: h["tracestate"]}
}

// ErrTooLarge is matched by the error of a message no publish can carry: over the
// server's max payload even with its content stored as an object (tool calls, name and
// metadata must fit), or with an object over jetstream.Config.MaxObjectSize.
var ErrTooLarge = jetstream.ErrTooLarge

// offload stores what makes m large (its content, reasoning, extra and unknown fields)
// as an object and returns the stub to publish in its place, which keeps role, name,
// tool calls, tool_call_id and metadata and names the object. The object is stored
// before the stub is published, so a reader never sees a stub before its object; a
// retry stores nothing twice (its name is its content's hash).
func (c *Client) offload(ctx context.Context, conv string, m *schemas.Message, size int, po *publishOptions) ([]byte, error) {
	limit := c.store.Objects().InlineLimit(po.msgID)
	cfg := c.store.Config()
	stub, object, err := m.Offload(conv, cfg.ObjectsBucket, tokens.Stored(m))
	if err != nil {
		return nil, err
	}
	data, err := stub.Encode()
	if err != nil {
		return nil, err
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: the message is %d bytes, over the limit of %d bytes (the server's max_payload %d less %d for headers), "+
			"and still %d bytes with its content stored as an object: its tool calls, name and metadata must fit in the limit",
			ErrTooLarge, size, limit, c.store.MaxPayload(), c.store.MaxPayload()-int64(limit), len(data))
	}
	if int64(len(object)) > cfg.MaxObjectSize {
		return nil, fmt.Errorf("%w: the message is %d bytes, over the limit of %d bytes (the server's max_payload), "+
			"and its content of %d bytes is over the max object size of %d bytes", ErrTooLarge, size, limit, len(object), cfg.MaxObjectSize)
	}
	po.storedFrom = time.Now()
	if err := c.store.Objects().Put(ctx, conv, stub.ContentRef.Name, object); err != nil {
		return nil, err
	}
	po.object, po.objectName = object, stub.ContentRef.Name
	return data, nil
}

// beforeStubHook, when set (by a test), runs between storing an offloaded message's
// object and publishing its stub.
var beforeStubHook func()

// afterStubHook, when set (by a test), runs between publishing an offloaded message's
// stub and keeping its object (keepObject).
var afterStubHook func()

// keepObject runs after the stub of an offloaded message is stored, at seq. Put stores
// nothing when the bucket holds the same object already; a forget of the conversation
// that began since (its tombstone newer than the store began, with a minute's margin
// for the clocks) may delete that object after the stub is published, and the new
// message would lose its content. Then the object is stored again: Put writes it anew,
// after the tombstone, which the forget leaves. A retry of the publish with the same
// MsgID does the same. Unless the tombstone covers the stub: that forget took the
// message too, and its content must not outlive it (stored again, nothing would ever
// delete it before its age limit).
func (c *Client) keepObject(ctx context.Context, conv string, seq uint64, po publishOptions) error {
	if po.object == nil {
		return nil
	}
	tomb, err := c.store.Objects().ForgetSince(ctx, conv, po.storedFrom.Add(-time.Minute))
	switch {
	case err != nil:
		return fmt.Errorf("the message is stored, but whether a forget of %s deleted its object meanwhile cannot be told (publish it again with the same MsgID): %w", conv, err)
	case tomb == nil || tomb.Covers(seq):
		return nil
	}
	if err := c.store.Objects().Put(ctx, conv, po.objectName, po.object); err != nil {
		return fmt.Errorf("the message is stored, but its object may be lost to the forget of %s that ran meanwhile (publish it again with the same MsgID): %w", conv, err)
	}
	return nil
}

// ErrToolResultWithoutCall is matched by the error for a tool message whose call is not
// open in the conversation.
var ErrToolResultWithoutCall = errors.New("tool message answers no open tool call")

// checkToolPairing keeps the client's view of the open tool calls and refuses a tool
// message that answers none. When the client did not see the call itself, it reads
// the conversation's tail.
func (c *Client) checkToolPairing(ctx context.Context, conv string, m *schemas.Message) error {
	switch {
	case m.Role == schemas.RoleAssistant:
		c.newRound(conv, m.ToolCalls)
		return nil
	case m.Role != schemas.RoleTool:
		return nil
	}
	// The client's own view settles the common case (it published the call); an id it
	// does not know may belong to a round another client published, so the stream decides.
	if oc := c.lookup(conv); oc != nil {
		if err := c.answer(oc, m.ToolCallID); err == nil || !errors.Is(err, errUnknownCall) {
			return err
		}
	}
	oc, err := c.openCallsFromStream(ctx, conv, m.ToolCallID)
	if err != nil {
		return err
	}
	c.remember(oc)
	return c.answer(oc, m.ToolCallID)
}

var (
	errUnknownCall = errors.New("unknown call")
	errAnswered    = errors.New("answered")
)

func (c *Client) answer(oc *openCalls, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	answered, ok := oc.answered[id]
	switch {
	case !ok:
		return &schemas.ValidationError{Field: "tool_call_id",
			Rule:  fmt.Sprintf("%q answers no tool call of the conversation's newest assistant tool round", id),
			Cause: errors.Join(ErrToolResultWithoutCall, errUnknownCall)}
	case answered:
		return &schemas.ValidationError{Field: "tool_call_id",
			Rule: fmt.Sprintf("tool call %q was already answered", id), Cause: errors.Join(ErrToolResultWithoutCall, errAnswered)}
	}
	oc.answered[id] = true
	return nil
}

// openCallsFromStream reads the conversation's tail to find the newest tool round. In
// service mode it reads nothing (unseenCall): the service shows no open round.
func (c *Client) openCallsFromStream(ctx context.Context, conv string, id string) (*openCalls, error) {
	if c.svc != nil {
		return unseenCall(conv, id), nil
	}
	from := uint64(1)
	v, _, err := c.store.Results().Get(ctx, conv, true)
	if err != nil {
		return nil, err
	}
	if v != nil && v.TailStartSeq > 0 {
		from = v.TailStartSeq
	}
	// Through the newest message the stream leader knows: a direct get may be answered
	// by a replica still catching up (a failover), and a call it does not hold yet
	// would refuse a valid tool message for good.
	last, err := c.store.Chat().LastSeq(ctx, conv)
	if err != nil {
		return nil, err
	}
	var es []schemas.Entry
	if last >= from {
		if es, err = c.store.Chat().LoadEntriesThrough(ctx, conv, from, last); err != nil {
			return nil, err
		}
	}
	oc := &openCalls{conv: conv, answered: map[string]bool{}}
	for i := range es {
		m := &es[i].Message
		switch {
		case es[i].Err != nil:
		case m.HasToolCalls():
			oc.answered = make(map[string]bool, len(m.ToolCalls))
			for _, tc := range m.ToolCalls {
				oc.answered[tc.ID] = false
			}
		case m.Role == schemas.RoleTool:
			if _, ok := oc.answered[m.ToolCallID]; ok {
				oc.answered[m.ToolCallID] = true
			}
		case m.Role == schemas.RoleAssistant:
			oc.answered = map[string]bool{}
		}
	}
	return oc, nil
}

// newRound makes calls (none, for an assistant message that calls no tool) the open
// calls of conv, in place when the client tracks conv already: the steady state of a
// publisher allocates nothing here.
func (c *Client) newRound(conv string, calls []schemas.ToolCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.calls[conv]
	if !ok {
		oc := &openCalls{conv: conv}
		c.rememberLocked(oc)
		el = c.calls[conv]
	}
	oc := el.Value.(*openCalls)
	clear(oc.answered)
	if oc.answered == nil && len(calls) > 0 {
		oc.answered = make(map[string]bool, len(calls))
	}
	for _, tc := range calls {
		oc.answered[tc.ID] = false
	}
	c.lru.MoveToFront(el)
}

func (c *Client) remember(oc *openCalls) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rememberLocked(oc)
}

func (c *Client) rememberLocked(oc *openCalls) {
	if el, ok := c.calls[oc.conv]; ok {
		el.Value = oc
		c.lru.MoveToFront(el)
		return
	}
	c.calls[oc.conv] = c.lru.PushFront(oc)
	for c.lru.Len() > maxTrackedConversations {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.calls, old.Value.(*openCalls).conv)
	}
}

func (c *Client) lookup(conv string) *openCalls {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.calls[conv]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*openCalls)
	}
	return nil
}

// forget drops what a failed publish taught the client; the next check reads the stream.
func (c *Client) forget(conv string, role schemas.Role) {
	if role != schemas.RoleTool && role != schemas.RoleAssistant {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.calls[conv]; ok {
		c.lru.Remove(el)
		delete(c.calls, conv)
	}
}
