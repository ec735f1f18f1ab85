package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
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
	sp := eventSplitter{emit: func(name string, data []byte) {
		if accErr == nil {
			accErr = acc.Event(name, data)
		}
	}}
	readErr, clientGone := x.tee(resp.Body, rc, &sp)
	sp.close()
	switch {
	case clientGone || x.r.Context().Err() != nil:
		x.report.Outcome = OutcomeFailed
		x.s.log.Info().Str("api", x.wire.Name()).Msg("proxy: the client went away mid-stream; the reply is not stored")
	case acc.Failed():
		x.report.Outcome = OutcomeUpstreamError
	case readErr != nil || !acc.Done():
		x.report.Outcome = OutcomeFailed
		x.s.log.Warn().Str("cause", errorKind(readErr)).Str("api", x.wire.Name()).Msg("proxy: the upstream stream broke before its end")
		_, _ = x.w.Write(x.wire.StreamError("the upstream stream ended before its end (compactor proxy)"))
		_ = rc.Flush()
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

// tee copies body to the client, flushing each read, and to sp. It returns the error
// that ended reading the upstream (nil at its end) and whether a write to the client
// failed.
func (x *exchange) tee(body io.Reader, rc *http.ResponseController, sp *eventSplitter) (readErr error, clientGone bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return nil, true
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				return nil, true
			}
			sp.write(buf[:n])
		}
		if err == io.EOF {
			return nil, false
		}
		if err != nil {
			return err, false
		}
	}
}

// eventSplitter cuts a server-sent event stream into its events (the HTML standard's
// parsing: lines ended by CRLF, LF or CR; "event" and "data" fields; a blank line
// dispatches; comments and other fields are ignored) and gives each to emit.
type eventSplitter struct {
	emit func(name string, data []byte)

	line    []byte // the line read so far
	afterCR bool   // the last byte was a CR: a LF next ends nothing more
	name    string
	data    []byte
	hasData bool
}

// write takes the next bytes of the stream.
func (sp *eventSplitter) write(p []byte) {
	for len(p) > 0 {
		if sp.afterCR {
			sp.afterCR = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			sp.line = append(sp.line, p...)
			return
		}
		sp.line = append(sp.line, p[:i]...)
		sp.afterCR = p[i] == '\r'
		p = p[i+1:]
		sp.endLine()
	}
}

// close ends the stream: an event not followed by its blank line is given too (an
// upstream that ends without one still said it).
func (sp *eventSplitter) close() {
	if len(sp.line) > 0 {
		sp.endLine()
	}
	sp.dispatch()
}

func (sp *eventSplitter) endLine() {
	line := sp.line
	sp.line = sp.line[:0]
	if len(line) == 0 {
		sp.dispatch()
		return
	}
	if line[0] == ':' {
		return
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "event":
		sp.name = string(value)
	case "data":
		if sp.hasData {
			sp.data = append(sp.data, '\n')
		}
		sp.data = append(sp.data, value...)
		sp.hasData = true
	}
}

func (sp *eventSplitter) dispatch() {
	if sp.hasData {
		sp.emit(sp.name, bytes.Clone(sp.data))
	}
	sp.name, sp.data, sp.hasData = "", sp.data[:0], false
}
