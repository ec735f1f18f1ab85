package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
)

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

// wrap turns a handler into a micro handler. micro calls it on the endpoint's one
// subscription goroutine, so it only takes one of the endpoint's slots
// (Config.MaxConcurrentRequests) and hands the request to a goroutine of its own,
// which answers it: a slow request (a forget, a long recall) holds one slot, not the
// endpoint. With every slot taken the request is answered Busy at once (busyError).
// The request counts as in flight for shutdown from here until it is answered.
func (s *Service) wrap(name string, h handler) micro.Handler {
	slots := make(chan struct{}, s.cfg.MaxConcurrentRequests)
	return micro.HandlerFunc(func(req micro.Request) {
		if !s.enter() {
			s.respondError(req, name, &apiError{code: 503, msg: "the compactor service is stopping; retry (another instance may answer)"})
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			s.inFlight.Done()
			s.respondError(req, name, busyError(name, cap(slots)))
			return
		}
		go func() {
			defer s.inFlight.Done()
			var once sync.Once
			free := func() { once.Do(func() { <-slots }) }
			defer free() // a panic's path too
			s.serve(name, h, req, free)
		}()
	})
}

// serve runs one request's handler, its NATS calls bounded, and answers it. free gives
// the request's slot back before the answer goes out: a caller that sends its next
// request as soon as it has the answer finds the slot free, not Busy.
func (s *Service) serve(name string, h handler, req micro.Request, free func()) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	resp, err := h(ctx, req)
	free()
	switch {
	case err != nil:
		s.respondError(req, name, err)
	case resp != nil:
		body, merr := encodeAnswer(resp)
		if merr != nil {
			s.respondError(req, name, merr)
			return
		}
		s.reply(req, name, nil, body)
	}
}

// encodeAnswer is v as JSON the way a message was written: <, > and & as themselves,
// not escaped as \u003c, \u003e and \u0026 (json.Marshal's default for HTML), so the
// messages an answer carries (context, recall) are byte for byte what was stored, and a
// client comparing a stored message with its own copy finds them the same.
func encodeAnswer(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// busyDescription starts the description of a Busy answer (code 503): nothing was
// done, retry later (another instance may answer).
const busyDescription = "busy: "

// busyError answers a request that found every slot of its endpoint taken.
func busyError(endpoint string, slots int) error {
	return &apiError{code: 503, msg: fmt.Sprintf("%sthe %s endpoint of this compactor service instance is serving %d requests, its limit; "+
		"nothing was done: retry after a moment (another instance may answer)", busyDescription, endpoint, slots)}
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
	hdr := nats.Header{}
	hdr.Set(micro.ErrorCodeHeader, fmt.Sprint(ae.code))
	hdr.Set(micro.ErrorHeader, ae.msg)
	s.reply(req, endpoint, hdr, body)
}

// reply publishes an answer to the request's reply subject. It does not go through
// micro.Request's Respond and Error: those record a failure in the request, which the
// micro library reads once the endpoint's callback returns, while the answer is sent
// from another goroutine. (So $SRV.STATS counts requests, not their errors, and its
// processing time is the hand-off.)
func (s *Service) reply(req micro.Request, endpoint string, hdr nats.Header, body []byte) {
	if req.Reply() == "" {
		return // nobody asked for an answer
	}
	if err := s.nc.PublishMsg(&nats.Msg{Subject: req.Reply(), Header: hdr, Data: body}); err != nil {
		s.log.Warn().Err(err).Str("endpoint", endpoint).Msg("answer request")
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
