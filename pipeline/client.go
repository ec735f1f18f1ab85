package pipeline

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
)

// Client publishes chat events, reads compacted context and asks for compactions. It is
// safe for concurrent use.
type Client struct {
	store *jetstream.Store

	mu    sync.Mutex
	calls map[string]*list.Element // conversation → its open tool calls
	lru   *list.List
}

// maxTrackedConversations bounds the client's memory of open tool calls.
const maxTrackedConversations = 10000

type openCalls struct {
	conv     string
	answered map[string]bool // call id → answered
}

// Option configures a Client.
type Option func(*options)

type options struct {
	cfg       jetstream.Config
	provision bool
}

// WithConfig uses other stream, subject and bucket names than the contract's defaults.
func WithConfig(cfg jetstream.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithProvision creates or updates the streams and buckets at start instead of
// expecting a running compactor to have done it.
func WithProvision() Option { return func(o *options) { o.provision = true } }

// New binds a client to a NATS connection. By default it expects the streams and
// buckets to exist (a compactor serving the same NATS creates them).
func New(ctx context.Context, nc *nats.Conn, opts ...Option) (*Client, error) {
	o := options{cfg: jetstream.DefaultConfig()}
	for _, opt := range opts {
		opt(&o)
	}
	var (
		st  *jetstream.Store
		err error
	)
	if o.provision {
		st, err = jetstream.Provision(ctx, nc, o.cfg)
	} else {
		st, err = jetstream.Open(ctx, nc, o.cfg)
	}
	if err != nil {
		return nil, err
	}
	return NewWithStore(st), nil
}

// NewWithStore returns a client over an existing store.
func NewWithStore(st *jetstream.Store) *Client {
	return &Client{store: st, calls: map[string]*list.Element{}, lru: list.New()}
}

// PublishOption configures one publish.
type PublishOption func(*publishOptions)

type publishOptions struct{ msgID string }

// MsgID makes the publish idempotent: a retry with the same id within the stream's
// duplicate window (2 minutes by default) is stored once.
func MsgID(id string) PublishOption { return func(o *publishOptions) { o.msgID = id } }

// Publish validates m and appends it to the conversation, returning its stream
// sequence (pass it to AtLeastSeq to read your own write). A tool message must answer
// an open call of the conversation's newest tool round.
func (c *Client) Publish(ctx context.Context, conv string, m schemas.Message, opts ...PublishOption) (uint64, error) {
	data, po, err := c.prepare(ctx, conv, &m, opts)
	if err != nil {
		return 0, err
	}
	seq, err := c.store.PublishMessage(ctx, conv, data, po.msgID)
	if err != nil {
		c.forget(conv, &m)
		return 0, err
	}
	return seq, nil
}

// PubAck is the outcome of an asynchronous publish.
type PubAck struct {
	Seq uint64
	Err error
}

// PublishAsync validates m and publishes it without waiting; the returned channel
// yields the outcome once. Checking a tool message against the stream may read the
// conversation first (unless this client published the call itself).
func (c *Client) PublishAsync(ctx context.Context, conv string, m schemas.Message, opts ...PublishOption) (<-chan PubAck, error) {
	data, po, err := c.prepare(ctx, conv, &m, opts)
	if err != nil {
		return nil, err
	}
	f, err := c.store.PublishMessageAsync(conv, data, po.msgID)
	if err != nil {
		c.forget(conv, &m)
		return nil, err
	}
	out := make(chan PubAck, 1)
	go func() {
		select {
		case ack := <-f.Ok():
			out <- PubAck{Seq: ack.Sequence}
		case err := <-f.Err():
			c.forget(conv, &m)
			out <- PubAck{Err: fmt.Errorf("publish to %s: %w", conv, err)}
		}
	}()
	return out, nil
}

// PublishAsyncComplete is closed when every asynchronous publish has been acked.
func (c *Client) PublishAsyncComplete() <-chan struct{} { return c.store.PublishAsyncComplete() }

func (c *Client) prepare(ctx context.Context, conv string, m *schemas.Message, opts []PublishOption) ([]byte, publishOptions, error) {
	var po publishOptions
	for _, o := range opts {
		o(&po)
	}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, po, err
	}
	if err := m.Validate(); err != nil {
		return nil, po, err
	}
	if err := c.checkToolPairing(ctx, conv, m); err != nil {
		// A retry with the same MsgID of a tool result that was stored (its ack lost) is
		// the stream's to de-duplicate: it answers with the first copy's sequence.
		if po.msgID == "" || !errors.Is(err, errAnswered) {
			return nil, po, err
		}
	}
	data, err := m.Encode()
	if err != nil {
		return nil, po, err
	}
	return data, po, nil
}

// ErrToolResultWithoutCall is matched by the error for a tool message whose call is not
// open in the conversation.
var ErrToolResultWithoutCall = errors.New("tool message answers no open tool call")

// checkToolPairing keeps the client's view of the open tool calls and refuses a tool
// message that answers none. When the client did not see the call itself, it reads
// the conversation's tail.
func (c *Client) checkToolPairing(ctx context.Context, conv string, m *schemas.Message) error {
	switch {
	case m.HasToolCalls():
		oc := &openCalls{conv: conv, answered: make(map[string]bool, len(m.ToolCalls))}
		for _, tc := range m.ToolCalls {
			oc.answered[tc.ID] = false
		}
		c.remember(oc)
		return nil
	case m.Role == schemas.RoleAssistant:
		c.remember(&openCalls{conv: conv})
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
	oc, err := c.openCallsFromStream(ctx, conv)
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

// openCallsFromStream reads the conversation's tail to find the newest tool round.
func (c *Client) openCallsFromStream(ctx context.Context, conv string) (*openCalls, error) {
	from := uint64(1)
	v, _, err := c.store.GetResult(ctx, conv, true)
	if err != nil {
		return nil, err
	}
	if v != nil && v.TailStartSeq > 0 {
		from = v.TailStartSeq
	}
	es, err := c.store.LoadEntries(ctx, conv, from, 0)
	if err != nil {
		return nil, err
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

func (c *Client) remember(oc *openCalls) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
func (c *Client) forget(conv string, m *schemas.Message) {
	if m.Role != schemas.RoleTool && m.Role != schemas.RoleAssistant {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.calls[conv]; ok {
		c.lru.Remove(el)
		delete(c.calls, conv)
	}
}

// ContextOption configures a read.
type ContextOption func(*contextOptions)

type contextOptions struct {
	atLeast     uint64
	raw         bool
	maxTokens   int
	waitPending time.Duration
}

// AtLeastSeq makes the read include sequence n (the one a Publish returned): it
// retries, falling back to the stream leader, until the tail covers n. Read-your-writes.
func AtLeastSeq(n uint64) ContextOption { return func(o *contextOptions) { o.atLeast = n } }

// Raw keeps Compactor's metadata (tokens, usage, context_generation, meta) on messages.
func Raw() ContextOption { return func(o *contextOptions) { o.raw = true } }

// MaxTokens cuts the context at read time to fit n tokens (deterministic; the result is
// flagged Degraded).
func MaxTokens(n int) ContextOption { return func(o *contextOptions) { o.maxTokens = n } }

// WaitPending makes the read wait, up to d, for the outcome of a compaction that is
// pending or running for the conversation, then read. Without it Context never waits
// for a compaction: with compaction ahead of time (soft_threshold) the result is usually
// in KV before it is needed.
func WaitPending(d time.Duration) ContextOption { return func(o *contextOptions) { o.waitPending = d } }

// Context is what a model should be sent for a conversation.
type Context = assemble.Context

// ErrNotCovered means an AtLeastSeq read could not see the sequence it asked for.
var ErrNotCovered = errors.New("read does not cover the requested sequence")

// Context reads "pinned + summary + tail" for a conversation: the reader algorithm of
// the README, the same in every language.
func (c *Client) Context(ctx context.Context, conv string, opts ...ContextOption) (*Context, error) {
	var o contextOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if o.waitPending > 0 {
		if err := c.waitPending(ctx, conv, o.waitPending); err != nil {
			return nil, err
		}
	}
	leader := false
	for attempt := 0; ; attempt++ {
		v, _, err := c.store.GetResult(ctx, conv, leader)
		if err != nil {
			return nil, err
		}
		in := assemble.Input{Value: v}
		if v != nil {
			if in.Pinned, err = c.store.LoadPinned(ctx, v.PinnedSeqs); err != nil {
				return nil, err
			}
		}
		from := uint64(1)
		if v != nil && v.TailStartSeq > 0 {
			from = v.TailStartSeq
		}
		var msgs []jetstream.StoredMsg
		if leader {
			msgs, err = c.store.LoadConversationLeader(ctx, conv, from, 0)
		} else {
			msgs, err = c.store.LoadConversation(ctx, conv, from, 0)
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

// waitPending waits up to d for the outcome of the conversation's pending request, if
// it has one. Running out of time is not an error: the read then shows the context as
// it is.
func (c *Client) waitPending(ctx context.Context, conv string, d time.Duration) error {
	req, err := c.store.PendingRequest(ctx, conv)
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

// Statuses of a compaction request, as the compactor service answers them
// (schemas.CompactQueued, ...).
const (
	StatusQueued    = schemas.CompactQueued
	StatusBusy      = schemas.CompactBusy
	StatusCompleted = schemas.CompactCompleted
	StatusDeclined  = schemas.CompactDeclined
	StatusFailed    = schemas.CompactFailed
)

// CompactSubject is the endpoint of the compactor service (NATS micro) that queues
// compactions.
const CompactSubject = schemas.CompactSubject

// ErrNoService is matched when no compactor service answers: no `compactor serve` is
// running on this NATS.
var ErrNoService = errors.New("no compactor service answered on " + CompactSubject +
	": run `compactor serve` (any COMPACTOR_ROLES) against this NATS")

// ServiceError is an error answer of the compactor service. A 400 (bad input; the
// description names the field and the rule) matches schemas.ErrInvalid.
type ServiceError struct {
	Subject     string
	Code        int
	Description string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("%s: %s (code %d)", e.Subject, e.Description, e.Code)
}

// Is makes a 400 match schemas.ErrInvalid.
func (e *ServiceError) Is(target error) bool { return target == schemas.ErrInvalid && e.Code == 400 }

// CompactOption configures one Compact call.
type CompactOption func(*compactOptions)

type compactOptions struct {
	instructions string
	requestID    string
	wait         time.Duration
}

// Instructions are extra wishes for the summarizer (data, never overriding its rules).
func Instructions(s string) CompactOption { return func(o *compactOptions) { o.instructions = s } }

// Wait waits up to d for the request's outcome (the service caps it, 5 minutes by
// default); without it Compact answers as soon as the request is queued.
func Wait(d time.Duration) CompactOption { return func(o *compactOptions) { o.wait = d } }

// RequestID names the request (1-128 characters of [A-Za-z0-9_-]) instead of a new
// random id. Sending the same id again within the queue's duplicate window (2 minutes)
// is a retry of the same request, not a second one.
func RequestID(id string) CompactOption { return func(o *compactOptions) { o.requestID = id } }

// CompactResponse is the compactor service's answer to a compaction request. Status
// is queued, busy (a request was already pending: this one, with its instructions, was
// NOT queued; ask again when the pending one completes), or with Wait the outcome:
// completed (with the KV value in Result), declined or failed. For busy, RequestID is
// the pending request's, whose outcome WaitForOutcome can wait for.
type CompactResponse = schemas.CompactResponse

// serviceTimeout is how long a call waits for the service beyond its own wait.
const serviceTimeout = 15 * time.Second

// Compact asks the compactor service (compactor.compact) for a manual compaction of
// conv and returns its answer. With Wait it answers once the request has an outcome.
// It returns ErrNoService when no compactor answers, and a *ServiceError matching
// schemas.ErrInvalid for bad input.
func (c *Client) Compact(ctx context.Context, conv string, opts ...CompactOption) (CompactResponse, error) {
	var o compactOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return CompactResponse{}, err
	}
	if o.wait < 0 {
		return CompactResponse{}, &schemas.ValidationError{Field: "wait_ms", Rule: "must not be negative"}
	}
	waitMS := o.wait.Milliseconds()
	if o.wait > 0 && waitMS == 0 {
		waitMS = 1
	}
	body, err := json.Marshal(schemas.CompactRequest{Conversation: conv, RequestID: o.requestID,
		Instructions: o.instructions, WaitMS: waitMS})
	if err != nil {
		return CompactResponse{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.wait+serviceTimeout)
		defer cancel()
	}
	m, err := c.store.Conn().RequestWithContext(ctx, CompactSubject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return CompactResponse{}, fmt.Errorf("%w (%w)", ErrNoService, err)
		}
		return CompactResponse{}, fmt.Errorf("%s: %w", CompactSubject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return CompactResponse{}, &ServiceError{Subject: CompactSubject, Code: n, Description: m.Header.Get(micro.ErrorHeader)}
	}
	var r CompactResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return CompactResponse{}, fmt.Errorf("%s: undecodable answer: %w", CompactSubject, err)
	}
	return r, nil
}

// CompactionRequest is the answer to RequestCompaction.
type CompactionRequest struct {
	// Status is queued, or busy when a request is already pending for the conversation
	// (the instructions were not queued; ask again when it completes).
	Status string
	// RequestID is the queued request's id; for busy, the pending request's (when known).
	RequestID string
}

// RequestCompaction queues a manual compaction with optional instructions for the
// summarizer through the compactor service. It does not wait; WaitForOutcome does (or
// Compact with Wait).
func (c *Client) RequestCompaction(ctx context.Context, conv, instructions string) (CompactionRequest, error) {
	r, err := c.Compact(ctx, conv, Instructions(instructions))
	if err != nil {
		return CompactionRequest{}, err
	}
	return CompactionRequest{Status: r.Status, RequestID: r.RequestID}, nil
}

// WaitForOutcome waits for the completed, declined or failed event of a request.
// Subscribe before the outcome can happen: call it right after RequestCompaction; events
// already in COMPACT_EVENTS are read too, so a fast outcome is not missed.
func (c *Client) WaitForOutcome(ctx context.Context, conv, requestID string) (schemas.Event, error) {
	cfg := c.store.Config()
	oc, err := c.store.JetStream().OrderedConsumer(ctx, cfg.EventsStream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.EventSubject(conv)},
		DeliverPolicy:  natsjs.DeliverAllPolicy,
	})
	if err != nil {
		return schemas.Event{}, fmt.Errorf("watch events of %s: %w", conv, err)
	}
	// Every event of the conversation is read, so an outcome that came first is not missed.
	it, err := oc.Messages()
	if err != nil {
		return schemas.Event{}, fmt.Errorf("watch events of %s: %w", conv, err)
	}
	defer it.Stop()
	results := make(chan schemas.Event, 1)
	errs := make(chan error, 1)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				errs <- err
				return
			}
			var ev schemas.Event
			if json.Unmarshal(m.Data(), &ev) != nil || ev.RequestID != requestID {
				continue
			}
			switch ev.Type {
			case schemas.EventCompleted, schemas.EventDeclined, schemas.EventFailed:
				results <- ev
				return
			}
		}
	}()
	select {
	case ev := <-results:
		return ev, nil
	case err := <-errs:
		return schemas.Event{}, err
	case <-ctx.Done():
		return schemas.Event{}, ctx.Err()
	}
}

// Result returns a conversation's current compaction value (nil when never compacted).
func (c *Client) Result(ctx context.Context, conv string) (*schemas.Result, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	v, _, err := c.store.GetResult(ctx, conv, false)
	return v, err
}
