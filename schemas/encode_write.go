package schemas

import "bytes"

// The writers here are Encode's fast paths: each writes exactly what encoding/json
// writes for the same value (encode_write_test.go checks them against it).

// plainJSONString reports whether encoding/json writes s as it is between quotes:
// printable ASCII only, none of '"', '\\' and the '<', '>', '&' it escapes for HTML.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// writeToolCalls writes tcs as json.Marshal does.
func writeToolCalls(b *bytes.Buffer, tcs []ToolCall) {
	b.WriteByte('[')
	for i := range tcs {
		tc := &tcs[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id":`)
		writeJSONString(b, tc.ID)
		b.WriteString(`,"type":`)
		writeJSONString(b, tc.Type)
		b.WriteString(`,"function":{"name":`)
		writeJSONString(b, tc.Function.Name)
		b.WriteString(`,"arguments":`)
		writeJSONString(b, tc.Function.Arguments)
		b.WriteString("}}")
	}
	b.WriteByte(']')
}

// encodedSizeHint is about the length of m's encoding, so that Encode's buffer is
// allocated once for most messages.
func (m *Message) encodedSizeHint() int {
	n := 64 + len(m.Content.raw) + len(m.Name) + len(m.ToolCallID) + len(m.Extra) + len(m.Reasoning)*9/8
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		n += 64 + len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)*9/8
	}
	for k, v := range m.Meta {
		n += 8 + len(k) + len(v)
	}
	for k, v := range m.Unknown {
		n += 8 + len(k) + len(v)
	}
	return n
}
