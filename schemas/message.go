package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
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

	// Tokens is the token count of this message when the producer knows it: a hint that
	// counts never below tokens.Floor, a token per 8 UTF-8 bytes of the text.
	Tokens int `json:"tokens,omitempty"`
	// Usage is what the agent's model reported for the call that produced this message.
	// PromptTokens must count the whole context, cached tokens included; the trigger
	// ignores a usage under half its own estimate.
	Usage *Usage `json:"usage,omitempty"`
	// ContextGeneration is the compaction generation of the context that call was sent;
	// usage without it is ignored.
	ContextGeneration *uint64 `json:"context_generation,omitempty"`
	// Meta is free-form string metadata; Meta["pin"] == "true" pins the message.
	Meta map[string]string `json:"meta,omitempty"`

	// ContentRef, on a stub, points at the object that holds the message's content (see
	// ContentRef): readers restore the message from it before showing it.
	ContentRef *ContentRef `json:"content_ref,omitempty"`

	// Unknown holds top-level fields this version does not know, kept verbatim.
	Unknown map[string]json.RawMessage `json:"-"`
}

// Usage is the token usage an LLM reported for one call.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens,omitempty"`
	// CachedTokens is the part of PromptTokens the endpoint served from its prompt
	// cache (usage.prompt_tokens_details.cached_tokens in OpenAI's format), where it
	// reports them.
	CachedTokens int `json:"cached_tokens,omitempty"`
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

// messageFieldOrder lists the top-level fields of the wire contract in the order
// Encode writes them (and UnmarshalJSON reads them, so its first error is stable).
var messageFieldOrder = []string{
	"role", "content", "name", "tool_calls", "tool_call_id", "reasoning", "extra",
	"tokens", "usage", "context_generation", "meta", "content_ref",
}

// messageFieldWant says what each field must hold, for decode errors.
var messageFieldWant = map[string]string{
	"role":               "must be a string",
	"name":               "must be a string",
	"tool_calls":         "must be an array of {id, type, function: {name, arguments}}",
	"tool_call_id":       "must be a string",
	"reasoning":          "must be a string",
	"tokens":             "must be an integer",
	"usage":              "must be an object {prompt_tokens, completion_tokens}",
	"context_generation": "must be a non-negative integer",
	"meta":               "must be an object of string values",
	"content_ref":        "must be an object {bucket, name, size, sha256, tokens}",
}

// UnmarshalJSON decodes a message. Only the exact (lower-case) field names of the wire
// contract are read; every other top-level field, a differently cased known name
// included, is kept verbatim in Unknown. JSON null in an optional field means absent.
// A field of the wrong type is reported as a *ValidationError naming it.
func (m *Message) UnmarshalJSON(data []byte) error {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	*m = Message{}
	for _, k := range messageFieldOrder {
		v, ok := all[k]
		if !ok {
			continue
		}
		if err := m.decodeField(k, v); err != nil {
			return &ValidationError{Field: k, Rule: fmt.Sprintf("%s (%v)", messageFieldWant[k], err)}
		}
		delete(all, k)
	}
	for k, v := range all {
		if m.Unknown == nil {
			m.Unknown = make(map[string]json.RawMessage, len(all))
		}
		m.Unknown[k] = bytes.Clone(v)
	}
	return nil
}

// decodeField decodes the known field k from its raw value v.
func (m *Message) decodeField(k string, v json.RawMessage) error {
	switch k {
	case "role":
		return json.Unmarshal(v, &m.Role)
	case "content":
		m.Content = Content{raw: bytes.Clone(v)}
	case "name":
		return json.Unmarshal(v, &m.Name)
	case "tool_calls":
		return json.Unmarshal(v, &m.ToolCalls)
	case "tool_call_id":
		return json.Unmarshal(v, &m.ToolCallID)
	case "reasoning":
		return json.Unmarshal(v, &m.Reasoning)
	case "extra":
		if !isJSONNull(v) {
			m.Extra = bytes.Clone(v)
		}
	case "tokens":
		return json.Unmarshal(v, &m.Tokens)
	case "usage":
		return json.Unmarshal(v, &m.Usage)
	case "context_generation":
		return json.Unmarshal(v, &m.ContextGeneration)
	case "meta":
		return json.Unmarshal(v, &m.Meta)
	case "content_ref":
		return json.Unmarshal(v, &m.ContentRef)
	}
	return nil
}

func isJSONNull(v []byte) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// MarshalJSON encodes the message; see Encode.
func (m Message) MarshalJSON() ([]byte, error) { return m.Encode() }

// Encode writes the message as one JSON object. Content, Extra and unknown fields are
// written exactly as they were received. (encoding/json re-compacts the output of
// MarshalJSON; call Encode directly where byte-for-byte output matters.)
func (m *Message) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(m.encodedSizeHint())
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
		b.WriteString(`,"tool_calls":`)
		writeToolCalls(&b, m.ToolCalls)
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
	if m.ContentRef != nil {
		r, _ := json.Marshal(m.ContentRef)
		b.WriteString(`,"content_ref":`)
		b.Write(r)
	}
	writeUnknown(&b, m.Unknown)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeUnknown writes unknown top-level fields as `,"key":value` pairs, in key order.
func writeUnknown(b *bytes.Buffer, unknown map[string]json.RawMessage) {
	keys := make([]string, 0, len(unknown))
	for k := range unknown {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte(',')
		writeJSONString(b, k)
		b.WriteByte(':')
		b.Write(unknown[k])
	}
}

// DecodeMessage parses and validates one wire message. Every error it returns is a
// *ValidationError (errors.Is(err, ErrInvalid)) naming the field and the rule broken.
func DecodeMessage(data []byte) (Message, error) {
	// Checked before decoding: encoding/json would turn invalid bytes into U+FFFD.
	if off := badUTF8(data); off >= 0 {
		return Message{}, invalid("message", "is not valid UTF-8 (first bad byte at offset %d)", off)
	}
	var m Message
	if err := json.Unmarshal(data, &m); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return Message{}, err
		}
		return Message{}, &ValidationError{Field: "message", Rule: fmt.Sprintf("must be a JSON object: %v", err)}
	}
	if err := m.Validate(); err != nil {
		return Message{}, err
	}
	return m, nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	if plainJSONString(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	enc, _ := json.Marshal(s)
	b.Write(enc)
}
