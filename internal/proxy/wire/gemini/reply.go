package gemini

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// response is the fields of a GenerateContentResponse (or one chunk of a stream) the
// proxy reads.
type response struct {
	Candidates []struct {
		Content      json.RawMessage `json:"content"`
		FinishReason string          `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *usageMetadata  `json:"usageMetadata"`
	Error         json.RawMessage `json:"error"`
}

type usageMetadata struct {
	PromptTokenCount        int `json:"promptTokenCount"`
	CandidatesTokenCount    int `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int `json:"thoughtsTokenCount"`
	CachedContentTokenCount int `json:"cachedContentTokenCount"`
}

func (u *usageMetadata) usage() *wire.Usage {
	if u == nil {
		return nil
	}
	return &wire.Usage{Input: u.PromptTokenCount, Output: u.CandidatesTokenCount + u.ThoughtsTokenCount, CacheRead: u.CachedContentTokenCount}
}

// contentParts reads a candidate's content: its parts, each a JSON object.
func contentParts(raw json.RawMessage) ([]map[string]json.RawMessage, error) {
	if len(raw) == 0 || wire.IsNull(raw) {
		return nil, nil
	}
	c := fields(raw)
	if c == nil {
		return nil, errors.New("the candidate's content is not a Content object")
	}
	var parts []json.RawMessage
	if v, ok := c["parts"]; ok && !wire.IsNull(v) {
		if err := json.Unmarshal(v, &parts); err != nil {
			return nil, errors.New("the candidate's parts are not an array")
		}
	}
	out := make([]map[string]json.RawMessage, len(parts))
	for i, p := range parts {
		if out[i] = fields(p); out[i] == nil {
			return nil, fmt.Errorf("the candidate's part %d is not an object", i)
		}
	}
	return out, nil
}

// Reply reads a GenerateContentResponse: candidates[0].content read as Parse reads a
// model Content (so the reply stored and the same turn sent back are one message),
// usage from usageMetadata (Output counts the thoughts' tokens too).
func (geminiWire) Reply(body []byte) (schemas.Message, *wire.Usage, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not a GenerateContentResponse: %w", err)
	}
	if len(r.Candidates) == 0 {
		return schemas.Message{}, nil, errors.New("the reply has no candidate")
	}
	parts, err := contentParts(r.Candidates[0].Content)
	if err != nil {
		return schemas.Message{}, nil, err
	}
	m, err := replyMessage(parts)
	if err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply's content: %w", err)
	}
	return m, r.UsageMetadata.usage(), nil
}

// errNoAnswer is the error of a reply with no call and no visible content (nothing,
// thoughts only, blank text): Gemini CLI does not keep such a turn (it retries), so
// the proxy does not store it either.
var errNoAnswer = errors.New("no call and no visible content")

// replyMessage reads the upstream's model Content as Parse reads the same Content sent
// back (the same message to the proxy's digest chain), marked ExtraUpstream.
func replyMessage(parts []map[string]json.RawMessage) (schemas.Message, error) {
	m, _, err := modelMessage(parts)
	if err == nil {
		err = m.Validate()
	}
	if err != nil {
		return schemas.Message{}, err
	}
	x := readExtra(&m)
	x.Upstream = true
	x.set(&m)
	if len(m.ToolCalls) == 0 && strings.TrimSpace(m.Content.String()) == "" {
		visible := false
		if ps, err := m.Content.Parts(); err == nil {
			for _, p := range ps {
				visible = visible || p.Type != "text"
			}
		}
		if !visible {
			return schemas.Message{}, errNoAnswer
		}
	}
	return m, nil
}

// maxStream bounds the bytes a stream accumulator keeps (a variable for the tests).
var maxStream = 64 << 20

func (geminiWire) NewStream() wire.Stream { return &geminiStream{} }

// geminiStream puts a streamGenerateContent event stream back together: each event a
// GenerateContentResponse whose candidates[0].content holds the next parts. Text parts
// that follow each other are one part (thought text apart from answer text) up to the
// one that carries a thoughtSignature; every other part is kept whole. The stream is
// done at the chunk that carries a finishReason; usage is the last usageMetadata.
type geminiStream struct {
	parts        []*streamPart
	usage        *wire.Usage
	size         int
	done, failed bool
}

type streamPart struct {
	f       map[string]json.RawMessage
	text    strings.Builder
	isText  bool
	thought bool
	signed  bool
}

// textOnly says a part is text and nothing else but thought and thoughtSignature.
func textOnly(f map[string]json.RawMessage) bool {
	if _, ok := str(f, "text"); !ok {
		return false
	}
	for k := range f {
		if k != "text" && k != "thought" && k != "thoughtSignature" {
			return false
		}
	}
	return true
}

func (s *geminiStream) Event(name string, data []byte) error {
	if s.failed {
		return nil
	}
	if name == "error" {
		s.failed = true
		return nil
	}
	s.size += len(data)
	if s.size > maxStream {
		return fmt.Errorf("the stream is over %d bytes", maxStream)
	}
	var r response
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("a stream event is not a GenerateContentResponse: %w", err)
	}
	if len(r.Error) > 0 && !wire.IsNull(r.Error) {
		s.failed = true
		return nil
	}
	if r.UsageMetadata != nil {
		s.usage = r.UsageMetadata.usage()
	}
	if s.done || len(r.Candidates) == 0 {
		return nil
	}
	parts, err := contentParts(r.Candidates[0].Content)
	if err != nil {
		return err
	}
	for _, f := range parts {
		s.add(f)
	}
	if r.Candidates[0].FinishReason != "" {
		s.done = true
	}
	return nil
}

// add takes one streamed part.
func (s *geminiStream) add(f map[string]json.RawMessage) {
	if !textOnly(f) {
		s.parts = append(s.parts, &streamPart{f: f})
		return
	}
	t, _ := str(f, "text")
	thought := isTrue(f["thought"])
	sig, hasSig := f["thoughtSignature"]
	if n := len(s.parts); n > 0 {
		last := s.parts[n-1]
		if last.isText && last.thought == thought && !last.signed {
			last.text.WriteString(t)
			if hasSig {
				last.f["thoughtSignature"] = sig
				last.signed = true
			}
			return
		}
	}
	p := &streamPart{f: f, isText: true, thought: thought, signed: hasSig}
	p.text.WriteString(t)
	s.parts = append(s.parts, p)
}

func (s *geminiStream) Done() bool   { return s.done }
func (s *geminiStream) Failed() bool { return s.failed }

func (s *geminiStream) Result() (schemas.Message, *wire.Usage, error) {
	if s.failed {
		return schemas.Message{}, nil, errors.New("the upstream's stream ended with an error")
	}
	if !s.done {
		return schemas.Message{}, nil, errors.New("the stream ended without a finishReason")
	}
	parts := make([]map[string]json.RawMessage, len(s.parts))
	for i, p := range s.parts {
		parts[i] = p.f
		if p.isText {
			parts[i]["text"], _ = wire.MarshalNoEscape(p.text.String())
		}
	}
	m, err := replyMessage(parts)
	if err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the streamed reply: %w", err)
	}
	return m, s.usage, nil
}

// StreamError is a data event holding Gemini's error object (status 500, INTERNAL):
// the event the API itself sends when a stream fails.
func (geminiWire) StreamError(message string) []byte {
	return append(append([]byte("data: "), errorBody(http.StatusInternalServerError, message)...), "\n\n"...)
}

// ErrorBody is Gemini's error shape: {"error": {"code", "message", "status"}}, the
// status the canonical name of the HTTP status (google.rpc.Code).
func (geminiWire) ErrorBody(status int, _ string, message string) []byte {
	return errorBody(status, message)
}

func errorBody(status int, message string) []byte {
	b, _ := wire.MarshalNoEscape(map[string]any{"error": map[string]any{"code": status, "message": message, "status": StatusName(status)}})
	return b
}

// StatusName is the google.rpc.Code name an HTTP status maps to.
func StatusName(status int) string {
	switch status {
	case http.StatusOK:
		return "OK"
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusPreconditionFailed:
		return "FAILED_PRECONDITION"
	case http.StatusRequestedRangeNotSatisfiable:
		return "OUT_OF_RANGE"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	switch {
	case status >= 400 && status < 500:
		return "INVALID_ARGUMENT"
	case status >= 500:
		return "INTERNAL"
	}
	return "UNKNOWN"
}
