package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Content is a message's content: a string, an array of content parts, or null.
// It keeps the producer's JSON bytes, so content parts come back verbatim.
type Content struct {
	raw json.RawMessage
}

// ContentPart is one element of an array content. Only Type and Text are read;
// the part itself is kept verbatim in its Content.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Raw is the part exactly as sent.
	Raw json.RawMessage `json:"-"`
	// Fields is the size in bytes of the part's fields other than its type (and, for a
	// text part, its text): each name and its value as sent. A token count reads it
	// (schemas/tokens), so a part cannot hide bytes in fields of its own.
	Fields int `json:"-"`
}

// Text returns a string content.
//
// Invalid UTF-8 in s is kept as it is, not replaced with U+FFFD as encoding/json would,
// so that Validate refuses the message instead of it being changed silently.
func Text(s string) Content {
	if utf8.ValidString(s) {
		b, _ := json.Marshal(s)
		return Content{raw: b}
	}
	b := []byte{'"'}
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[0])
		} else {
			enc, _ := json.Marshal(s[:n])
			b = append(b, enc[1:len(enc)-1]...)
		}
		s = s[n:]
	}
	return Content{raw: append(b, '"')}
}

// Parts returns an array content made of the given raw JSON parts.
func Parts(parts ...json.RawMessage) Content {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p)
	}
	b.WriteByte(']')
	return Content{raw: b.Bytes()}
}

// RawContent wraps raw JSON (a string, an array or null) as content without checking it;
// Validate checks it.
func RawContent(raw json.RawMessage) Content { return Content{raw: bytes.Clone(raw)} }

// Raw returns the content's JSON bytes (nil when absent).
func (c Content) Raw() json.RawMessage { return c.raw }

// IsNull reports whether the content is absent or JSON null.
func (c Content) IsNull() bool {
	t := bytes.TrimSpace(c.raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// IsString reports whether the content is a JSON string.
func (c Content) IsString() bool {
	t := bytes.TrimSpace(c.raw)
	return len(t) > 0 && t[0] == '"'
}

// IsParts reports whether the content is an array of content parts.
func (c Content) IsParts() bool {
	t := bytes.TrimSpace(c.raw)
	return len(t) > 0 && t[0] == '['
}

// String returns the text of a string content, or the text parts of an array
// content joined by newlines. Non-text parts contribute nothing.
func (c Content) String() string {
	switch {
	case c.IsString():
		// Most contents are strings without an escape: their text is their bytes, and
		// a token count (every message the trigger sees) need not run a JSON decoder.
		if s, ok := unquote(trimJSONSpace(c.raw)); ok {
			return s
		}
		var s string
		_ = json.Unmarshal(c.raw, &s)
		return s
	case c.IsParts():
		parts, err := c.Parts()
		if err != nil {
			return ""
		}
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, "\n")
	}
	return ""
}

// TextWithPlaceholders is the content's text as a person or a model reads it: a
// string's text, or the parts' joined by newlines with each non-text part named by its
// Placeholder; an array that cannot be decoded gives what String gives.
func (c Content) TextWithPlaceholders() string {
	if !c.IsParts() {
		return c.String()
	}
	parts, err := c.Parts()
	if err != nil {
		return c.String()
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		} else {
			texts = append(texts, p.Placeholder())
		}
	}
	return strings.Join(texts, "\n")
}

// Parts decodes an array content. It returns nil for string or null content. Like
// Validate it reads only the exact keys "type" and, of a text part, "text": a part of
// another type is kept whatever its other fields hold.
func (c Content) Parts() ([]ContentPart, error) {
	if !c.IsParts() {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(c.raw, &raws); err != nil {
		return nil, err
	}
	parts := make([]ContentPart, len(raws))
	for i, r := range raws {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(r, &fields); err != nil {
			return nil, err
		}
		if v, ok := fields["type"]; ok {
			if err := json.Unmarshal(v, &parts[i].Type); err != nil {
				return nil, err
			}
		}
		if v, ok := fields["text"]; ok && parts[i].Type == "text" {
			if t, ok := unquote(v); ok {
				parts[i].Text = t // the common case, without a second JSON decoder pass
			} else if err := json.Unmarshal(v, &parts[i].Text); err != nil {
				return nil, err
			}
		}
		for k, v := range fields {
			if k != "type" && (k != "text" || parts[i].Type != "text") {
				parts[i].Fields += len(k) + len(v)
			}
		}
		parts[i].Raw = r
	}
	return parts, nil
}

// MarshalJSON writes the content bytes as received (null when absent).
func (c Content) MarshalJSON() ([]byte, error) {
	if c.IsNull() {
		return []byte("null"), nil
	}
	return c.raw, nil
}

// UnmarshalJSON keeps the content bytes as received.
func (c *Content) UnmarshalJSON(data []byte) error {
	c.raw = bytes.Clone(data)
	return nil
}

// Placeholder names a non-text part in a text rendering: [image], [audio], [file] (with
// its file name when it has one), [refusal: text], or the part's type in brackets.
func (p ContentPart) Placeholder() string {
	oneLine := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	switch p.Type {
	case "image_url", "image":
		return "[image]"
	case "input_audio", "audio":
		return "[audio]"
	case "file":
		var f struct {
			File struct {
				Filename string `json:"filename"`
			} `json:"file"`
		}
		if json.Unmarshal(p.Raw, &f) == nil && f.File.Filename != "" {
			return "[file: " + oneLine(f.File.Filename) + "]"
		}
		return "[file]"
	case "refusal":
		var r struct {
			Refusal string `json:"refusal"`
		}
		if json.Unmarshal(p.Raw, &r) == nil && r.Refusal != "" {
			return "[refusal: " + r.Refusal + "]"
		}
		return "[refusal]"
	}
	return "[" + oneLine(p.Type) + "]"
}

// What scanJSONString found.
const (
	notAString    = iota // not exactly one JSON string literal
	plainString          // a string literal without an escape sequence
	escapedString        // a string literal with escape sequences
)

// scanJSONString tells whether b is exactly one JSON string literal (RFC 8259: no
// control character unescaped, only the escapes \" \\ \/ \b \f \n \r \t \uXXXX), and
// whether it holds an escape. Bytes of 0x80 and up are not checked here: invalid UTF-8 is
// refused by the callers that must refuse it.
func scanJSONString(b []byte) int {
	if len(b) < 2 || b[0] != '"' {
		return notAString
	}
	kind := plainString
	for i := 1; i < len(b); i++ {
		for i+8 <= len(b) && plainJSON8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			if i != len(b)-1 {
				return notAString
			}
			return kind
		case c == '\\':
			kind = escapedString
			if i+1 >= len(b) {
				return notAString
			}
			i++
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return notAString
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return notAString
					}
				}
				i += 4
			default:
				return notAString
			}
		case c < 0x20:
			return notAString
		}
	}
	return notAString
}

// scanValidJSONString is scanJSONString that also checks the UTF-8 of the literal, in
// the same pass: bad is the offset in b of the first byte that is not valid UTF-8, or
// -1. A literal that breaks off (notAString) has the bytes after the break unchecked.
func scanValidJSONString(b []byte) (kind, bad int) {
	if len(b) < 2 || b[0] != '"' {
		return notAString, -1
	}
	kind = plainString
	for i := 1; i < len(b); i++ {
		for i+8 <= len(b) && plainASCII8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainByte[b[i]] && b[i] < utf8.RuneSelf {
			i++
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return kind, i
			}
			i += n - 1
		case c == '"':
			if i != len(b)-1 {
				return notAString, -1
			}
			return kind, -1
		case c == '\\':
			kind = escapedString
			if i+1 >= len(b) {
				return notAString, -1
			}
			i++
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return notAString, -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return notAString, -1
					}
				}
				i += 4
			default:
				return notAString, -1
			}
		case c < 0x20:
			return notAString, -1
		}
	}
	return notAString, -1
}

// plainASCII8 is plainJSON8 for 8 bytes all under 0x80.
func plainASCII8(x uint64) bool { return x&msb == 0 && plainJSON8(x) }

// plainJSON8 reports whether none of the 8 bytes of x is '"', '\\' or a control
// character: each plainByte. (v-lsb)&^v&msb is not 0 exactly when a byte of v is 0,
// and (x-lsb*0x20)&^x&msb exactly when a byte of x is under 0x20. (special8, the
// one-pass reader's step, also stops at bytes of 0x80 and up, which it counts as runes.)
func plainJSON8(x uint64) bool {
	q, bs := x^(lsb*'"'), x^(lsb*'\\')
	return ((q-lsb)&^q|(bs-lsb)&^bs|(x-lsb*0x20)&^x)&msb == 0
}

// trimJSONSpace cuts the white space JSON allows around a value (not all of Unicode's,
// as bytes.TrimSpace does).
func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// plainByte marks the bytes a JSON string holds as they are: not '"', '\\' or a
// control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// unquote decodes a JSON string literal of valid UTF-8 as encoding/json does, in one
// pass; ok is false when b is anything else (not a string literal, invalid UTF-8, a
// \u escape of a UTF-16 surrogate), which the caller leaves to encoding/json.
func unquote(b []byte) (s string, ok bool) {
	kind := scanJSONString(b)
	if kind == notAString || !utf8.Valid(b) {
		return "", false
	}
	body := b[1 : len(b)-1]
	if kind == plainString {
		return string(body), true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch body[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, err := strconv.ParseUint(string(body[i+1:i+5]), 16, 32)
			if err != nil || utf16.IsSurrogate(rune(r)) {
				return "", false
			}
			out = utf8.AppendRune(out, rune(r))
			i += 4
		default: // " \ /
			out = append(out, body[i])
		}
	}
	return string(out), true
}
