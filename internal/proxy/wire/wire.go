// Package wire is what the proxy's model APIs have in common: the Wire interface each
// API's package implements (parse a request into Compactor's messages, build the
// upstream request from a compacted context, read a reply whole or streamed), and the
// helpers they share to read and edit a JSON body and split an event stream. It knows
// nothing of NATS or of HTTP clients; the proxy's server routes requests to a Wire, its
// conversation core decides what the model is sent.
package wire

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
)

// ErrBadRequest wraps a request the proxy refuses with 400: its text is shown to the
// client.
var ErrBadRequest = errors.New("bad request")

// Wire is one API whose conversation the proxy rewrites (OpenAI Chat Completions,
// Anthropic Messages, OpenAI Responses, Gemini). It is pure: no NATS, no HTTP client.
type Wire interface {
	// Name is the API's name: "openai", "anthropic", "responses", "gemini".
	Name() string
	// Parse reads a request body. It refuses (an error wrapping ErrBadRequest, whose
	// text the client is shown) a body that is not the API's request.
	Parse(body []byte) (*Request, error)
	// Build returns the body to send upstream: req.Body byte for byte except the fields
	// that carry the conversation, which render cx. Every other field (model, tools,
	// tool_choice, temperature, max_tokens, stream, metadata...) is left as sent.
	Build(req *Request, cx *assemble.Context) ([]byte, error)
	// Reply reads a non-streamed 2xx response body: the assistant message and the
	// usage the upstream reported (nil when none).
	Reply(body []byte) (schemas.Message, *Usage, error)
	// NewStream returns an accumulator for a streamed (text/event-stream) response.
	NewStream() Stream
	// StreamError is the bytes of the server-sent event that tells the client its
	// stream failed (the API's own error event), for a stream that broke before its end.
	StreamError(message string) []byte
	// ErrorBody is the body of an error response of the proxy's own (status, and a
	// kind such as "invalid_request_error" or "api_error") in the API's error shape, so
	// the client's SDK shows its message.
	ErrorBody(status int, kind, message string) []byte
}

// Answerer is a wire that can answer a request itself, in the API's own reply format:
// the proxy answers an agent's request to summarize its conversation from Compactor's
// summary, without calling the model.
type Answerer interface {
	// Answer is the body of a 2xx response to req holding reply (an assistant message
	// of text) with usage: a whole reply, or with stream the API's event stream, each
	// event in the API's order, ending as the API ends a stream.
	Answer(req *Request, reply schemas.Message, usage Usage, stream bool) ([]byte, error)
}

// CompactAnswerer is a wire whose API has an endpoint of its own for compacting a
// conversation (the OpenAI Responses API's POST /v1/responses/compact): the proxy
// answers it from Compactor's summary with items the client can read.
type CompactAnswerer interface {
	// AnswerCompact is the body of a 2xx response to a compact request req whose
	// compacted history is summary (text), with usage.
	AnswerCompact(req *Request, summary string, usage Usage) ([]byte, error)
	// CompactUsage is the usage the API's own reply to a compact request reports (a
	// request the proxy sent on as the client sent it); nil when it reports none or
	// the body is not such a reply.
	CompactUsage(body []byte) *Usage
}

// Request is a parsed request body.
type Request struct {
	// Body is the body as the client sent it.
	Body []byte
	// Messages is the conversation in Compactor's form (OpenAI chat messages), system
	// messages included, in order: a system field (Anthropic's "system", Gemini's
	// "systemInstruction", Responses' "instructions") is the first message, role system.
	Messages []schemas.Message
	// Stream says the client asked for a streamed response.
	Stream bool
	// Model is the model field.
	Model string
	// MaxOutput is the output token limit the request asks for (max_tokens,
	// max_completion_tokens...), 0 when none.
	MaxOutput int
	// State is the wire's own, from Parse to Build (nil for most wires).
	State any
}

// Usage is what the upstream reported for one call, in every API's terms.
type Usage struct {
	// Input is every input token, cached ones included (OpenAI prompt_tokens;
	// Anthropic input_tokens + cache_read_input_tokens + cache_creation_input_tokens).
	Input int
	// Output is the completion tokens.
	Output int
	// CacheRead is the input tokens served from the provider's prompt cache.
	CacheRead int
	// CacheWrite is the input tokens written to the cache (Anthropic only).
	CacheWrite int
}

// Stream puts a streamed reply back together from its server-sent events.
type Stream interface {
	// Event takes one event as the upstream sent it: its event name ("" when the
	// event has none) and its data. An error means the stream is not the API's.
	Event(name string, data []byte) error
	// Done says the stream reached the API's end ([DONE], message_stop...).
	Done() bool
	// Failed returns the error event the upstream itself sent, if any.
	Failed() bool
	// Result is the assistant message and usage put together; valid once Done.
	Result() (schemas.Message, *Usage, error)
}

// Closer is a Stream whose API's stream may end without its end marker: OpenAI-compatible
// servers that send no data: [DONE]. Closed is told that the upstream closed the stream
// cleanly before Done: it reports whether the stream is whole all the same (it reached
// its finish), and from then on Done says so. A stream cut before its finish is not
// whole.
type Closer interface {
	Closed() bool
}

// Passthrough is the error Parse returns for a request the API serves from state the
// proxy does not have (an OpenAI Responses request continuing a previous_response_id):
// the proxy forwards it as the client sent it, stores nothing, and marks the response
// with Reason (X-Compactor-Passthrough).
type Passthrough struct{ Reason string }

func (p *Passthrough) Error() string { return "passed through: " + p.Reason }

// BadRequest is a refusal the client is shown: it wraps ErrBadRequest.
func BadRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// RequestFields reads the top-level fields of a request body, refusing what is not one
// JSON object with distinct field names.
func RequestFields(body []byte) (map[string]json.RawMessage, error) {
	f, err := FieldMap(body)
	if err != nil {
		return nil, BadRequest("%v", err)
	}
	return f, nil
}

// CommonFields reads model, stream and the output limit (the first of limits present)
// into req.
func CommonFields(f map[string]json.RawMessage, req *Request, limits ...string) error {
	if v, ok := f["model"]; ok && !IsNull(v) {
		if err := json.Unmarshal(v, &req.Model); err != nil {
			return BadRequest("model must be a string")
		}
	}
	if v, ok := f["stream"]; ok && !IsNull(v) {
		if err := json.Unmarshal(v, &req.Stream); err != nil {
			return BadRequest("stream must be a boolean")
		}
	}
	for _, k := range limits {
		v, ok := f[k]
		if !ok || IsNull(v) {
			continue
		}
		if err := json.Unmarshal(v, &req.MaxOutput); err != nil || req.MaxOutput < 0 {
			return BadRequest("%s must be a non-negative integer", k)
		}
		break
	}
	return nil
}

// Array is the elements of the top-level field key of f, which must be a non-empty
// array (of what, for the refusal's text): a refusal the client is shown otherwise.
func Array(f map[string]json.RawMessage, key, what string) ([]json.RawMessage, error) {
	raw, ok := f[key]
	if !ok || IsNull(raw) {
		return nil, BadRequest("%s is required", key)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, BadRequest("%s must be an array of %s", key, what)
	}
	if len(items) == 0 {
		return nil, BadRequest("%s must not be empty", key)
	}
	return items, nil
}

// IsNull says a raw value is JSON null.
func IsNull(v []byte) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// CheckPairs refuses a history whose tool calls and results do not pair up (a call
// without its result, a result without its call, a message between them): the APIs
// refuse it, and it could not be stored or rendered.
func CheckPairs(msgs []schemas.Message) error {
	if err := rounds.CheckPairs(msgs); err != nil {
		return BadRequest("tool calls and results do not pair up: %v", err)
	}
	return nil
}

// InvalidUTF8 returns the offset of the first byte of body that is not UTF-8, -1 when
// none: encoding/json would silently replace it.
func InvalidUTF8(body []byte) int {
	if utf8.Valid(body) {
		return -1
	}
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

// MarshalNoEscape encodes v without HTML escaping and without a trailing newline.
func MarshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// CanonicalJSON is data re-encoded compactly with sorted keys (numbers as written, no
// HTML escaping) when it is one JSON value, and data itself otherwise.
func CanonicalJSON(data []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return data
	}
	out, err := MarshalNoEscape(v)
	if err != nil {
		return data
	}
	return out
}

// RandomID is 12 random bytes in hex: the ids of the proxy's own answers.
func RandomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CompactorFields are the fields of Compactor's wire contract that only a producer
// sets on a message: its token count, the usage and generation of the call that made
// it, its metadata and the object holding its content. A proxy client is an HTTP
// client, not a producer: these fields of a message it sends are never read (a client
// that set them could force compactions, pin messages, or have its request refused as
// over the window).
var CompactorFields = []string{"tokens", "usage", "context_generation", "meta", "content_ref"}

// WithoutCompactorFields is the JSON object raw without CompactorFields (raw itself when
// it has none of them, or is not an object).
func WithoutCompactorFields(raw []byte) []byte {
	var f map[string]json.RawMessage
	if json.Unmarshal(raw, &f) != nil {
		return raw
	}
	found := false
	for _, k := range CompactorFields {
		if _, ok := f[k]; ok {
			delete(f, k)
			found = true
		}
	}
	if !found {
		return raw
	}
	out, err := json.Marshal(f)
	if err != nil {
		return raw
	}
	return out
}

// ClearCompactorFields clears the fields of CompactorFields on m.
func ClearCompactorFields(m *schemas.Message) {
	m.Tokens, m.Usage, m.ContextGeneration, m.Meta, m.ContentRef = 0, nil, nil, nil, nil
	for _, k := range CompactorFields {
		delete(m.Unknown, k)
	}
}

// StripMetadata is cx with Compactor's metadata (tokens, usage, context_generation,
// meta) left out of every message: what an API is sent.
func StripMetadata(cx *assemble.Context) *assemble.Context {
	out := *cx
	out.Messages = make([]schemas.Message, len(cx.Messages))
	for i, m := range cx.Messages {
		out.Messages[i] = m.StripMetadata()
	}
	return &out
}
