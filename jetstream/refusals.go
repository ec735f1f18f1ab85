package jetstream

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
)

// Refusals: the server answers a publish or a subscription the user's permissions do
// not allow with an asynchronous error on the connection ("Permissions Violation for
// Publish to X"), never on the request itself, which then only times out. These
// helpers watch a connection's asynchronous errors for refusals, so that what sent the
// refused subject fails at once, naming it.

// ErrPermission is matched by a *PermissionError: the server refused a publish or a
// subscription for want of permission.
var ErrPermission = errors.New("permission denied")

// PermissionError is a publish or subscription the server refused.
type PermissionError struct {
	// Op is "publish" or "subscribe".
	Op string
	// Subject is the subject refused.
	Subject string
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("permission denied: the server does not let this user %s %s", e.Op, e.Subject)
}

// Is makes a PermissionError match ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

var violationRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// PermissionErrorOf reads the refusal in a connection's asynchronous error (or any
// error that carries the server's words); ok is false for any other error.
func PermissionErrorOf(err error) (pe *PermissionError, ok bool) {
	if err == nil {
		return nil, false
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, false
	}
	op := "publish"
	if strings.EqualFold(m[1], "subscription") {
		op = "subscribe"
	}
	return &PermissionError{Op: op, Subject: m[2]}, true
}

// refusalHub is what watches one connection's refusals.
type refusalHub struct {
	mu       sync.Mutex
	next     int
	watchers map[int]func(*PermissionError)
	count    atomic.Uint64
}

var (
	hubsMu sync.Mutex
	hubs   = map[weak.Pointer[nats.Conn]]*refusalHub{}
)

// hubOf returns nc's hub, installing it on first use: an asynchronous error handler that
// hands every error on to the handler set before it.
func hubOf(nc *nats.Conn) *refusalHub {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	key := weak.Make(nc)
	if h := hubs[key]; h != nil {
		return h
	}
	for k := range hubs { // connections gone since
		if k.Value() == nil {
			delete(hubs, k)
		}
	}
	h := &refusalHub{watchers: map[int]func(*PermissionError){}}
	hubs[key] = h
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		if pe, ok := PermissionErrorOf(err); ok {
			h.refused(pe)
		}
		if prev != nil {
			prev(c, sub, err)
		}
	})
	return h
}

func (h *refusalHub) refused(pe *PermissionError) {
	h.count.Add(1)
	h.mu.Lock()
	fns := make([]func(*PermissionError), 0, len(h.watchers))
	for _, fn := range h.watchers {
		fns = append(fns, fn)
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(pe)
	}
}

// OnRefusal calls fn with each publish or subscription the server refuses on nc from
// now until stop is called. It must not block.
func OnRefusal(nc *nats.Conn, fn func(*PermissionError)) (stop func()) {
	h := hubOf(nc)
	h.mu.Lock()
	id := h.next
	h.next++
	h.watchers[id] = fn
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.watchers, id)
		h.mu.Unlock()
	}
}

// Refusals counts the publishes and subscriptions the server refused on nc since the
// first call of Refusals, OnRefusal or RefusedContext for it.
func Refusals(nc *nats.Conn) uint64 { return hubOf(nc).count.Load() }

// RefusedContext returns a context that is cancelled, with the *PermissionError as its
// cause (context.Cause), when the server refuses on nc what match accepts (every
// refusal when match is nil). An operation under it that sent the refused subject then
// ends at once instead of waiting for its timeout; PermissionCause turns its error into
// the refusal. cancel releases the watch.
func RefusedContext(ctx context.Context, nc *nats.Conn, match func(*PermissionError) bool) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := OnRefusal(nc, func(pe *PermissionError) {
		if match == nil || match(pe) {
			cancel(pe)
		}
	})
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// PermissionCause returns the refusal that cancelled ctx (see RefusedContext) in place
// of err, an error of an operation under ctx; err itself when ctx was not refused.
func PermissionCause(ctx context.Context, err error) error {
	var pe *PermissionError
	if err != nil && errors.As(context.Cause(ctx), &pe) {
		return pe
	}
	return err
}

// refusal is a refusal and when it came.
type refusal struct {
	err *PermissionError
	at  time.Time
}

// watchConsumer reports to onErr, as a *PermissionError, every pull from or ack to the
// durable consumer of stream the server refuses, and keeps the last for
// ConsumerRefused. A consumer whose pulls are refused gets nothing, and nats.go's
// Consume only sees its heartbeats missing.
func (s *core) watchConsumer(stream, durable string, onErr func(error)) (stop func()) {
	pull := ".CONSUMER.MSG.NEXT." + stream + "." + durable
	ack := "$JS.ACK." + stream + "." + durable + "."
	return OnRefusal(s.nc, func(pe *PermissionError) {
		if !strings.HasSuffix(pe.Subject, pull) && !strings.HasPrefix(pe.Subject, ack) {
			return
		}
		s.consumerRefused.Store(&refusal{err: pe, at: time.Now()})
		if onErr != nil {
			onErr(fmt.Errorf("consumer %s of %s: %w", durable, stream, pe))
		}
	})
}

// ConsumerRefused is the last refusal of a pull from, or an ack to, a consumer this
// store consumes (Chat.Consume, Activity.Consume and their partitions), when it came
// within the last d; nil otherwise. A refused consumer pulls again every half minute or
// so (its missing heartbeats), and is refused again each time until the user's
// permissions change.
func (s *Store) ConsumerRefused(d time.Duration) error {
	r := s.consumerRefused.Load()
	if r == nil || time.Since(r.at) > d {
		return nil
	}
	return fmt.Errorf("the server refuses this process's consumer: %w", r.err)
}
