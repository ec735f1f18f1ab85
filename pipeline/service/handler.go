package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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
