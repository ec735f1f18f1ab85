package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrInvalid is matched by every validation error (errors.Is(err, ErrInvalid)).
var ErrInvalid = errors.New("invalid")

// ValidationError names the field that broke a rule of the wire contract.
type ValidationError struct {
	Field string // e.g. "tool_calls[0].function.name"
	Rule  string // e.g. "must not be empty"
	// Cause, when set, is a sentinel a caller can match with errors.Is.
	Cause error
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Rule }

// Unwrap returns Cause.
func (e *ValidationError) Unwrap() error { return e.Cause }

// Is makes every ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// MaxConversationIDLen is the longest conversation id the contract allows.
const MaxConversationIDLen = 128

// ValidateConversationID checks the id rule: 1–128 characters of [A-Za-z0-9_-].
// Ids are never rewritten: anything else is refused.
func ValidateConversationID(id string) error {
	if id == "" {
		return invalid("conversation", "must not be empty (1-128 characters of [A-Za-z0-9_-])")
	}
	pos := 0
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return invalid("conversation", "character %q at position %d is not allowed; use only [A-Za-z0-9_-] (1-128 characters)", r, pos)
		}
		pos++
	}
	if len(id) > MaxConversationIDLen {
		return invalid("conversation", "is %d characters long; at most %d of [A-Za-z0-9_-] are allowed", len(id), MaxConversationIDLen)
	}
	return nil
}

// Validate checks one message on its own against the wire contract. Whether a tool
// message answers a call that exists is a property of the conversation, checked by
// the publisher and the reader.
func (m *Message) Validate() error {
	if m.Role == "" {
		return invalid("role", "is required (system, user, assistant or tool)")
	}
	if !m.Role.Valid() {
		return invalid("role", "unknown role %q; must be system, user, assistant or tool", string(m.Role))
	}
	str, err := m.validateUTF8()
	if err != nil {
		return err
	}
	if err := validateContent(m, str); err != nil {
		return err
	}
	if len(m.ToolCalls) > 0 && m.Role != RoleAssistant {
		return invalid("tool_calls", "only assistant messages may call tools, not %s", m.Role)
	}
	seen := make(map[string]bool, len(m.ToolCalls))
	for i, tc := range m.ToolCalls {
		if tc.ID == "" {
			return invalid(toolCallField(i, "id"), "must not be empty")
		}
		if seen[tc.ID] {
			return invalid(toolCallField(i, "id"), "%q is used twice in the same message", tc.ID)
		}
		seen[tc.ID] = true
		if tc.Type != "function" {
			return invalid(toolCallField(i, "type"), "must be \"function\", not %q", tc.Type)
		}
		if tc.Function.Name == "" {
			return invalid(toolCallField(i, "function.name"), "must not be empty")
		}
	}
	switch {
	case m.Role == RoleTool && m.ToolCallID == "":
		return invalid("tool_call_id", "is required on a tool message")
	case m.Role != RoleTool && m.ToolCallID != "":
		return invalid("tool_call_id", "is only allowed on a tool message, not %s", m.Role)
	}
	if len(m.Extra) > 0 {
		if t := bytes.TrimSpace(m.Extra); len(t) == 0 || t[0] != '{' || !json.Valid(t) {
			return invalid("extra", "must be a JSON object")
		}
	}
	if m.Tokens < 0 {
		return invalid("tokens", "must not be negative")
	}
	if m.ContentRef != nil {
		if err := m.ContentRef.validate(); err != nil {
			return err
		}
	}
	if m.Usage != nil && (m.Usage.PromptTokens < 0 || m.Usage.CompletionTokens < 0 || m.Usage.TotalTokens < 0 || m.Usage.CachedTokens < 0) {
		return invalid("usage", "token counts must not be negative")
	}
	return nil
}

func validateContent(m *Message, str int) error {
	c := m.Content
	switch {
	case c.IsNull():
		if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
			return nil
		}
		return invalid("content", "is required on a %s message (null is allowed only beside tool_calls)", m.Role)
	case c.IsString():
		if str != notAString {
			return nil
		}
		// Not a string literal: the decoder says why.
		var s string
		if err := json.Unmarshal(c.raw, &s); err != nil {
			return invalid("content", "is not a valid JSON string: %v", err)
		}
		return invalid("content", "is not a valid JSON string")
	case c.IsParts():
		var raws []json.RawMessage
		if err := json.Unmarshal(c.raw, &raws); err != nil {
			return invalid("content", "is not a valid array of content parts: %v", err)
		}
		for i, r := range raws {
			if err := validatePart(fmt.Sprintf("content[%d]", i), r); err != nil {
				return err
			}
		}
		return nil
	}
	return invalid("content", "must be a string, an array of content parts or null")
}

func validatePart(field string, raw json.RawMessage) error {
	var p map[string]json.RawMessage
	if err := json.Unmarshal(raw, &p); err != nil || p == nil {
		return invalid(field, "must be a JSON object")
	}
	var typ string
	if err := json.Unmarshal(p["type"], &typ); err != nil || typ == "" {
		return invalid(field+".type", "is required and must be a string")
	}
	// Each known part type must carry its payload field; unknown types are kept verbatim.
	need := map[string]string{
		"text": "text", "image_url": "image_url", "input_audio": "input_audio",
		"file": "file", "refusal": "refusal",
	}[typ]
	if need == "" {
		return nil
	}
	v, ok := p[need]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return invalid(field+"."+need, "is required on a %q part", typ)
	}
	if typ == "text" {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return invalid(field+".text", "must be a string")
		}
	}
	return nil
}

// validateUTF8 refuses text that is not valid UTF-8. JSON cannot carry it: encoding/json
// (and every other reader's decoder) would replace it with U+FFFD, so the bytes stored
// would differ from the producer's without anyone being told. NUL is valid UTF-8 and is
// kept as data.
func (m *Message) validateUTF8() (str int, err error) {
	bad := func(field string, off int) error {
		return invalid(field, "is not valid UTF-8 (first bad byte at offset %d); encode binary data, e.g. as base64", off)
	}
	// A string content (nearly every message) is scanned once for both: what kind of
	// literal it is (str, for validateContent) and its UTF-8.
	str = notAString
	if raw := m.Content.raw; m.Content.IsString() {
		lit := bytes.TrimLeft(raw, " \t\r\n")
		kind, off := scanValidJSONString(trimJSONSpace(lit))
		switch {
		case off >= 0:
			return notAString, bad("content", len(raw)-len(lit)+off)
		case kind == notAString:
			if off := badUTF8(raw); off >= 0 { // the scan broke off before any bad byte
				return notAString, bad("content", off)
			}
		}
		str = kind
	} else if off := badUTF8(raw); off >= 0 {
		return notAString, bad("content", off)
	}
	if off := badUTF8(m.Extra); off >= 0 {
		return notAString, bad("extra", off)
	}
	for _, f := range [...]struct{ field, s string }{{"name", m.Name}, {"tool_call_id", m.ToolCallID}, {"reasoning", m.Reasoning}} {
		if off := badUTF8String(f.s); off >= 0 {
			return notAString, bad(f.field, off)
		}
	}
	for i, tc := range m.ToolCalls {
		for _, f := range [...]struct{ field, s string }{{"id", tc.ID}, {"type", tc.Type}, {"function.name", tc.Function.Name}, {"function.arguments", tc.Function.Arguments}} {
			if off := badUTF8String(f.s); off >= 0 {
				return notAString, bad(toolCallField(i, f.field), off)
			}
		}
	}
	for k, v := range m.Meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return notAString, invalid("meta", "key or value is not valid UTF-8")
		}
	}
	for k, v := range m.Unknown {
		if off := badUTF8(v); off >= 0 || !utf8.ValidString(k) {
			return notAString, invalid("message", "unknown field %q is not valid UTF-8", k)
		}
	}
	return str, nil
}

// toolCallField names a field of the i-th tool call for an error: it is formatted
// only when a message breaks a rule.
func toolCallField(i int, field string) string { return fmt.Sprintf("tool_calls[%d].%s", i, field) }

// badUTF8String is badUTF8 of a string, without copying it when it is valid.
func badUTF8String(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	return badUTF8([]byte(s))
}

// badUTF8 returns the offset of the first byte of b that is not valid UTF-8, or -1.
func badUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for off := 0; off < len(b); {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			return off
		}
		off += n
	}
	return -1
}
