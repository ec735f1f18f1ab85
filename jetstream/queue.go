package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Queue is the handle on the work queue, the compaction requests: it queues them,
// reads the one pending for a conversation and the conversations with one, and hands
// them to the workers. Store.Queue returns it.
type Queue struct{ *core }

// ErrRequestPending means a request for the conversation already waits in the queue.
var ErrRequestPending = errors.New("a compaction request is already pending")

// errCodeStoreFailed is the server's JSStreamStoreFailedF: storing a message failed,
// the description saying why. With DiscardNew per subject, "maximum messages per
// subject exceeded" is the queue's answer while a request is pending.
const errCodeStoreFailed natsjs.ErrorCode = 10077

// maxPerSubjectDescription is the server's text for a per-subject limit reached.
const maxPerSubjectDescription = "maximum messages per subject exceeded"

// isRequestPending tells the queue's "one is pending" refusal from any other error,
// by the API error code and the server's description of the cause.
func isRequestPending(err error) bool {
	var apiErr *natsjs.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed &&
		apiErr.Description == maxPerSubjectDescription
}

// Enqueue puts a request on the work queue and returns its queue sequence. It returns
// ErrRequestPending when one already waits for the conversation (the queue keeps at
// most one per conversation); with a sequence > 0 when it is this very request (its id
// was seen within the duplicate window). Any other error is an error.
func (qu *Queue) Enqueue(ctx context.Context, req schemas.Request) (uint64, error) {
	return qu.EnqueueWithHeader(ctx, req, nil)
}

// EnqueueWithHeader is Enqueue with headers on the request message besides the
// contract's own: a trace context (W3C traceparent, tracestate) that a worker carries
// on. A key that is not a plain header token, one of the server's (Nats-…), or a value
// that would break the header block is refused.
func (qu *Queue) EnqueueWithHeader(ctx context.Context, req schemas.Request, header map[string]string) (uint64, error) {
	if err := req.Validate(); err != nil {
		return 0, err
	}
	subj, err := qu.cfg.RequestSubject(req.Conversation)
	if err != nil {
		return 0, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	msg := &nats.Msg{Subject: subj, Data: data}
	if len(header) > 0 {
		msg.Header = nats.Header{}
		for k, v := range header {
			if err := checkHeader(k, v); err != nil {
				return 0, fmt.Errorf("queue compaction of %s: %w", req.Conversation, err)
			}
			msg.Header.Set(k, v)
		}
	}
	ack, err := qu.js.PublishMsg(ctx, msg, natsjs.WithMsgID(req.RequestID), natsjs.WithExpectStream(qu.cfg.RequestsStream))
	if err != nil {
		if isRequestPending(err) {
			return 0, ErrRequestPending
		}
		return 0, fmt.Errorf("queue compaction of %s: %w", req.Conversation, err)
	}
	if ack.Duplicate {
		return ack.Sequence, ErrRequestPending
	}
	return ack.Sequence, nil
}

// maxHeaderValue bounds one value EnqueueWithHeader adds (a tracestate is at most 512
// characters by the W3C's rule).
const maxHeaderValue = 1024

// checkHeader refuses a header that is not a plain token key with a printable value,
// or that is the server's own.
func checkHeader(k, v string) error {
	if k == "" || len(k) > 64 || strings.HasPrefix(strings.ToLower(k), "nats-") {
		return fmt.Errorf("header %q is not one a request may carry", k)
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("header %q is not one a request may carry", k)
		}
	}
	if len(v) > maxHeaderValue {
		return fmt.Errorf("header %s: value over %d bytes", k, maxHeaderValue)
	}
	for _, c := range []byte(v) {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("header %s: value holds a control character", k)
		}
	}
	return nil
}

// Pending returns the request waiting (or being worked on) for a conversation,
// nil when there is none. A pending message that does not decode, is invalid or names
// another conversation is an error (the worker dead-letters it).
func (qu *Queue) Pending(ctx context.Context, conv string) (*schemas.Request, error) {
	subj, err := qu.cfg.RequestSubject(conv)
	if err != nil {
		return nil, err
	}
	m, err := qu.leaderGet(ctx, qu.cfg.RequestsStream, map[string]any{"last_by_subj": subj})
	if errors.Is(err, errNoMessage) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pending request of %s: %w", conv, err)
	}
	var r schemas.Request
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("decode the pending request of %s: %w", conv, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("the pending request of %s: %w", conv, err)
	}
	if r.Conversation != conv {
		return nil, fmt.Errorf("the pending request of %s names conversation %q", conv, r.Conversation)
	}
	return &r, nil
}

// Requests is the work queue as the summarizer pool sees it: one durable consumer
// shared by every worker process.
type Requests struct {
	s    *core
	cons natsjs.Consumer
}

// Requests binds to the workers' durable consumer. Until ctx is done, a pull from it or
// an ack to it the server refuses is kept for Store.ConsumerRefused.
func (qu *Queue) Requests(ctx context.Context) (*Requests, error) {
	c, err := qu.js.Consumer(ctx, qu.cfg.RequestsStream, qu.cfg.WorkerConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", qu.cfg.WorkerConsumer, qu.cfg.RequestsStream, err)
	}
	context.AfterFunc(ctx, qu.watchConsumer(qu.cfg.RequestsStream, qu.cfg.WorkerConsumer, nil))
	return &Requests{s: qu.core, cons: c}, nil
}

// AckWait is the workers' consumer's ack wait as the server had it when Requests bound
// it: what another process may have provisioned, whatever this one's config says.
func (r *Requests) AckWait() time.Duration { return r.cons.CachedInfo().Config.AckWait }

// Next fetches one request, waiting up to wait; (nil, nil) when none came. It is
// called only by a free worker, so a process never holds more requests than it has
// workers.
func (r *Requests) Next(ctx context.Context, wait time.Duration) (*Delivery, error) {
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	batch, err := r.cons.Fetch(1, natsjs.FetchContext(fctx))
	if err != nil {
		return nil, err
	}
	var d *Delivery
	for msg := range batch.Messages() {
		d = r.s.delivery(msg, func(subject string) (string, bool) {
			return conversationAfter(r.s.cfg.RequestPrefix, subject)
		})
	}
	if d == nil {
		if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, natsjs.ErrNoMessages) {
			return nil, err
		}
	}
	return d, nil
}

// PendingConversations returns the conversations of partition p (every conversation
// when p is not partitioned) with a request in the work queue, sorted. A trigger that
// takes a partition over adopts them: the old owner's watch on their requests went
// with it. Subjects that do not name a valid conversation are skipped.
func (qu *Queue) PendingConversations(ctx context.Context, p Partition) ([]string, error) {
	str, err := qu.js.Stream(ctx, qu.cfg.RequestsStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", qu.cfg.RequestsStream, err)
	}
	info, err := str.Info(ctx, natsjs.WithSubjectFilter(qu.cfg.RequestPrefix+".*"))
	if err != nil {
		return nil, fmt.Errorf("pending requests: %w", err)
	}
	var out []string
	for subj := range info.State.Subjects {
		conv, ok := strings.CutPrefix(subj, qu.cfg.RequestPrefix+".")
		if !ok || schemas.ValidateConversationID(conv) != nil {
			continue
		}
		if p.Partitioned() && PartitionOf(conv, p.N) != p.P {
			continue
		}
		out = append(out, conv)
	}
	slices.Sort(out)
	return out, nil
}
