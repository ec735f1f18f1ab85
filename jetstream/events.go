package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Events is the handle on the events and the dead letters: it publishes them,
// subscribes to a conversation's events, finds or waits for a request's outcome and
// reads a conversation's events back. Store.Events returns it.
type Events struct{ *core }

// Publish publishes an event on compact.event.<conv>.
func (es *Events) Publish(ctx context.Context, ev schemas.Event) error {
	return es.PublishRecorded(ctx, ev, nil)
}

// PublishRecorded is Publish recording the stored event in w (see TakeBack).
func (es *Events) PublishRecorded(ctx context.Context, ev schemas.Event, w *Writes) error {
	subj, err := es.cfg.EventSubject(ev.Conversation)
	if err != nil {
		return err
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	ack, err := es.js.Publish(ctx, subj, data)
	if err != nil {
		return fmt.Errorf("publish %s event for %s: %w", ev.Type, ev.Conversation, err)
	}
	w.add(func(w *Writes) *[]uint64 { return &w.events }, ack.Sequence)
	return nil
}

// invalidToken is the last subject token of dead letters that name no valid conversation.
const invalidToken = "~invalid"

// PublishDead records a request that used up its attempts, or could not be worked on.
// A request whose conversation id breaks the id rule is recorded under conv, the
// conversation its subject named ("" for none: it goes to compact.dead.~invalid, a
// token no conversation id can be).
func (es *Events) PublishDead(ctx context.Context, conv string, d schemas.DeadLetter) error {
	return es.PublishDeadRecorded(ctx, conv, d, nil)
}

// PublishDeadRecorded is PublishDead recording the stored dead letter in w (see
// TakeBack).
func (es *Events) PublishDeadRecorded(ctx context.Context, conv string, d schemas.DeadLetter, w *Writes) error {
	subj, err := es.cfg.DeadSubject(conv)
	if err != nil {
		// Not a conversation id, so that no conversation (one named "invalid", say)
		// reads or forgets these.
		conv, subj = invalidToken, es.cfg.DeadPrefix+"."+invalidToken
	}
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	ack, err := es.js.Publish(ctx, subj, data)
	if err != nil {
		return fmt.Errorf("publish dead letter for %s: %w", conv, err)
	}
	w.add(func(w *Writes) *[]uint64 { return &w.dead }, ack.Sequence)
	return nil
}

// ErrForeignEvent is the error of an event whose payload names another conversation
// than its subject, or that does not decode: it is not acted on.
var ErrForeignEvent = errors.New("invalid compaction event")

// decodeEvent decodes an event and checks it against the conversation its subject
// names.
func (s *core) decodeEvent(subject string, data []byte) (schemas.Event, error) {
	conv, ok := conversationAfter(s.cfg.EventPrefix, subject)
	if !ok {
		return schemas.Event{}, fmt.Errorf("%w: subject %q does not name a valid conversation", ErrForeignEvent, subject)
	}
	var ev schemas.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return schemas.Event{}, fmt.Errorf("%w on %s: %v", ErrForeignEvent, subject, err)
	}
	if ev.Conversation != conv {
		return schemas.Event{}, fmt.Errorf("%w on %s: the payload names conversation %q", ErrForeignEvent, subject, ev.Conversation)
	}
	return ev, nil
}

// Subscribe calls fn with every event published from now on, of conversation conv
// ("" for every conversation), in order. An event whose payload does not decode, or
// names another conversation than its subject, goes to bad instead (which may be nil).
// fn runs on the subscription's goroutine: it must not block for long.
func (es *Events) Subscribe(conv string, fn func(schemas.Event), bad func(error)) (*Subscription, error) {
	subj := es.cfg.EventPrefix + ".*"
	if conv != "" {
		var err error
		if subj, err = es.cfg.EventSubject(conv); err != nil {
			return nil, err
		}
	}
	sub, err := es.nc.Subscribe(subj, func(m *nats.Msg) {
		ev, err := es.decodeEvent(m.Subject, m.Data)
		if err != nil {
			if bad != nil {
				bad(err)
			}
			return
		}
		fn(ev)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", subj, err)
	}
	return &Subscription{sub: sub}, nil
}

// IsOutcome reports whether an event ends a request: completed, declined or failed.
func IsOutcome(ev schemas.Event) bool {
	switch ev.Type {
	case schemas.EventCompleted, schemas.EventDeclined, schemas.EventFailed:
		return true
	}
	return false
}

// FindOutcome looks through the conversation's stored events since since for the
// outcome of request id; nil when it has none yet. It does not wait.
func (es *Events) FindOutcome(ctx context.Context, conv, id string, since time.Time) (*schemas.Event, error) {
	oc, err := es.eventReplay(ctx, conv, since)
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
			if ev, err := es.decodeEvent(m.Subject(), m.Data()); err == nil && ev.RequestID == id && IsOutcome(ev) {
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

// WaitOutcome waits for the outcome of request id: it reads the conversation's stored
// events since since (zero: all of them), so an outcome that came first is not missed,
// then the new ones, until the outcome or ctx's end. A forgotten event after the
// request's requested event (the conversation was forgotten meanwhile: no outcome will
// come) ends the wait too, when it is seen before the forget deletes it; one before it
// is an older forget of the id.
func (es *Events) WaitOutcome(ctx context.Context, conv, id string, since time.Time) (schemas.Event, error) {
	oc, err := es.eventReplay(ctx, conv, since)
	if err != nil {
		return schemas.Event{}, err
	}
	it, err := oc.Messages()
	if err != nil {
		return schemas.Event{}, fmt.Errorf("watch events of %s: %w", conv, err)
	}
	defer it.Stop()
	results := make(chan schemas.Event, 1)
	errs := make(chan error, 1)
	go func() {
		// A forget ends the wait only after the request's own requested event: an
		// older forget (of the conversation this id had before) does not concern it.
		requested := false
		for {
			m, err := it.Next()
			if err != nil {
				errs <- err
				return
			}
			ev, err := es.decodeEvent(m.Subject(), m.Data())
			if err != nil {
				continue
			}
			requested = requested || (ev.RequestID == id && ev.Type == schemas.EventRequested)
			if ev.RequestID == id && IsOutcome(ev) || ev.Type == schemas.EventForgotten && requested {
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

// eventReplay is an ordered consumer over one conversation's events since since.
func (s *core) eventReplay(ctx context.Context, conv string, since time.Time) (natsjs.Consumer, error) {
	subj, err := s.cfg.EventSubject(conv)
	if err != nil {
		return nil, err
	}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{subj}, DeliverPolicy: natsjs.DeliverAllPolicy}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	oc, err := s.js.OrderedConsumer(ctx, s.cfg.EventsStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", conv, err)
	}
	return oc, nil
}
