package fakeupstream

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Usage is what the server billed one request, in tokens of four bytes.
type Usage struct {
	// Input is every input token, cached ones included.
	Input int
	// CacheRead is the input tokens of the longest common prefix with the previous
	// request of the same conversation.
	CacheRead int
	// CacheWrite is the input tokens past CacheRead up to the last cache_control
	// marker (Anthropic), 0 without one.
	CacheWrite int
	// Output is the reply's tokens.
	Output int
}

// conversationBytes is what the provider would cache of r, in the order it would:
// tools, system (instructions, systemInstruction), then each message (input item,
// content) as sent; the same on every wire.
func conversationBytes(r *Request) []byte {
	var b bytes.Buffer
	b.Write(r.Fields["tools"])
	b.Write(r.System)
	for _, m := range r.Messages {
		b.Write(m)
	}
	return b.Bytes()
}

// key names the conversation of r for the cached prefix.
func (s *Server) key(r *Request) string {
	if s.Key != nil {
		return s.Key(r)
	}
	if k := r.Header.Get("X-Compactor-Conversation"); k != "" {
		return k
	}
	return r.API + "/" + r.Model
}

// usage bills r: its input, the prefix shared with the previous request of its
// conversation as cached, and rep's text and tool calls as output.
func (s *Server) usage(r *Request, rep Reply) *Usage {
	conv := conversationBytes(r)
	k := s.key(r)
	s.mu.Lock()
	prev := s.last[k]
	s.last[k] = conv
	s.mu.Unlock()
	lcp := commonPrefix(prev, conv)
	u := &Usage{Input: tokens(len(conv)), CacheRead: tokens(lcp)}
	if i := bytes.LastIndex(conv, []byte(`"cache_control"`)); i > lcp {
		u.CacheWrite = tokens(i) - u.CacheRead
	}
	out := len(rep.Text)
	for _, tc := range rep.ToolCalls {
		out += len(tc.Name) + len(tc.Arguments)
	}
	u.Output = tokens(out) + 1
	return u
}

// tokens is n bytes in tokens, rounded up.
func tokens(n int) int { return (n + 3) / 4 }

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Text is the text of a conversation entry as sent, in any API: a string content, or
// its text blocks joined, a tool result's content included (OpenAI, Anthropic); a
// string input, an item's content or a function_call_output's output (Responses); a
// content's text parts and each functionResponse's response (Gemini).
func Text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var m struct {
		Content json.RawMessage `json:"content"`
		Output  json.RawMessage `json:"output"`
		Parts   []struct {
			Text              string          `json:"text"`
			FunctionResponse  json.RawMessage `json:"functionResponse"`
			FunctionResponse2 json.RawMessage `json:"function_response"`
		} `json:"parts"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	out := contentText(m.Content)
	if len(m.Output) > 0 {
		out = joinText(out, contentText(m.Output))
	}
	for _, p := range m.Parts {
		out = joinText(out, p.Text)
		for _, fr := range []json.RawMessage{p.FunctionResponse, p.FunctionResponse2} {
			var f struct {
				Response json.RawMessage `json:"response"`
			}
			if json.Unmarshal(fr, &f) == nil && len(f.Response) > 0 {
				out = joinText(out, responseText(f.Response))
			}
		}
	}
	return out
}

// joinText is a and b on lines of their own, either left out when empty.
func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n" + b
}

// responseText is a Gemini functionResponse's response as text: its output (or
// content) field when a string, else the object as sent.
func responseText(raw json.RawMessage) string {
	var r map[string]json.RawMessage
	if json.Unmarshal(raw, &r) == nil {
		for _, k := range []string{"output", "content"} {
			var s string
			if json.Unmarshal(r[k], &s) == nil {
				return s
			}
		}
	}
	return string(raw)
}

// contentText is a content field as text: a string, or its blocks' text (a tool
// result's nested content too) joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text    string          `json:"text"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &blocks)
	var out []string
	for _, b := range blocks {
		if b.Text != "" {
			out = append(out, b.Text)
		}
		if len(b.Content) > 0 {
			out = append(out, contentText(b.Content))
		}
	}
	return strings.Join(out, "\n")
}
