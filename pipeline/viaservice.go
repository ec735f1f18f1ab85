package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Service mode: a client whose user may not use Compactor's JetStream API (a tenant's
// user, whose account reaches Compactor only through service imports) publishes with
// a JetStream publish on the conversation's subject, whose reply is the PubAck, and
// reads, compacts and forgets through the compactor service (compactor.context,
// compactor.recall, compactor.status, compactor.compact, compactor.forget). See
// ViaService.

// ErrServiceMode is matched by the error of what a client in service mode
// (ViaService) cannot do: the operation needs Compactor's streams or buckets, which
// the compactor service does not serve. The error names the operation and why.
var ErrServiceMode = errors.New("not available in service mode (pipeline.ViaService)")

// ErrBadAnswer is matched by the error of a reply of the compactor service, or a
// PubAck, that breaks the contract (another conversation, sequences out of the range
// asked for, a stream that is not a chat stream): the client refuses it rather than
// act on it.
var ErrBadAnswer = errors.New("the compactor service's answer breaks the contract")

// ViaService makes New open no stream or bucket: the client publishes with a
// JetStream publish on the conversation's subject (chat.<conv>.msg of the config's
// names), checking the PubAck, and does everything else through the compactor service.
// It is the mode of a user that may publish chat.*.msg and request compactor.context,
// compactor.recall, compactor.status, compactor.compact and compactor.forget, and
// nothing of $JS.API, KV or the object store: a tenant's user (docs/clients.md,
// "Service mode").
//
// What differs from the normal mode: a message over the max payload is refused
// (ErrTooLarge; no object store); a PubAck that says duplicate is told from a retry
// by recalling the message it names, which tells only a message outside any tool
// round: a MsgID reused for a message of a tool round (or for an invalid one) is taken
// as a retry and returns the first message's sequence, not ErrDuplicate; a tool message answering a call this
// client did not publish is not checked against the stream; Context reads the tail
// through compactor.recall pages, so Raw, WaitPending and producer token counts are not
// served and Skipped names only what the client itself left out; WaitForOutcome,
// ScanLimit other than the default and WithProvision fail with ErrServiceMode.
func ViaService() Option { return func(o *options) { o.viaService = true } }

// viaService is a client's service mode: its config (the chat subject's names) and a
// JetStream context that is used for publishing only (no API request).
type viaService struct {
	cfg jetstream.Config
	js  natsjs.JetStream
}

// newViaService returns a client in service mode on nc.
func newViaService(nc *nats.Conn, o options) (*Client, error) {
	if o.provision {
		return nil, serviceModeError("WithProvision", "creating streams and buckets needs the JetStream API")
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncTimeout(jetstream.PublishAsyncTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	c := NewWithStore(nc, nil)
	c.svc = &viaService{cfg: o.cfg, js: js}
	return c, nil
}

// serviceModeError is an ErrServiceMode naming what cannot be done and why.
func serviceModeError(what, why string) error {
	return fmt.Errorf("%s: %w: %s", what, ErrServiceMode, why)
}

// badAnswer is an ErrBadAnswer naming the subject and what is wrong.
func badAnswer(subject, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", subject, ErrBadAnswer, fmt.Sprintf(format, args...))
}

// config is the client's names: its store's, or in service mode its own.
func (c *Client) config() jetstream.Config {
	if c.svc != nil {
		return c.svc.cfg
	}
	return c.store.Config()
}

// chatMsg is the message a publish in service mode sends: on the conversation's
// subject, with Nats-Msg-Id for a non-empty id and the trace context. Unlike the
// normal mode's, it names no stream (Nats-Expected-Stream): behind a service import
// the stream is the tenant's (CHAT_<tenant>), which the PubAck names instead.
func (s *viaService) chatMsg(conv string, data []byte, msgID string, tr jetstream.TraceHeader) (*nats.Msg, error) {
	subj, err := s.cfg.ChatSubject(conv)
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(natsjs.MsgIDHeader, msgID)
	}
	if tr.Parent != "" && !strings.ContainsAny(tr.Parent+tr.State, "\r\n") {
		m.Header.Set("traceparent", tr.Parent)
		if tr.State != "" {
			m.Header.Set("tracestate", tr.State)
		}
	}
	return m, nil
}

// publish sends one message and waits for its PubAck.
func (s *viaService) publish(ctx context.Context, conv string, data []byte, msgID string, tr jetstream.TraceHeader) (*natsjs.PubAck, error) {
	m, err := s.chatMsg(conv, data, msgID, tr)
	if err != nil {
		return nil, err
	}
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return ack, nil
}

// publishAsync sends one message without waiting for its PubAck. At the limit of
// publishes in flight it waits for room as the direct path does (a server syncing
// every write acknowledges more slowly), then fails with jetstream.ErrPublishStalled.
func (s *viaService) publishAsync(conv string, data []byte, msgID string, tr jetstream.TraceHeader) (jetstream.PubAckFuture, error) {
	m, err := s.chatMsg(conv, data, msgID, tr)
	if err != nil {
		return nil, err
	}
	f, err := s.js.PublishMsgAsync(m, natsjs.WithStallWait(jetstream.PublishAsyncStallWait))
	if err != nil {
		return nil, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return f, nil
}

// tenantName is what follows the chat stream's name and "_" in a tenant's stream
// (CHAT_<tenant>).
var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// checkAck checks a PubAck of a publish to conv: it names the chat stream (the
// config's, or a tenant's CHAT_<tenant>) and a sequence.
func (s *viaService) checkAck(conv string, ack *natsjs.PubAck) error {
	subject, _ := s.cfg.ChatSubject(conv)
	name := s.cfg.ChatStream
	tenant, isTenant := strings.CutPrefix(ack.Stream, name+"_")
	switch {
	case ack.Stream != name && !(isTenant && tenantName.MatchString(tenant)):
		return badAnswer(subject, "the PubAck names stream %q, not %s or a tenant's %s_<tenant>: the subject is captured by another stream", ack.Stream, name, name)
	case ack.Sequence == 0:
		return badAnswer(subject, "the PubAck of stream %s names no sequence", ack.Stream)
	}
	return nil
}

// inlineLimit is the longest encoded message a publish with msgID sends as it is.
func (c *Client) inlineLimit(msgID string) int {
	if c.svc != nil {
		return int(c.nc.MaxPayload()) - jetstream.HeaderRoom - len(msgID)
	}
	return c.store.Objects().InlineLimit(msgID)
}

// tooLargeViaService is the error of a message over the inline limit in service mode.
func (c *Client) tooLargeViaService(size, limit int) error {
	return fmt.Errorf("%w: the message is %d bytes, over the limit of %d bytes (the server's max_payload %d less %d for headers); "+
		"in service mode (pipeline.ViaService) a message cannot be stored as an object, since the user has no object store: "+
		"split its content over several messages (%w)", ErrTooLarge, size, limit, c.nc.MaxPayload(), int(c.nc.MaxPayload())-limit, ErrServiceMode)
}

// publishChat publishes one encoded message and waits for its ack: through the store,
// or in service mode with a JetStream publish whose PubAck is checked.
func (c *Client) publishChat(ctx context.Context, conv string, data []byte, po publishOptions) (uint64, error) {
	if c.svc == nil && po.expectLast != nil {
		return c.store.Chat().PublishExpecting(ctx, conv, data, po.msgID, po.trace, *po.expectLast)
	}
	if c.svc == nil {
		return c.store.Chat().PublishWith(ctx, conv, data, po.msgID, po.trace)
	}
	if po.expectLast != nil {
		return 0, fmt.Errorf("publish to %s: an expected last sequence (%w)", conv, ErrServiceMode)
	}
	ack, err := c.svc.publish(ctx, conv, data, po.msgID, po.trace)
	if err != nil {
		return 0, err
	}
	if err := c.checkDuplicate(ctx, conv, data, po.msgID, ack); err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// publishChatAsync is publishChat without waiting for the ack.
func (c *Client) publishChatAsync(conv string, data []byte, po publishOptions) (jetstream.PubAckFuture, error) {
	if po.expectLast != nil {
		return nil, fmt.Errorf("publish to %s: an expected last sequence is for Publish only, not PublishAsync", conv)
	}
	if c.svc != nil {
		return c.svc.publishAsync(conv, data, po.msgID, po.trace)
	}
	return c.store.Chat().PublishAsyncWith(conv, data, po.msgID, po.trace)
}

// unseenCall is what a client in service mode knows of a call it did not publish: the
// service shows no open tool round (compactor.recall leaves an incomplete round out,
// as readers do), so the call is taken as open, and the result is published. A result
// that answers no call is left out by every reader, as an orphan.
func unseenCall(conv, id string) *openCalls {
	return &openCalls{conv: conv, answered: map[string]bool{id: false}}
}

// ServiceMode reports whether c is in service mode (ViaService).
func (c *Client) ServiceMode() bool { return c.svc != nil }

// serviceDuplicate tells a retry from a reuse of msgID, as far as the service shows,
// when the PubAck of a publish of data to conv says duplicate of the message at seq:
// that message is recalled. It is this one (the same message, metadata aside): a
// retry. It is another one, or conv has no message at seq (another conversation's, or
// one forgotten since): a *DuplicateError. The service recalls a message of a tool
// round only with its whole round, and does not show an invalid one: then the
// duplicate is trusted as a retry.
func (c *Client) serviceDuplicate(ctx context.Context, conv string, data []byte, msgID string, seq uint64) error {
	r, err := c.recallPage(ctx, schemas.RecallRequest{Conversation: conv, FromSeq: seq, ToSeq: seq, MaxTokens: schemas.MaxRecallMaxTokens})
	if err != nil {
		return fmt.Errorf("publish to %s: message id %q names the message stored at seq %d, which cannot be read to tell a retry from another message: %w",
			conv, msgID, seq, err)
	}
	if err := checkRecalled(conv, r, seq, seq); err != nil {
		return err
	}
	switch {
	case len(r.Messages) == 1 && sameMessage(data, &r.Messages[0].Message):
		return nil
	case len(r.Messages) == 0 && (r.Incomplete > 0 || r.Invalid > 0):
		return nil
	}
	return &DuplicateError{Conversation: conv, MsgID: msgID, Seq: seq}
}

// sameMessage reports whether data encodes m, Compactor's metadata aside (the service
// recalls messages without it).
func sameMessage(data []byte, m *schemas.Message) bool {
	mine, err := schemas.DecodeMessage(data)
	if err != nil {
		return false
	}
	mine, theirs := mine.StripMetadata(), m.StripMetadata()
	a, errA := mine.Encode()
	b, errB := theirs.Encode()
	if errA != nil || errB != nil {
		return false
	}
	if bytes.Equal(a, b) {
		return true
	}
	// The same JSON written another way: the service's answers escape <, > and & as
	// \u003c, \u003e and \u0026, which a message's raw content keeps.
	return sameJSON(a, b)
}

// sameJSON reports whether a and b are the same JSON value, whatever their escapes,
// spacing and key order (numbers compared as written).
func sameJSON(a, b []byte) bool {
	decode := func(data []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		return v, dec.Decode(&v) == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}
