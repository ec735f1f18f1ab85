package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"github.com/compactor/compactor/internal/proxy/wire"
)

// relayStream tees a 2xx event stream to the client, flushed as it arrives, and to the
// wire's accumulator. The reply is stored only when the stream reached the API's end
// with no error event and the client is still there. A stream that breaks before its
// end gets the API's error event, never a clean end.
func (x *exchange) relayStream(resp *http.Response, turn *Turn) {
	x.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(x.w)
	_ = rc.Flush()
	acc := x.wire.NewStream()
	var accErr error
	sp := wire.NewSSESplitter(0, func(name string, data []byte) error {
		if accErr == nil {
			accErr = acc.Event(name, data)
		}
		return nil
	})
	held, readErr, clientGone := x.tee(resp.Body, rc, sp, acc.Done)
	if _, err := sp.Write(nil); err != nil && accErr == nil {
		accErr = err // an event over the bound: the reply cannot be put together
	}
	if c, ok := acc.(wire.Closer); ok && readErr == nil && !clientGone && accErr == nil && !acc.Done() {
		// The upstream closed the stream cleanly before the API's end marker: whole when
		// it reached its finish (an OpenAI-compatible server that sends no [DONE]).
		c.Closed()
	}
	// The API's end reaches the client only once the reply is stored: a client that
	// sends its next turn the moment it has read the end finds its reply in place.
	defer func() {
		if len(held) > 0 && !clientGone {
			_, _ = x.w.Write(held)
			_ = rc.Flush()
		}
	}()
	switch {
	case clientGone:
		x.report.Outcome = OutcomeFailed
		x.s.log.Info().Str("api", x.wire.Name()).Msg("proxy: the client went away mid-stream; the reply is not stored")
	case acc.Failed():
		x.report.Outcome = OutcomeUpstreamError
	case readErr == nil && (errors.Is(accErr, errReplyTooLarge) || errors.Is(accErr, wire.ErrEventTooLarge)):
		// The stream came whole to the client, past what the proxy keeps (so its end was
		// not seen): relayed, not stored.
		x.report.Outcome = OutcomeCompacted
		x.s.log.Warn().Err(accErr).Str("api", x.wire.Name()).Msg("proxy: streamed reply relayed but not stored")
	case !acc.Done():
		x.report.Outcome = OutcomeFailed
		x.s.log.Warn().Str("cause", causeOf(readErr, append(requestSecrets(x.r), x.up.key)...)).Str("upstream", x.up.String()).Str("api", x.wire.Name()).
			Msg("proxy: the upstream stream broke before its end")
		if !x.shadow() { // in shadow mode the client sees the stream as the upstream ended it
			_, _ = x.w.Write(x.wire.StreamError("the upstream stream ended before its end (compactor proxy)"))
			_ = rc.Flush()
		}
	case accErr != nil:
		x.report.Outcome = OutcomeCompacted
		x.s.log.Warn().Err(accErr).Str("api", x.wire.Name()).Msg("proxy: upstream stream not understood; the reply is not stored")
	default:
		x.report.Outcome = OutcomeCompacted
		msg, usage, err := acc.Result()
		if err != nil {
			x.s.log.Warn().Err(err).Str("api", x.wire.Name()).Msg("proxy: streamed reply not put together; not stored")
			return
		}
		x.finish(turn, msg, usage)
	}
}

// tee copies body to the client, flushing each read, and to sp. Once done says the
// stream reached the API's end, the bytes from that read on are held back and returned
// (held), for the caller to write after storing the reply. It returns the error that
// ended reading the upstream (nil at its end) and whether a write to the client failed.
func (x *exchange) tee(body io.Reader, rc *http.ResponseController, sp *wire.SSESplitter, done func() bool) (held []byte, readErr error, clientGone bool) {
	buf := make([]byte, 32<<10)
	kept := 0
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if kept += n; kept <= maxReply {
				_, _ = sp.Write(buf[:n]) // its error is read once the stream ends
			} else if kept-n <= maxReply {
				sp.Fail(errReplyTooLarge)
			}
			if done() {
				// The API's end: held back for the caller, and nothing read after it
				// (an upstream that goes on sending cannot grow it, or keep the client
				// waiting for its close).
				return append(held, buf[:n]...), nil, false
			}
			if clientGone = x.write(rc, buf[:n]); clientGone {
				return nil, nil, true
			}
		}
		if err == io.EOF {
			return held, nil, false
		}
		if err != nil {
			return held, err, false
		}
	}
}

// write writes p to the client and flushes it; it reports whether the client is gone.
func (x *exchange) write(rc *http.ResponseController, p []byte) bool {
	if _, err := x.w.Write(p); err != nil {
		return true
	}
	err := rc.Flush()
	return err != nil && !errors.Is(err, http.ErrNotSupported)
}

// errReplyTooLarge is why a stream over maxReply is relayed but not stored.
var errReplyTooLarge = fmt.Errorf("the streamed reply is over %d bytes: relayed, not stored", maxReply)
