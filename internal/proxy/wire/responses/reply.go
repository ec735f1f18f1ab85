package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// responseUsage is a response's usage.
type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u *responseUsage) usage() *wire.Usage {
	if u == nil {
		return nil
	}
	out := &wire.Usage{Input: u.InputTokens, Output: u.OutputTokens}
	if u.InputTokensDetails != nil {
		out.CacheRead = u.InputTokensDetails.CachedTokens
	}
	return out
}

// response is the fields of a response object the wire reads.
type response struct {
	Object string            `json:"object"`
	Status string            `json:"status"`
	Output []json.RawMessage `json:"output"`
	Usage  *responseUsage    `json:"usage"`
}

// Reply reads a response object: its output items as one assistant message.
func (responsesWire) Reply(body []byte) (schemas.Message, *wire.Usage, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not a response: %w", err)
	}
	if r.Object != "response" {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not a response (object %q)", r.Object)
	}
	if r.Status == "failed" {
		return schemas.Message{}, nil, errors.New("the response failed")
	}
	m, err := assistantOf(r.Output)
	if err != nil {
		return schemas.Message{}, nil, err
	}
	return m, r.Usage.usage(), nil
}

// assistantOf reads a response's output items into one assistant message, as Parse
// reads the same items when the client sends them back (Codex sends them back as
// they came, ids, status and annotations included).
func assistantOf(items []json.RawMessage) (schemas.Message, error) {
	var r reader
	for i, raw := range items {
		if err := r.modelItem(raw); err != nil {
			return schemas.Message{}, fmt.Errorf("output[%d]: %w", i, err)
		}
	}
	r.close()
	if len(r.msgs) == 0 {
		return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("")}, nil
	}
	if len(r.msgs) > 1 {
		return schemas.Message{}, errors.New("the output is not one run of the model's items")
	}
	m := r.msgs[0]
	if err := m.Validate(); err != nil {
		return schemas.Message{}, fmt.Errorf("the reply's message: %w", err)
	}
	return m, nil
}

// modelItem reads one of the model's items: anything else is refused.
func (r *reader) modelItem(raw json.RawMessage) error {
	o, err := decodeObj(raw)
	if err != nil {
		return err
	}
	switch t, _ := o.str("type"); {
	case t == "" || t == typeFunctionOutput || t == typeCustomOutput || t == typeLocalShellOuput || clientOutput(t):
		return fmt.Errorf("an item of type %q is not the model's", t)
	case t == typeMessage:
		if role, _ := o.str("role"); role != "assistant" {
			return fmt.Errorf("a message of role %q is not the model's", role)
		}
	}
	return r.item(raw)
}

func (responsesWire) NewStream() wire.Stream { return &responsesStream{items: map[int]*streamItem{}} }

// responsesStream puts a Responses event stream back together: the output items, from
// response.output_item.done or, for an item that has none, from its
// response.output_item.added and deltas.
type responsesStream struct {
	items        map[int]*streamItem
	final        []json.RawMessage // response.completed's output
	usage        *wire.Usage
	done, failed bool
}

// streamItem is one output item being streamed.
type streamItem struct {
	added obj
	whole json.RawMessage
	texts map[int]*strings.Builder // output_text deltas by content_index
	args  strings.Builder          // function_call_arguments / custom_tool_call_input deltas
}

// streamEvent is the fields of a stream event the wire reads.
type streamEvent struct {
	Type         string          `json:"type"`
	OutputIndex  *int            `json:"output_index"`
	ContentIndex int             `json:"content_index"`
	Delta        *string         `json:"delta"`
	Item         json.RawMessage `json:"item"`
	Response     *response       `json:"response"`
}

func (s *responsesStream) Event(name string, data []byte) error {
	if s.done || s.failed {
		return nil
	}
	if name == "error" {
		s.failed = true
		return nil
	}
	if string(data) == "[DONE]" { // compatible servers end the stream so
		return nil
	}
	var e streamEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("a stream event is not a Responses event: %w", err)
	}
	if e.Type == "" {
		e.Type = name
	}
	switch e.Type {
	case "error", "response.failed", "response.incomplete":
		s.failed = true
	case "response.completed":
		if e.Response == nil {
			return errors.New("response.completed without its response")
		}
		s.done = true
		s.usage = e.Response.Usage.usage()
		s.final = e.Response.Output
	case "response.output_item.added":
		if e.OutputIndex == nil || len(e.Item) == 0 {
			return errors.New("response.output_item.added without its output_index and item")
		}
		o, err := decodeObj(e.Item)
		if err != nil {
			return fmt.Errorf("response.output_item.added: the item %w", err)
		}
		s.items[*e.OutputIndex] = &streamItem{added: o}
	case "response.output_item.done":
		if e.OutputIndex == nil || len(e.Item) == 0 {
			return errors.New("response.output_item.done without its output_index and item")
		}
		if _, err := decodeObj(e.Item); err != nil {
			return fmt.Errorf("response.output_item.done: the item %w", err)
		}
		// The item whole: its deltas are no longer needed.
		s.items[*e.OutputIndex] = &streamItem{whole: e.Item}
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		if e.OutputIndex == nil || e.Delta == nil {
			return fmt.Errorf("%s without its output_index and delta", e.Type)
		}
		it := s.items[*e.OutputIndex]
		if it == nil || it.added == nil {
			return fmt.Errorf("%s for output %d, which was not added", e.Type, *e.OutputIndex)
		}
		if e.Type != "response.output_text.delta" {
			it.args.WriteString(*e.Delta)
			return nil
		}
		if it.texts == nil {
			it.texts = map[int]*strings.Builder{}
		}
		b := it.texts[e.ContentIndex]
		if b == nil {
			b = &strings.Builder{}
			it.texts[e.ContentIndex] = b
		}
		b.WriteString(*e.Delta)
	}
	return nil
}

func (s *responsesStream) Done() bool   { return s.done }
func (s *responsesStream) Failed() bool { return s.failed }

func (s *responsesStream) Result() (schemas.Message, *wire.Usage, error) {
	if s.failed {
		return schemas.Message{}, nil, errors.New("the upstream's stream ended with an error")
	}
	if !s.done {
		return schemas.Message{}, nil, errors.New("the stream did not reach response.completed")
	}
	items := s.final
	if len(s.items) > 0 {
		idx := make([]int, 0, len(s.items))
		for i := range s.items {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		items = make([]json.RawMessage, 0, len(idx))
		for _, i := range idx {
			items = append(items, s.items[i].item())
		}
	}
	m, err := assistantOf(items)
	if err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the streamed reply: %w", err)
	}
	return m, s.usage, nil
}

// item is the output item streamed: the done event's, else the added one with its
// deltas.
func (it *streamItem) item() json.RawMessage {
	if it.whole != nil {
		return it.whole
	}
	o := it.added
	switch t, _ := o.str("type"); t {
	case typeMessage:
		if ps, _ := o["content"].([]any); len(ps) == 0 && len(it.texts) > 0 {
			idx := make([]int, 0, len(it.texts))
			for i := range it.texts {
				idx = append(idx, i)
			}
			sort.Ints(idx)
			parts := make([]any, 0, len(idx))
			for _, i := range idx {
				parts = append(parts, obj{"type": "output_text", "text": it.texts[i].String()})
			}
			o["content"] = parts
		}
	case typeFunctionCall:
		a, _ := o.str("arguments")
		o["arguments"] = a + it.args.String()
	case typeCustomCall:
		in, _ := o.str("input")
		o["input"] = in + it.args.String()
	}
	return canon(o)
}

// StreamError is what OpenAI sends when a response fails mid-stream: an error event
// (which the SDKs raise), then response.failed with the error in the response (which
// Codex reads: codex-rs codex-api sse/responses.rs ignores "error" events and reports
// response.failed's response.error).
func (responsesWire) StreamError(message string) []byte {
	e, _ := wire.MarshalNoEscape(map[string]any{"type": "error", "code": "server_error", "message": message, "param": nil, "sequence_number": 0})
	f, _ := wire.MarshalNoEscape(map[string]any{"type": "response.failed", "sequence_number": 0, "response": map[string]any{
		"id": "resp_compactor_proxy", "object": "response", "status": "failed", "output": []any{},
		"error": map[string]any{"code": "server_error", "message": message}}})
	return []byte("event: error\ndata: " + string(e) + "\n\nevent: response.failed\ndata: " + string(f) + "\n\n")
}

// ErrorBody is OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
func (responsesWire) ErrorBody(_ int, kind, message string) []byte {
	b, _ := wire.MarshalNoEscape(map[string]any{"error": map[string]any{"message": message, "type": kind, "param": nil, "code": nil}})
	return b
}
