package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

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

// ErrBusy is matched by a 503 answer of the compactor service: it cannot take the
// request now (too many compactions waiting for their outcome, or the instance is
// stopping) and nothing was done; retry later.
var ErrBusy = errors.New("the compactor service is busy")

// ServiceError is an error answer of the compactor service. A 400 (bad input; the
// description names the field and the rule) matches schemas.ErrInvalid, a 404 (the
// conversation has nothing stored) ErrNotFound, a 503 (retry later) ErrBusy.
type ServiceError struct {
	Subject     string
	Code        int
	Description string
}

func (e *ServiceError) Error() string {
	return fmt.Sprintf("%s: %s (code %d)", e.Subject, e.Description, e.Code)
}

// Is makes a 400 match schemas.ErrInvalid, a 404 ErrNotFound and a 503 ErrBusy.
func (e *ServiceError) Is(target error) bool {
	return target == schemas.ErrInvalid && e.Code == 400 || target == ErrNotFound && e.Code == 404 ||
		target == ErrBusy && e.Code == 503
}

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
	var r CompactResponse
	err := c.call(ctx, CompactSubject, o.wait, schemas.CompactRequest{Conversation: conv, RequestID: o.requestID,
		Instructions: o.instructions, WaitMS: waitMS}, &r)
	if err == nil && c.svc != nil && r.Result != nil {
		if err := checkValue(CompactSubject, conv, r.Result.Conversation, r.Result); err != nil {
			return CompactResponse{}, err
		}
	}
	return r, err
}

// Policy asks the compactor service (compactor.policy) to read, change or clear a
// conversation's policy. The service checks the change against its own tiers
// (environment and profiles): the ones that will apply it.
func (c *Client) Policy(ctx context.Context, req schemas.PolicyRequest) (schemas.PolicyResponse, error) {
	var r schemas.PolicyResponse
	if err := req.Validate(); err != nil {
		return r, err
	}
	err := c.call(ctx, schemas.PolicySubject, 0, req, &r)
	return r, err
}

// ForgetResponse is the compactor service's answer to Forget: the sequence the
// conversation was forgotten through and what was deleted, by place.
type ForgetResponse = schemas.ForgetResponse

// Forget asks the compactor service (compactor.forget) to delete a conversation
// everywhere, for good: its messages, its value and history, policy, pending request,
// idle timer, events, dead letters and stored objects. Work in flight for it does not
// bring it back; messages published to the same id afterwards start a new
// conversation. Forgetting a conversation with nothing stored is no error (every count
// is 0). It returns ErrNoService when no compactor answers, and an error matching
// schemas.ErrInvalid for an invalid id (checked before anything is sent).
func (c *Client) Forget(ctx context.Context, conv string) (ForgetResponse, error) {
	var r ForgetResponse
	req := schemas.ForgetRequest{Conversation: conv}
	if err := req.Validate(); err != nil {
		return r, err
	}
	// A forget deletes from every stream and lists the objects bucket: it may take
	// longer than the other calls.
	err := c.call(ctx, schemas.ForgetSubject, time.Minute, req, &r)
	if err == nil && c.svc != nil && r.Conversation != conv {
		return ForgetResponse{}, badAnswer(schemas.ForgetSubject, "the answer is of conversation %q, not %q", r.Conversation, conv)
	}
	return r, err
}

// call sends one request to the compactor service and decodes its answer into out.
func (c *Client) call(ctx context.Context, subject string, wait time.Duration, in, out any) error {
	subject = c.serviceSubject(subject)
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+serviceTimeout)
		defer cancel()
	}
	ctx, cancel := c.refusable(ctx, func(s string) bool { return s == subject })
	defer cancel()
	m, err := c.nc.RequestWithContext(ctx, subject, body)
	if err = jetstream.PermissionCause(ctx, err); errors.Is(err, jetstream.ErrPermission) {
		return err
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("%w (%w)", ErrNoService, err)
		}
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		return &ServiceError{Subject: subject, Code: n, Description: m.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("%s: undecodable answer: %w", subject, err)
	}
	return nil
}

// serviceSubject is the subject of the service endpoint subject (compactor.<endpoint>)
// for this client: a client over a tenant's store (an operator in Compactor's account,
// COMPACTOR_TENANT) asks that tenant's service, on compactor.<tenant>.<endpoint>. A
// tenant's own users ask compactor.<endpoint>: their account's import adds the tenant.
func (c *Client) serviceSubject(subject string) string {
	if c.store == nil || c.store.Config().Tenant == "" {
		return subject
	}
	endpoint, ok := strings.CutPrefix(subject, schemas.ServiceName+".")
	if !ok {
		return subject
	}
	return schemas.ServiceName + "." + c.store.Config().Tenant + "." + endpoint
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
// Events already in COMPACT_EVENTS are read too, so an outcome that came before the
// call is not missed. A forgotten event (type schemas.EventForgotten: the conversation
// was forgotten meanwhile and no outcome will come) ends the wait too.
func (c *Client) WaitForOutcome(ctx context.Context, conv, requestID string) (schemas.Event, error) {
	if c.svc != nil {
		return schemas.Event{}, serviceModeError("WaitForOutcome", "the outcome of a compaction is an event of COMPACT_EVENTS, which the service does not serve; "+
			"ask with Compact and Wait instead")
	}
	return c.store.Events().WaitOutcome(ctx, conv, requestID, time.Time{})
}

// Result returns a conversation's current compaction value (nil when never compacted,
// or when the value is of a forgotten conversation: see Context).
func (c *Client) Result(ctx context.Context, conv string) (_ *schemas.Result, err error) {
	ctx, done := c.readable(ctx, c.conversationStreams()...)
	defer func() { err = done(err) }()
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, err
	}
	if c.svc != nil {
		cr, err := c.serviceValue(ctx, conv)
		if err != nil {
			return nil, err
		}
		return cr.Value, nil
	}
	v, _, err := c.liveValue(ctx, conv, false)
	return v, err
}
