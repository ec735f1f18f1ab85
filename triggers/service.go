package triggers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// ServiceConfig sets up the compactor service.
type ServiceConfig struct {
	// MaxWait caps wait_ms. 0: 5m.
	MaxWait time.Duration
	// MaxConcurrentWaits bounds the compact requests waiting for their outcome at once;
	// one more is answered 503. 0: 256.
	MaxConcurrentWaits int
	// Version is the service's SemVer, shown by $SRV.INFO. "": 1.0.0.
	Version string
}

// DefaultServiceConfig returns the defaults.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{MaxWait: 5 * time.Minute, MaxConcurrentWaits: 256, Version: "1.0.0"}
}

// withDefaults fills the zero fields.
func (c ServiceConfig) withDefaults() ServiceConfig {
	d := DefaultServiceConfig()
	if c.MaxWait == 0 {
		c.MaxWait = d.MaxWait
	}
	if c.MaxConcurrentWaits == 0 {
		c.MaxConcurrentWaits = d.MaxConcurrentWaits
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	return c
}

// Validate checks the config (zero fields mean the defaults).
func (c ServiceConfig) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: service: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.MaxWait < 0:
		return bad("max wait must not be negative")
	case c.MaxConcurrentWaits < 0:
		return bad("max concurrent waits must not be negative")
	}
	return nil
}

// Service is the NATS micro service "compactor": any client, in any language, asks
// for a compaction (and may wait for its outcome), reads where a conversation's context
// starts, its status, and reads or changes its policy. Every serve process may run it:
// the endpoints share a queue group, so requests are spread over the instances. Its
// name, subjects and payloads are the wire contract in package schemas
// (schemas.CompactSubject, schemas.CompactRequest, ... and the service-*.v1.json files).
type Service struct {
	cfg      ServiceConfig
	store    *jetstream.Store
	policies PolicySource
	check    func(policy.Layer) (policy.Settings, error)
	log      zerolog.Logger

	waits    chan struct{} // one token per compact request waiting for its outcome
	stopping chan struct{} // closed when Run's ctx is done: waits answer at once

	mu       sync.Mutex
	closed   bool           // set once no handler may start work any more
	inFlight sync.WaitGroup // handlers and waits: Add under mu while !closed, or by a handler counted in it
}

// opTimeout bounds the NATS calls of one request.
const opTimeout = 10 * time.Second

// NewService returns the service; Run adds it to the store's connection. check
// resolves a conversation policy against the server's tiers (environment, profiles).
func NewService(cfg ServiceConfig, store *jetstream.Store, policies PolicySource,
	check func(policy.Layer) (policy.Settings, error), log zerolog.Logger) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: service: a store is required", ErrConfig)
	case policies == nil:
		return nil, fmt.Errorf("%w: service: a policy source is required", ErrConfig)
	case check == nil:
		return nil, fmt.Errorf("%w: service: a policy check is required", ErrConfig)
	}
	return &Service{cfg: cfg, store: store, policies: policies, check: check,
		log:   log.With().Str("component", "service").Logger(),
		waits: make(chan struct{}, cfg.MaxConcurrentWaits), stopping: make(chan struct{})}, nil
}

// Run adds the service and serves until ctx is done; then it stops taking requests,
// answers the waiting compact requests (status queued, the service is stopping), lets
// the requests in hand finish and returns. Run is called once.
func (s *Service) Run(ctx context.Context) error {
	nc := s.store.Conn()
	svc, err := micro.AddService(nc, micro.Config{
		Name:        schemas.ServiceName,
		Version:     s.cfg.Version,
		Description: "Compactor: compaction requests, context pointers, status and policies of LLM conversations",
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Error().Str("subject", e.Subject).Str("error", e.Description).Msg("service subscription error")
		},
	})
	if err != nil {
		s.shutdown(nc, nil)
		return fmt.Errorf("add service %s: %w", schemas.ServiceName, err)
	}
	g := svc.AddGroup(schemas.ServiceName)
	for _, ep := range []struct {
		name, request string
		h             handler
	}{
		{"compact", `{conversation, request_id?, instructions?, wait_ms?}`, s.onCompact},
		{"context", `{conversation}`, s.onContext},
		{"status", `{conversation?}`, s.onStatus},
		{"policy", `{conversation, set?: {key: value}, clear?: bool}`, s.onPolicy},
	} {
		if err := g.AddEndpoint(ep.name, s.wrap(ep.name, ep.h),
			micro.WithEndpointMetadata(map[string]string{"format": "application/json", "request": ep.request})); err != nil {
			s.shutdown(nc, svc)
			return fmt.Errorf("add endpoint %s.%s: %w", schemas.ServiceName, ep.name, err)
		}
	}
	s.log.Info().Str("id", svc.Info().ID).Msg("compactor service started")
	<-ctx.Done()
	s.shutdown(nc, svc)
	s.log.Info().Msg("compactor service stopped")
	return nil
}

// shutdown stops the service and waits for the work in hand. The endpoints' pending
// requests (received before the unsubscribe) are still handled: the flush makes sure
// the server sends no more, the barrier that every callback before it has returned.
func (s *Service) shutdown(nc *nats.Conn, svc micro.Service) {
	close(s.stopping)
	if svc != nil {
		if err := svc.Stop(); err != nil {
			s.log.Warn().Err(err).Msg("stop service")
		}
		if err := nc.FlushTimeout(5 * time.Second); err == nil {
			drained := make(chan struct{})
			if nc.Barrier(func() { close(drained) }) == nil {
				select {
				case <-drained:
				case <-time.After(opTimeout):
					s.log.Warn().Msg("service requests still queued after 10s; answering the rest as stopping")
				}
			}
		}
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.inFlight.Wait()
}

// handler serves one request. It returns the answer (any JSON value) or an error; an
// *apiError chooses the code, any other error is a 500. A nil answer and nil error
// mean the handler answers later by itself.
type handler func(ctx context.Context, req micro.Request) (any, error)

// apiError is an error answer with its code.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// invalid is a 400 naming the field and the rule.
func invalid(field, format string, args ...any) *apiError {
	return &apiError{code: 400, msg: field + ": " + fmt.Sprintf(format, args...)}
}

// internalError is an unexpected failure of one conversation's request.
type internalError struct {
	conv string
	err  error
}

func (e *internalError) Error() string { return e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

func internal(conv string, err error) error { return &internalError{conv: conv, err: err} }

// wrap turns a handler into a micro handler: it tracks the request for shutdown,
// bounds its NATS calls and maps its error to a micro error answer.
func (s *Service) wrap(name string, h handler) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		if !s.enter() {
			s.respondError(req, name, &apiError{code: 503, msg: "the compactor service is stopping; retry (another instance may answer)"})
			return
		}
		defer s.inFlight.Done()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		resp, err := h(ctx, req)
		switch {
		case err != nil:
			s.respondError(req, name, err)
		case resp != nil:
			if rerr := req.RespondJSON(resp); rerr != nil {
				s.log.Warn().Err(rerr).Str("endpoint", name).Msg("answer request")
			}
		}
	})
}

// enter registers a request (or a wait); false once the service is closed.
func (s *Service) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inFlight.Add(1)
	return true
}

// respondError answers with a micro error: the code and description in the headers
// (Nats-Service-Error-Code, Nats-Service-Error) and, for clients that only read the
// body, {"error", "code"} as JSON. Internal errors are logged here, once.
func (s *Service) respondError(req micro.Request, endpoint string, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ev := s.log.Error().Err(err).Str("endpoint", endpoint)
		var ie *internalError
		if errors.As(err, &ie) && ie.conv != "" {
			ev = ev.Str("conversation", ie.conv)
		}
		ev.Msg("request failed")
		ae = &apiError{code: 500, msg: err.Error()}
	}
	body, _ := json.Marshal(map[string]any{"error": ae.msg, "code": ae.code})
	if rerr := req.Error(fmt.Sprint(ae.code), ae.msg, body); rerr != nil {
		s.log.Warn().Err(rerr).Str("endpoint", endpoint).Msg("answer request")
	}
}

// decode reads a JSON object strictly: unknown fields and trailing data are 400s
// naming the field. An empty body decodes as {} when emptyOK.
func decode(data []byte, v any, emptyOK bool, example string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return invalid("request", "body is empty; send a JSON object such as %s", example)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			return invalid("request", "must be one JSON object, with nothing after it")
		}
		return nil
	}
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return invalid("request", "malformed JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ) && typ.Field != "":
		return invalid(typ.Field, "must be %s, not a JSON %s", jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.As(err, &typ):
		return invalid("request", "must be a JSON object such as %s, not a JSON %s", example, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(field, "unknown field; the request is %s", example)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request", "malformed JSON: unexpected end of input")
	}
	return invalid("request", "malformed JSON: %v", err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "int64", "int", "uint64":
		return "an integer"
	case "map", "struct":
		return "a JSON object"
	}
	return "a " + goKind
}

// badRequest turns a payload's validation error (a *schemas.ValidationError naming the
// field and the rule) into a 400.
func badRequest(err error) error {
	var ve *schemas.ValidationError
	if errors.As(err, &ve) {
		return &apiError{code: 400, msg: ve.Error()}
	}
	return err
}

const compactExample = `{"conversation":"c1","instructions":"keep every file path","wait_ms":30000}`

// onCompact queues a manual compaction and, with wait_ms, answers with its outcome.
func (s *Service) onCompact(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.CompactRequest
	if err := decode(req.Data(), &in, false, compactExample); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	conv := in.Conversation
	// A request whose policy cannot be resolved would fail in the worker: say so now.
	if _, err := s.policies.Settings(ctx, conv); err != nil {
		if errors.Is(err, policy.ErrPolicy) {
			return nil, &apiError{code: 409, msg: fmt.Sprintf("policy: %v; fix it with %s (set or clear); nothing was queued", err, schemas.PolicySubject)}
		}
		return nil, internal(conv, err)
	}
	wait, capped := time.Duration(in.WaitMS)*time.Millisecond, false
	if in.WaitMS > s.cfg.MaxWait.Milliseconds() {
		wait, capped = s.cfg.MaxWait, true
	}
	id := in.RequestID
	if id == "" {
		id = schemas.NewRequestID()
	}

	// With a wait, subscribe before queueing, so a fast outcome is not missed.
	var w *waiter
	if wait > 0 {
		var err error
		if w, err = s.newWaiter(conv); err != nil {
			return nil, err
		}
		defer func() {
			if w != nil { // not handed to a goroutine
				w.close()
			}
		}()
	}

	last, err := s.store.LastSeq(ctx, conv)
	if err != nil {
		return nil, internal(conv, err)
	}
	now := time.Now().UTC()
	r := schemas.Request{RequestID: id, Conversation: conv, Trigger: schemas.TriggerManual,
		Reason: "requested through " + schemas.CompactSubject, Instructions: in.Instructions, RequestedAt: now, UpToSeq: last}
	seq, err := s.store.Enqueue(ctx, r)
	duplicate := false
	switch {
	case errors.Is(err, jetstream.ErrRequestPending) && seq > 0:
		// The same request_id within the duplicate window: this request, queued before.
		duplicate = true
	case errors.Is(err, jetstream.ErrRequestPending):
		pending, perr := s.store.PendingRequest(ctx, conv)
		if perr != nil {
			s.log.Debug().Err(perr).Str("conversation", conv).Msg("read the pending request")
		}
		if pending != nil && pending.RequestID == id {
			duplicate = true // a retry of the pending request itself
			break
		}
		busy := schemas.CompactResponse{Status: schemas.CompactBusy, Error: busyMessage(conv, s.store.Config().EventSubject(conv), in.Instructions != "")}
		if pending != nil {
			busy.RequestID = pending.RequestID
		}
		return busy, nil
	case err != nil:
		return nil, internal(conv, err)
	default:
		ev := schemas.Event{Type: schemas.EventRequested, Conversation: conv, RequestID: id,
			Trigger: r.Trigger, Reason: r.Reason, At: now}
		if err := s.store.PublishEvent(ctx, ev); err != nil {
			s.log.Warn().Err(err).Str("conversation", conv).Str("request_id", id).Msg("publish requested event")
		}
		s.log.Info().Str("conversation", conv).Str("request_id", id).Msg("compaction requested through the service")
	}
	if w == nil {
		return schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id}, nil
	}
	if duplicate {
		// Its outcome may be in the past: look at the stored events first.
		if ev, err := s.storedOutcome(ctx, conv, id); err != nil {
			s.log.Debug().Err(err).Str("conversation", conv).Msg("read stored events")
		} else if ev != nil {
			return s.outcome(ctx, conv, *ev), nil
		}
	}
	// The wait runs on its own goroutine, so it blocks no other request. The handler
	// still counts as in flight here, so the service cannot have started waiting for
	// the requests in hand to finish: Add is safe.
	handed := w
	w = nil
	s.inFlight.Add(1)
	go s.await(req, handed, id, wait, capped)
	return nil, nil
}

func busyMessage(conv, events string, instructions bool) string {
	what := "this request was not queued"
	if instructions {
		what = "this request and its instructions were NOT queued"
	}
	return fmt.Sprintf("a compaction of %s is already pending; %s: retry after the pending one completes (its outcome is published on %s)", conv, what, events)
}

// waiter holds what one waiting compact request owns: a wait slot and a subscription
// to the conversation's events.
type waiter struct {
	s      *Service
	conv   string
	sub    *nats.Subscription
	events chan *nats.Msg
}

// newWaiter takes a wait slot (503 when none is free) and subscribes to the
// conversation's events; close gives both back.
func (s *Service) newWaiter(conv string) (*waiter, error) {
	select {
	case s.waits <- struct{}{}:
	default:
		return nil, &apiError{code: 503, msg: fmt.Sprintf(
			"too many compact requests are waiting for their outcome (limit %d); nothing was queued: retry later, or send no wait_ms and watch %s",
			s.cfg.MaxConcurrentWaits, s.store.Config().EventSubject(conv))}
	}
	w := &waiter{s: s, conv: conv, events: make(chan *nats.Msg, 64)}
	sub, err := s.store.Conn().ChanSubscribe(s.store.Config().EventSubject(conv), w.events)
	if err != nil {
		<-s.waits
		return nil, internal(conv, fmt.Errorf("subscribe to the events of %s: %w", conv, err))
	}
	w.sub = sub
	return w, nil
}

func (w *waiter) close() {
	_ = w.sub.Unsubscribe()
	<-w.s.waits
}

// await answers a waiting compact request with its outcome, or with queued when the
// wait ends first or the service stops. It owns w and one count of s.inFlight.
func (s *Service) await(req micro.Request, w *waiter, id string, wait time.Duration, capped bool) {
	defer s.inFlight.Done()
	defer w.close()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case m := <-w.events:
			var ev schemas.Event
			if json.Unmarshal(m.Data, &ev) != nil || ev.RequestID != id {
				continue // another request's event
			}
			switch ev.Type {
			case schemas.EventCompleted, schemas.EventDeclined, schemas.EventFailed:
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				s.answer(req, s.outcome(ctx, w.conv, ev))
				cancel()
				return
			}
		case <-timer.C:
			msg := fmt.Sprintf("no outcome within %s; the request stays queued (or in progress): its outcome will be published on %s with request_id %s", wait, w.sub.Subject, id)
			if capped {
				msg += fmt.Sprintf(" (wait_ms is capped at %d)", s.cfg.MaxWait.Milliseconds())
			}
			s.answer(req, schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id, Error: msg})
			return
		case <-s.stopping:
			s.answer(req, schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id, Error: stoppingMessage(w.sub.Subject, id)})
			return
		}
	}
}

func stoppingMessage(events, id string) string {
	return fmt.Sprintf("the compactor service is stopping; the request stays queued and will be worked on: its outcome will be published on %s with request_id %s", events, id)
}

func (s *Service) answer(req micro.Request, resp schemas.CompactResponse) {
	if err := req.RespondJSON(resp); err != nil {
		s.log.Warn().Err(err).Str("endpoint", "compact").Msg("answer request")
	}
}

// outcome turns an outcome event into the answer; completed carries the KV value.
func (s *Service) outcome(ctx context.Context, conv string, ev schemas.Event) schemas.CompactResponse {
	resp := schemas.CompactResponse{Status: ev.Type, RequestID: ev.RequestID, Error: ev.Error}
	if ev.Type != schemas.EventCompleted {
		return resp
	}
	v, _, err := s.store.GetResult(ctx, conv, true)
	if err != nil {
		s.log.Error().Err(err).Str("conversation", conv).Str("request_id", ev.RequestID).Msg("read the result of a completed request")
		resp.Error = strings.TrimPrefix(resp.Error+"; ", "; ") + "completed, but reading the result failed: " + err.Error()
		return resp
	}
	resp.Result = v
	return resp
}

// duplicateLookback covers the work queue's duplicate window (2 minutes by default):
// a request id seen again was queued within it.
const duplicateLookback = 10 * time.Minute

// storedOutcome finds the outcome event of a request queued recently, nil when it has
// none yet.
func (s *Service) storedOutcome(ctx context.Context, conv, id string) (*schemas.Event, error) {
	cfg := s.store.Config()
	oc, err := s.store.JetStream().OrderedConsumer(ctx, cfg.EventsStream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{cfg.EventSubject(conv)},
		DeliverPolicy:  natsjs.DeliverByStartTimePolicy,
		OptStartTime:   new(time.Now().Add(-duplicateLookback)),
	})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := oc.FetchNoWait(256)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var ev schemas.Event
			if json.Unmarshal(m.Data(), &ev) != nil || ev.RequestID != id {
				continue
			}
			switch ev.Type {
			case schemas.EventCompleted, schemas.EventDeclined, schemas.EventFailed:
				return &ev, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
	}
}

// onContext answers where a conversation's context starts.
func (s *Service) onContext(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ConversationRequest
	if err := decode(req.Data(), &in, false, `{"conversation":"c1"}`); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	v, last, err := s.valueAndLast(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	out := schemas.ContextResponse{Conversation: in.Conversation, Value: v, TailStartSeq: 1, LastSeq: last}
	if v != nil && v.TailStartSeq > 0 {
		out.TailStartSeq = v.TailStartSeq
	}
	return out, nil
}

// valueAndLast reads the KV value (from the leader) and the newest CHAT sequence.
func (s *Service) valueAndLast(ctx context.Context, conv string) (*schemas.Result, uint64, error) {
	v, _, err := s.store.GetResult(ctx, conv, true)
	if err != nil {
		return nil, 0, internal(conv, err)
	}
	last, err := s.store.LastSeq(ctx, conv)
	if err != nil {
		return nil, 0, internal(conv, err)
	}
	return v, last, nil
}

// onStatus answers one conversation's state, or without one the pipeline's streams and
// consumers.
func (s *Service) onStatus(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ConversationRequest
	if err := decode(req.Data(), &in, true, `{"conversation":"c1"} or {}`); err != nil {
		return nil, err
	}
	if in.Conversation == "" {
		return s.store.Status(ctx), nil
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	v, last, err := s.valueAndLast(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	out := schemas.ConversationStatus{Conversation: in.Conversation, Value: v, LastSeq: last}
	p, err := s.store.PendingRequest(ctx, in.Conversation)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if p != nil {
		out.Pending, out.PendingRequestID = true, p.RequestID
	}
	return out, nil
}

const policyExample = `{"conversation":"c1","set":{"threshold":0.7,"strategy":"tool-rounds"}}`

// onPolicy reads, merges into or clears a conversation's policy.
func (s *Service) onPolicy(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.PolicyRequest
	if err := decode(req.Data(), &in, false, policyExample); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	conv := in.Conversation
	set, err := policyChange(in.Set)
	if err != nil {
		return nil, err
	}
	var resp schemas.PolicyResponse
	err = s.store.UpdatePolicy(ctx, conv, func(data []byte) ([]byte, bool, error) {
		r, next, write, err := s.applyPolicy(conv, data, in.Clear, set)
		resp = r
		return next, write, err
	})
	switch {
	case err == nil:
		if in.Clear || len(set) > 0 {
			s.log.Info().Str("conversation", conv).Bool("cleared", in.Clear).Strs("keys", slices.Sorted(maps.Keys(set))).Msg("conversation policy changed through the service")
		}
		return resp, nil
	case errors.Is(err, jetstream.ErrRevisionMismatch):
		return nil, &apiError{code: 409, msg: "policy: " + err.Error()}
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return nil, ae
	}
	return nil, internal(conv, err)
}

// policyChange checks the keys of a policy request's set (its values are checked by
// schemas.PolicyRequest.Validate) and returns them as text.
func policyChange(in map[string]any) (policy.Layer, error) {
	set := policy.Layer{}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field := "set." + k
		if k != policy.ProfileKey {
			key, ok := policy.Lookup(k)
			switch {
			case !ok:
				return nil, invalid(field, "unknown key; a conversation may set %s", strings.Join(policy.ConversationKeys(), ", "))
			case key.Scope != policy.Conversation:
				return nil, invalid(field, "cannot be set per conversation: endpoints, models and keys come only from the operator's profiles")
			}
		}
		switch v := in[k].(type) {
		case string:
			set[k] = v
		case json.Number:
			set[k] = v.String()
		default: // another number type (Validate refused the rest)
			set[k] = fmt.Sprint(v)
		}
	}
	return set, nil
}

// applyPolicy applies clear and set to the stored policy data and checks the result
// against the server's tiers. It returns the answer, the data to write (nil: delete)
// and whether to write at all.
func (s *Service) applyPolicy(conv string, data []byte, clear bool, set policy.Layer) (schemas.PolicyResponse, []byte, bool, error) {
	var none schemas.PolicyResponse
	current := policy.Layer{}
	if data != nil && !clear {
		var err error
		if current, err = policy.DecodeConversation(data); err != nil {
			return none, nil, false, &apiError{code: 409, msg: fmt.Sprintf("policy: the stored policy of %s is invalid (%v); send \"clear\": true (with \"set\" to replace it)", conv, err)}
		}
	}
	changed := clear || len(set) > 0
	next, err := policy.Merge(current, clear, set)
	if err != nil {
		return none, nil, false, invalid("set", "%v", err)
	}
	settings, err := s.check(next)
	if err != nil {
		if !errors.Is(err, policy.ErrPolicy) {
			return none, nil, false, err
		}
		if changed {
			return none, nil, false, invalid("set", "%v", err)
		}
		return none, nil, false, &apiError{code: 409, msg: fmt.Sprintf("policy: the stored policy of %s does not resolve (%v); change it with \"set\" or \"clear\"", conv, err)}
	}
	var out []byte
	if changed && len(next) > 0 {
		if out, err = policy.EncodeConversation(next); err != nil {
			return none, nil, false, invalid("set", "%v", err)
		}
	}
	return schemas.PolicyResponse{Conversation: conv, Policy: next, Settings: settings.ByKey()}, out, changed, nil
}
