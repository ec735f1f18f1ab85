package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor/compactor/internal/proxy/wire"
	"sort"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

// OpenAI returns the wire of OpenAI Chat Completions (POST /v1/chat/completions).
//
// Parse reads "messages" as Compactor's messages (the chat format is Compactor's own):
// each is decoded and validated like a published message, except that role
// "developer" is read as "system" (OpenAI's own models treat the two alike); a history
// whose tool calls and results do not pair up is refused, as the API refuses it. Build
// replaces "messages" with the context's messages, Compactor's metadata (tokens,
// usage, context_generation, meta) left out.
func OpenAI() wire.Wire { return openAIWire{} }

type openAIWire struct{}

func (openAIWire) Name() string { return "openai" }

func (openAIWire) Parse(body []byte) (*wire.Request, error) {
	f, err := wire.RequestFields(body)
	if err != nil {
		return nil, err
	}
	req := &wire.Request{Body: body}
	if err := wire.CommonFields(f, req, "max_completion_tokens", "max_tokens"); err != nil {
		return nil, err
	}
	items, err := wire.Array(f, "messages", "messages")
	if err != nil {
		return nil, err
	}
	req.Messages = make([]schemas.Message, len(items))
	for i, it := range items {
		m, err := decodeOpenAIMessage(it)
		if err != nil {
			return nil, wire.BadRequest("messages[%d]: %v", i, err)
		}
		req.Messages[i] = m
	}
	if err := wire.CheckPairs(req.Messages); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeOpenAIMessage decodes one client message: role developer is read as system,
// and Compactor's own fields (wire.CompactorFields) are not read.
func decodeOpenAIMessage(raw []byte) (schemas.Message, error) {
	raw = wire.WithoutCompactorFields(raw)
	m, err := schemas.DecodeMessage(raw)
	if err == nil {
		return m, nil
	}
	var ve *schemas.ValidationError
	if errors.As(err, &ve) && ve.Field == "role" {
		var r struct {
			Role string `json:"role"`
		}
		if json.Unmarshal(raw, &r) == nil && r.Role == "developer" {
			if json.Unmarshal(raw, &m) == nil {
				m.Role = schemas.RoleSystem
				if err := m.Validate(); err == nil {
					return m, nil
				}
			}
		}
	}
	return schemas.Message{}, err
}

func (openAIWire) Build(req *wire.Request, cx *assemble.Context) ([]byte, error) {
	if cx == nil {
		return nil, errors.New("no context to send")
	}
	stripped := *cx
	stripped.Messages = make([]schemas.Message, len(cx.Messages))
	for i, m := range cx.Messages {
		stripped.Messages[i] = m.StripMetadata()
	}
	r, err := formats.Render(&stripped, formats.OpenAI)
	if err != nil {
		return nil, err
	}
	f, err := wire.FieldMap(r.JSON)
	if err != nil {
		return nil, err
	}
	return wire.SetFields(req.Body, wire.Edit{Key: "messages", Value: f["messages"]})
}

// openAIMessage is the assistant message of a reply (choices[].message) or the
// delta of a stream chunk.
type openAIMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Refusal   *string         `json:"refusal"`
	ToolCalls []openAICall    `json:"tool_calls"`
}

type openAICall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *openAIUsage) usage() *wire.Usage {
	if u == nil {
		return nil
	}
	out := &wire.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CacheRead = u.PromptTokensDetails.CachedTokens
	}
	return out
}

func (openAIWire) Reply(body []byte) (schemas.Message, *wire.Usage, error) {
	var r struct {
		Choices []struct {
			Message *openAIMessage `json:"message"`
		} `json:"choices"`
		Usage *openAIUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return schemas.Message{}, nil, fmt.Errorf("the reply is not a chat completion: %w", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].Message == nil {
		return schemas.Message{}, nil, errors.New("the reply has no choices[0].message")
	}
	m, err := r.Choices[0].Message.assistant()
	if err != nil {
		return schemas.Message{}, nil, err
	}
	return m, r.Usage.usage(), nil
}

// assistant returns the reply as Compactor's assistant message: its content (the
// refusal as text when it has none) and its tool calls. Other fields (a compatible
// server's reasoning, annotations, audio) are not kept: the model is never sent a field
// the client did not send.
func (o *openAIMessage) assistant() (schemas.Message, error) {
	m := schemas.Message{Role: schemas.RoleAssistant}
	switch {
	case len(o.Content) > 0 && !wire.IsNull(o.Content):
		m.Content = schemas.RawContent(o.Content)
	case o.Refusal != nil && *o.Refusal != "":
		m.Content = schemas.Text(*o.Refusal)
	case len(o.ToolCalls) == 0:
		m.Content = schemas.Text("")
	}
	for _, c := range o.ToolCalls {
		tc := schemas.ToolCall{ID: c.ID, Type: c.Type, Function: schemas.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}}
		if tc.Type == "" {
			tc.Type = "function"
		}
		m.ToolCalls = append(m.ToolCalls, tc)
	}
	if err := m.Validate(); err != nil {
		return schemas.Message{}, fmt.Errorf("the reply's message: %w", err)
	}
	return m, nil
}

func (openAIWire) NewStream() wire.Stream {
	return &openAIStream{calls: map[int]*openAICall{}, args: map[*openAICall]*strings.Builder{}}
}

func (openAIWire) StreamError(message string) []byte {
	// go-openai recognises an error event only by the exact prefix `data: {"error":`;
	// the openai npm package by a data object with an error field.
	e := struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}{}
	e.Error.Message = message
	e.Error.Type = "proxy_error"
	b, _ := json.Marshal(e)
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// openAIStream puts a chat completion chunk stream back together: choice 0's deltas.
type openAIStream struct {
	role         string
	content      bytes.Buffer
	hasContent   bool
	refusal      bytes.Buffer
	calls        map[int]*openAICall
	args         map[*openAICall]*strings.Builder // each call's arguments, appended in linear time
	last, next   int                              // the slot of the last call added to, and the first slot free
	usage        *wire.Usage
	done, failed bool
	// finished: choice 0 came with its finish_reason.
	finished bool
}

func (s *openAIStream) Event(name string, data []byte) error {
	if s.done {
		return nil
	}
	if name == "error" {
		s.failed = true
		return nil
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		s.done = true
		return nil
	}
	var c struct {
		Error   json.RawMessage `json:"error"`
		Choices []struct {
			Index        int            `json:"index"`
			Delta        *openAIMessage `json:"delta"`
			FinishReason *string        `json:"finish_reason"`
		} `json:"choices"`
		Usage *openAIUsage `json:"usage"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("a stream event is not a chat completion chunk: %w", err)
	}
	if len(c.Error) > 0 && !wire.IsNull(c.Error) {
		s.failed = true
		return nil
	}
	if c.Usage != nil {
		s.usage = c.Usage.usage()
	}
	for _, ch := range c.Choices {
		if ch.Index == 0 && ch.Delta != nil {
			s.add(ch.Delta)
		}
		if ch.Index == 0 && ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finished = true
		}
	}
	return nil
}

// add takes one delta of choice 0.
func (s *openAIStream) add(d *openAIMessage) {
	if d.Role != "" {
		s.role = d.Role
	}
	if len(d.Content) > 0 && !wire.IsNull(d.Content) {
		var text string
		if json.Unmarshal(d.Content, &text) == nil {
			s.content.WriteString(text)
			s.hasContent = true
		}
	}
	if d.Refusal != nil {
		s.refusal.WriteString(*d.Refusal)
	}
	for _, tc := range d.ToolCalls {
		c := s.call(tc)
		if tc.ID != "" {
			c.ID = tc.ID
		}
		if tc.Type != "" {
			c.Type = tc.Type
		}
		c.Function.Name += tc.Function.Name
		b := s.args[c]
		if b == nil {
			b = &strings.Builder{}
			s.args[c] = b
		}
		b.WriteString(tc.Function.Arguments)
	}
}

// call returns the call a tool-call delta adds to: the one at its index; a new one
// for a delta without an index that brings an id, or whose id differs from the id
// already at its index (servers that number every call 0); else the last one.
func (s *openAIStream) call(tc openAICall) *openAICall {
	slot := s.last
	switch {
	case tc.Index != nil:
		slot = *tc.Index
	case tc.ID != "":
		slot = s.next
	}
	if c := s.calls[slot]; c != nil && c.ID != "" && tc.ID != "" && c.ID != tc.ID {
		slot = s.next
	}
	c := s.calls[slot]
	if c == nil {
		c = &openAICall{}
		s.calls[slot] = c
	}
	s.last, s.next = slot, max(s.next, slot+1)
	return c
}

func (s *openAIStream) Done() bool { return s.done }

// Closed implements wire.Closer: a stream the upstream closed cleanly after choice 0's
// finish_reason is whole without [DONE].
func (s *openAIStream) Closed() bool {
	if !s.done && s.finished && !s.failed {
		s.done = true
	}
	return s.done
}
func (s *openAIStream) Failed() bool { return s.failed }

func (s *openAIStream) Result() (schemas.Message, *wire.Usage, error) {
	if s.failed {
		return schemas.Message{}, nil, errors.New("the upstream's stream ended with an error")
	}
	if !s.done {
		return schemas.Message{}, nil, errors.New("the stream did not reach [DONE]")
	}
	o := openAIMessage{Role: s.role}
	if s.hasContent {
		o.Content = schemas.Text(s.content.String()).Raw()
	}
	if s.refusal.Len() > 0 {
		r := s.refusal.String()
		o.Refusal = &r
	}
	idx := make([]int, 0, len(s.calls))
	for i := range s.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		c := *s.calls[i]
		if b := s.args[s.calls[i]]; b != nil {
			c.Function.Arguments = b.String()
		}
		o.ToolCalls = append(o.ToolCalls, c)
	}
	m, err := o.assistant()
	return m, s.usage, err
}

// ErrorBody is OpenAI's error shape: {"error": {"message", "type", "param", "code"}}.
func (openAIWire) ErrorBody(_ int, kind, message string) []byte {
	b, _ := wire.MarshalNoEscape(map[string]any{"error": map[string]any{"message": message, "type": kind, "param": nil, "code": nil}})
	return b
}
