package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

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
	if err := s.checkPolicy(ctx, conv); err != nil {
		return nil, err
	}
	wait, capped := time.Duration(in.WaitMS)*time.Millisecond, false
	if in.WaitMS > s.cfg.MaxWait.Milliseconds() {
		wait, capped = s.cfg.MaxWait, true
	}
	id := in.RequestID
	if id == "" {
		id = schemas.NewRequestID()
	}

	events, err := s.store.Config().EventSubject(conv)
	if err != nil {
		return nil, badRequest(err)
	}
	last, err := s.lastSeqOf(ctx, conv)
	if err != nil {
		return nil, err
	}
	// With a wait, subscribe before queueing, so a fast outcome is not missed.
	var w *waiter
	if wait > 0 {
		if w, err = s.newWaiter(conv, id, events); err != nil {
			return nil, err
		}
		defer func() {
			if w != nil { // not handed to a goroutine
				w.close()
			}
		}()
	}

	r := schemas.Request{RequestID: id, Conversation: conv, Trigger: schemas.TriggerManual,
		Reason: "requested through " + schemas.CompactSubject, Instructions: in.Instructions, RequestedAt: time.Now().UTC(), UpToSeq: last}
	duplicate, busy, err := s.queueCompact(ctx, req, r, events)
	switch {
	case err != nil:
		return nil, err
	case busy != nil:
		return *busy, nil
	case w == nil:
		return schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id}, nil
	}
	if duplicate {
		// Its outcome may be in the past: look at the stored events first.
		if ev, err := s.store.Events().FindOutcome(ctx, conv, id, time.Now().Add(-duplicateLookback)); err != nil {
			s.log.Warn().Err(err).Str("conversation", conv).Msg("read stored events")
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

// checkPolicy decides whether the conversation's policy resolves: a request whose
// policy cannot be resolved would fail in the worker, so it is refused now (409).
func (s *Service) checkPolicy(ctx context.Context, conv string) error {
	if _, err := s.policies.Settings(ctx, conv); err != nil {
		if errors.Is(err, policy.ErrPolicy) {
			return &apiError{code: 409, msg: fmt.Sprintf("policy: %v; fix it with %s (set or clear); nothing was queued", err, schemas.PolicySubject)}
		}
		return internal(conv, err)
	}
	return nil
}

// lastSeqOf is the conversation's last CHAT sequence, which the request is made for. A
// conversation with nothing in CHAT is still one when it has a value (its messages aged
// out); an id with nothing stored is a mistake (a typo, a forgotten conversation), and
// queueing it would write a declined marker, creating what was not there: 404, or 409
// for a forgotten one.
func (s *Service) lastSeqOf(ctx context.Context, conv string) (uint64, error) {
	last, err := s.store.Chat().LastSeq(ctx, conv)
	if err != nil {
		return 0, internal(conv, err)
	}
	if last == 0 {
		v, _, err := s.store.Results().Get(ctx, conv, false)
		if err != nil {
			return 0, internal(conv, err)
		}
		if v == nil {
			// A forgotten one is told so (409, as when the forget comes while queueing).
			if tomb, err := s.store.Forgotten(ctx, conv); err == nil && tomb != nil {
				return 0, forgottenError(conv)
			}
			return 0, &apiError{code: 404, msg: fmt.Sprintf("conversation %s not found: nothing was published to it; nothing was queued", conv)}
		}
	}
	return last, nil
}

// queueCompact queues r and publishes its requested event. The same request queued
// before (its request_id within the duplicate window, or the pending request itself)
// is a duplicate, whose outcome may be in the past; another pending request makes the
// answer busy (nothing queued). A conversation forgotten meanwhile takes the request
// back (409).
func (s *Service) queueCompact(ctx context.Context, req micro.Request, r schemas.Request, events string) (duplicate bool, busy *schemas.CompactResponse, err error) {
	conv, id := r.Conversation, r.RequestID
	seq, err := s.enqueue(ctx, req, r)
	switch {
	case errors.Is(err, jetstream.ErrRequestPending) && seq > 0:
		// The same request_id within the duplicate window: this request, queued before.
		return true, nil, nil
	case errors.Is(err, jetstream.ErrRequestPending):
		pending, perr := s.store.Queue().Pending(ctx, conv)
		if perr != nil {
			s.log.Warn().Err(perr).Str("conversation", conv).Msg("read the pending request")
		}
		if pending != nil && pending.RequestID == id {
			return true, nil, nil // a retry of the pending request itself
		}
		resp := schemas.CompactResponse{Status: schemas.CompactBusy, Error: busyMessage(conv, events, r.Instructions != "")}
		if pending != nil {
			resp.RequestID = pending.RequestID
		}
		return false, &resp, nil
	case err != nil:
		return false, nil, internal(conv, err)
	}
	var writes jetstream.Writes
	writes.Request(seq)
	ev := schemas.Event{Type: schemas.EventRequested, Conversation: conv, RequestID: id,
		Trigger: r.Trigger, Reason: r.Reason, At: r.RequestedAt}
	if err := s.store.Events().PublishRecorded(ctx, ev, &writes); err != nil {
		s.log.Warn().Err(err).Str("conversation", conv).Str("request_id", id).Msg("publish requested event")
	}
	if err := s.forgottenMeanwhile(ctx, conv, r.UpToSeq, &writes); err != nil {
		return false, nil, err
	}
	s.log.Info().Str("conversation", conv).Str("request_id", id).Msg("compaction requested through the service")
	return false, nil, nil
}

func busyMessage(conv, events string, instructions bool) string {
	what := "this request was not queued"
	if instructions {
		what = "this request and its instructions were NOT queued"
	}
	return fmt.Sprintf("a compaction of %s is already pending; %s: retry after the pending one completes (its outcome is published on %s)", conv, what, events)
}

// waiter holds what one waiting compact request owns: a wait slot and a subscription
// to the conversation's events, which passes on the outcome of its request.
type waiter struct {
	s       *Service
	conv    string
	events  string // the subject of the conversation's events
	sub     *jetstream.Subscription
	outcome chan schemas.Event
}

// newWaiter takes a wait slot (503 when none is free) and subscribes to the
// conversation's events; close gives both back.
func (s *Service) newWaiter(conv, id, events string) (*waiter, error) {
	select {
	case s.waits <- struct{}{}:
	default:
		return nil, &apiError{code: 503, msg: fmt.Sprintf(
			"too many compact requests are waiting for their outcome (limit %d); nothing was queued: retry later, or send no wait_ms and watch %s",
			s.cfg.MaxConcurrentWaits, events)}
	}
	w := &waiter{s: s, conv: conv, events: events, outcome: make(chan schemas.Event, 1)}
	sub, err := s.store.Events().Subscribe(conv, func(ev schemas.Event) {
		if ev.RequestID == id && jetstream.IsOutcome(ev) || ev.Type == schemas.EventForgotten {
			select {
			case w.outcome <- ev:
			default: // one outcome is enough
			}
		}
	}, nil)
	if err != nil {
		<-s.waits
		return nil, internal(conv, fmt.Errorf("subscribe to the events of %s: %w", conv, err))
	}
	w.sub = sub
	return w, nil
}

func (w *waiter) close() {
	w.sub.Stop()
	<-w.s.waits
}

// await answers a waiting compact request with its outcome, or with queued when the
// wait ends first or the service stops. It owns w and one count of s.inFlight.
func (s *Service) await(req micro.Request, w *waiter, id string, wait time.Duration, capped bool) {
	defer s.inFlight.Done()
	defer w.close()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case ev := <-w.outcome:
		if ev.Type == schemas.EventForgotten {
			s.respondError(req, "compact", forgottenError(w.conv))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		s.answer(req, s.outcome(ctx, w.conv, ev))
		cancel()
	case <-timer.C:
		msg := fmt.Sprintf("no outcome within %s; the request stays queued (or in progress): its outcome will be published on %s with request_id %s", wait, w.events, id)
		if capped {
			msg += fmt.Sprintf(" (wait_ms is capped at %d)", s.cfg.MaxWait.Milliseconds())
		}
		s.answer(req, schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id, Error: msg})
	case <-s.stopping:
		s.answer(req, schemas.CompactResponse{Status: schemas.CompactQueued, RequestID: id, Error: stoppingMessage(w.events, id)})
	}
}

func stoppingMessage(events, id string) string {
	return fmt.Sprintf("the compactor service is stopping; the request stays queued and will be worked on: its outcome will be published on %s with request_id %s", events, id)
}

func (s *Service) answer(req micro.Request, resp schemas.CompactResponse) {
	body, err := encodeAnswer(resp)
	if err != nil {
		s.respondError(req, "compact", err)
		return
	}
	s.reply(req, "compact", nil, body)
}

// outcome turns an outcome event into the answer; completed carries the KV value.
func (s *Service) outcome(ctx context.Context, conv string, ev schemas.Event) schemas.CompactResponse {
	resp := schemas.CompactResponse{Status: ev.Type, RequestID: ev.RequestID, Error: ev.Error}
	if ev.Type != schemas.EventCompleted {
		return resp
	}
	v, _, _, err := s.store.Results().Live(ctx, conv, true)
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

// forgottenMeanwhile checks, after the request was queued, whether the conversation
// was forgotten through upTo (the newest sequence the request was made for) and if so
// takes the request and its event back and answers 409. Checked after writing, so no
// forget slips in between (see jetstream.Store.Forget).
func (s *Service) forgottenMeanwhile(ctx context.Context, conv string, upTo uint64, w *jetstream.Writes) error {
	tomb, err := s.store.Forgotten(ctx, conv)
	if err != nil {
		return internal(conv, err)
	}
	if !tomb.Covers(upTo) {
		return nil
	}
	if err := s.store.TakeBack(ctx, conv, w); err != nil {
		return internal(conv, err)
	}
	return forgottenError(conv)
}

// forgottenError answers a compact request whose conversation was forgotten.
func forgottenError(conv string) error {
	return &apiError{code: 409, msg: fmt.Sprintf("%s was forgotten (%s) while this request was made; nothing was queued: publish to it again to start a new conversation",
		conv, schemas.ForgetSubject)}
}
