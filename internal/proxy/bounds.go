package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errRequestTimeout is why a request body that did not come within ReadTimeout is
// refused (408).
var errRequestTimeout = errors.New("the request body did not come in time")

// boundBodyRead bounds the reading of r's body by ReadTimeout: the connection's read
// deadline, lifted once the body is read whole (so that reading the next request, or
// noticing the client leave mid-stream, is not cut by it).
func (s *Server) boundBodyRead(w http.ResponseWriter, r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(s.cfg.ReadTimeout)
	if rc.SetReadDeadline(deadline) != nil {
		return r // not a connection of net/http's (a test recorder): unbounded
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc, deadline: deadline}
	r = r.WithContext(context.WithValue(r.Context(), deadlineBodyKey{}, b))
	r.Body = b
	return r
}

// deadlineBodyKey is the context key of a request's *deadlineBody (its body as sent
// upstream is wrapped by the reverse proxy).
type deadlineBodyKey struct{}

// deadlineBody lifts the connection's read deadline at the end of the body, and
// reports a read that failed on it as errRequestTimeout.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
	// deadline is the read deadline; eof says the body was read whole, timedOut that
	// a read failed on the deadline (net/http then ends the request's context too,
	// which whoever waits on it may see first).
	deadline      time.Time
	eof, timedOut atomic.Bool
}

// bodyTimedOut says the body of r (a request as received, or its clone sent upstream)
// did not come within ReadTimeout.
func bodyTimedOut(r *http.Request, err error) bool {
	if errors.Is(err, errRequestTimeout) {
		return true
	}
	b, ok := r.Context().Value(deadlineBodyKey{}).(*deadlineBody)
	return ok && (b.timedOut.Load() || !b.eof.Load() && !time.Now().Before(b.deadline))
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.eof.Store(true)
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	case err != nil && isTimeout(err):
		b.timedOut.Store(true)
		err = fmt.Errorf("%w: %v", errRequestTimeout, err)
	}
	return n, err
}

// isTimeout says err is a timeout (a deadline passed).
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

// Why an upstream request was given up (the cause of its context).
var (
	errUpstreamHeaders = errors.New("the upstream sent no response headers in time (COMPACTOR_PROXY_UPSTREAM_HEADER_TIMEOUT)")
	errUpstreamIdle    = errors.New("the upstream's response stalled (COMPACTOR_PROXY_UPSTREAM_IDLE_TIMEOUT)")
)

// boundedTransport bounds every upstream request: its response headers must come
// within header, and then each next bytes of its body within idle; past either the
// request is cancelled, and the error matches errUpstreamHeaders or errUpstreamIdle.
type boundedTransport struct {
	rt           http.RoundTripper
	header, idle time.Duration
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.header, func() { cancel(errUpstreamHeaders) })
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() {
		if err == nil {
			resp.Body.Close()
		}
		cancel(errUpstreamHeaders)
		return nil, fmt.Errorf("%w: %v", errUpstreamHeaders, err)
	}
	if err != nil {
		cancel(err)
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (a WebSocket passed through): its body is the
		// connection itself, which the reverse proxy takes over; it lives as long as the
		// client's request, whose context ends it.
		_ = cancel
		return resp, nil
	}
	resp.Body = &idleBody{ReadCloser: resp.Body, ctx: ctx, cancel: cancel, idle: t.idle,
		timer: time.AfterFunc(t.idle, func() { cancel(errUpstreamIdle) })}
	return resp, nil
}

// idleBody is an upstream body whose reads must each bring bytes within idle.
type idleBody struct {
	io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.timer.Stop() {
		b.timer.Reset(b.idle)
	}
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), errUpstreamIdle) {
		err = fmt.Errorf("%w: %v", errUpstreamIdle, err)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel(context.Canceled)
	return err
}
