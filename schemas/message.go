package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// Role is the author of a chat message.
type Role string

// The roles of the OpenAI chat format.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is one of the four roles of the wire contract.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// MetaPin is the meta key that, set to "true", keeps a message verbatim forever.
const MetaPin = "pin"

// Message is one chat event in OpenAI chat format, as published on chat.<conv>.msg.
//
// Content, Extra and any field this version does not know are kept as the
// producer sent them and written back byte for byte by Encode.
type Message struct {
	Role       Role       `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Reasoning  string     `json:"reasoning,omitempty"`
	// Extra is any JSON object the producer wants back untouched (signed thinking blocks, ids).
	Extra json.RawMessage `json:"extra,omitempty"`

	// Compactor's own metadata; the reader strips it unless raw messages are asked for.

	// Tokens is the exact token count of this message when the producer knows it.
	Tokens int `json:"tokens,omitempty"`
	// Usage is what the agent's model reported for the call that produced this message.
	Usage *Usage `json:"usage,omitempty"`
	// ContextGeneration is the compaction generation of the context that call was sent;
	// usage without it is ignored.
	ContextGeneration *uint64 `json:"context_generation,omitempty"`
	// Meta is free-form string metadata; Meta["pin"] == "true" pins the message.
	Meta map[string]string `json:"meta,omitempty"`

	// Unknown holds top-level fields this version does not know, kept verbatim.
	Unknown map[string]json.RawMessage `json:"-"`
}

// Usage is the token usage an LLM reported for one call.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens,omitempty"`
}

// ToolCall is one function call an assistant message asks for.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Pinned reports whether the producer pinned the message with meta.pin = "true".
func (m *Message) Pinned() bool { return m.Meta[MetaPin] == "true" }

// HasToolCalls reports whether m is an assistant message that calls tools.
func (m *Message) HasToolCalls() bool { return m.Role == RoleAssistant && len(m.ToolCalls) > 0 }

// StripMetadata returns a copy of m without Compactor's own metadata
// (tokens, usage, context_generation, meta): what a model should be sent.
func (m Message) StripMetadata() Message {
	m.Tokens = 0
	m.Usage = nil
	m.ContextGeneration = nil
	m.Meta = nil
	return m
}

var knownMessageFields = map[string]bool{
	"role": true, "content": true, "name": true, "tool_calls": true, "tool_call_id": true,
	"reasoning": true, "extra": true, "tokens": true, "usage": true, "context_generation": true,
	"meta": true,
}

// messageFields is Message without its methods, for plain decoding.
type messageFields struct {
	Role              Role              `json:"role"`
	Content           Content           `json:"content"`
	Name              string            `json:"name"`
	ToolCalls         []ToolCall        `json:"tool_calls"`
	ToolCallID        string            `json:"tool_call_id"`
	Reasoning         string            `json:"reasoning"`
	Extra             json.RawMessage   `json:"extra"`
	Tokens            int               `json:"tokens"`
	Usage             *Usage            `json:"usage"`
	ContextGeneration *uint64           `json:"context_generation"`
	Meta              map[string]string `json:"meta"`
}

// UnmarshalJSON decodes a message and keeps unknown top-level fields in Unknown.
func (m *Message) UnmarshalJSON(data []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	var f messageFields
	if err := json.Unmarshal(data, &f); err != nil {
		return err
	}
	*m = Message{
		Role: f.Role, Content: f.Content, Name: f.Name, ToolCalls: f.ToolCalls,
		ToolCallID: f.ToolCallID, Reasoning: f.Reasoning, Extra: f.Extra, Tokens: f.Tokens,
		Usage: f.Usage, ContextGeneration: f.ContextGeneration, Meta: f.Meta,
	}
	if c, ok := all["content"]; ok {
		m.Content = Content{raw: bytes.Clone(c)}
	}
	if len(m.Extra) > 0 {
		m.Extra = bytes.Clone(m.Extra)
	}
	for k, v := range all {
		if !knownMessageFields[k] {
			if m.Unknown == nil {
				m.Unknown = make(map[string]json.RawMessage)
			}
			m.Unknown[k] = bytes.Clone(v)
		}
	}
	return nil
}

// MarshalJSON encodes the message; see Encode.
func (m Message) MarshalJSON() ([]byte, error) { return m.Encode() }

// Encode writes the message as one JSON object. Content, Extra and unknown fields are
// written exactly as they were received. (encoding/json re-compacts the output of
// MarshalJSON; call Encode directly where byte-for-byte output matters.)
func (m *Message) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"role":`)
	writeJSONString(&b, string(m.Role))
	b.WriteString(`,"content":`)
	if m.Content.IsNull() {
		b.WriteString("null")
	} else {
		b.Write(m.Content.raw)
	}
	if m.Name != "" {
		b.WriteString(`,"name":`)
		writeJSONString(&b, m.Name)
	}
	if len(m.ToolCalls) > 0 {
		tc, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"tool_calls":`)
		b.Write(tc)
	}
	if m.ToolCallID != "" {
		b.WriteString(`,"tool_call_id":`)
		writeJSONString(&b, m.ToolCallID)
	}
	if m.Reasoning != "" {
		b.WriteString(`,"reasoning":`)
		writeJSONString(&b, m.Reasoning)
	}
	if len(m.Extra) > 0 {
		b.WriteString(`,"extra":`)
		b.Write(m.Extra)
	}
	if m.Tokens != 0 {
		b.WriteString(`,"tokens":`)
		b.WriteString(strconv.Itoa(m.Tokens))
	}
	if m.Usage != nil {
		u, _ := json.Marshal(m.Usage)
		b.WriteString(`,"usage":`)
		b.Write(u)
	}
	if m.ContextGeneration != nil {
		b.WriteString(`,"context_generation":`)
		b.WriteString(strconv.FormatUint(*m.ContextGeneration, 10))
	}
	if len(m.Meta) > 0 {
		mm, _ := json.Marshal(m.Meta)
		b.WriteString(`,"meta":`)
		b.Write(mm)
	}
	if len(m.Unknown) > 0 {
		keys := make([]string, 0, len(m.Unknown))
		for k := range m.Unknown {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteByte(',')
			writeJSONString(&b, k)
			b.WriteByte(':')
			b.Write(m.Unknown[k])
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// DecodeMessage parses and validates one wire message.
func DecodeMessage(data []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		return Message{}, &ValidationError{Field: "message", Rule: fmt.Sprintf("must be a JSON object: %v", err)}
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s)
	b.Write(enc)
}
