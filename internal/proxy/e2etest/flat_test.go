package e2etest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/schemas"
)

// flat is a message reduced to what a model reads of it, the same in both APIs and in
// CHAT: a string content and a single text block are the same message.
type flat struct {
	Role string
	Text string
	// Calls is the tool calls, "id name arguments" each (arguments as compact JSON).
	Calls []string
	// Result is the tool call a tool message (or tool_result block) answers.
	Result string
}

func (f flat) String() string {
	s := f.Role + ": " + f.Text
	if len(f.Calls) > 0 {
		s += " calls" + fmt.Sprint(f.Calls)
	}
	if f.Result != "" {
		s += " answers " + f.Result
	}
	return s
}

func compactJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// flatOpenAI reduces OpenAI chat messages as sent, failing t (nil: panicking) on one
// that does not decode.
func flatOpenAI(t testing.TB, raws []json.RawMessage) []flat {
	out, err := decodeOpenAI(raws)
	must(t, err)
	return out
}

// must fails t with err (panics when t is nil: the fake's responder has none).
func must(t testing.TB, err error) {
	if err == nil {
		return
	}
	if t == nil {
		panic(err)
	}
	t.Helper()
	t.Fatal(err)
}

// decodeOpenAI is flatOpenAI's work.
func decodeOpenAI(raws []json.RawMessage) ([]flat, error) {
	var out []flat
	for _, raw := range raws {
		var m struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("message %s: %v", raw, err)
		}
		f := flat{Role: m.Role, Text: fakeupstream.Text(raw), Result: m.ToolCallID}
		if f.Role == "developer" {
			f.Role = "system"
		}
		for _, c := range m.ToolCalls {
			f.Calls = append(f.Calls, c.ID+" "+c.Function.Name+" "+compactJSON(c.Function.Arguments))
		}
		out = append(out, f)
	}
	return out, nil
}

// flatAnthropic reduces an Anthropic system field and messages as sent: the system is
// a first message of role system; a user message of tool_result blocks is one tool
// message a result, then a user message of its text blocks, if any.
func flatAnthropic(t testing.TB, system json.RawMessage, raws []json.RawMessage) []flat {
	var out []flat
	if len(system) > 0 && string(system) != "null" {
		var s string
		if json.Unmarshal(system, &s) != nil {
			s = fakeupstream.Text(json.RawMessage(`{"content":` + string(system) + `}`))
		}
		out = append(out, flat{Role: "system", Text: s})
	}
	for _, raw := range raws {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		must(t, json.Unmarshal(raw, &m))
		out = append(out, flatBlocks(t, m.Role, m.Content)...)
	}
	return out
}

// flatBlocks reduces one Anthropic message's content.
func flatBlocks(t testing.TB, role string, content json.RawMessage) []flat {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []flat{{Role: role, Text: s}}
	}
	var blocks []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   json.RawMessage `json:"content"`
	}
	must(t, json.Unmarshal(content, &blocks))
	var out []flat
	main := flat{Role: role}
	var texts []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			texts = append(texts, b.Text)
		case "tool_use":
			main.Calls = append(main.Calls, b.ID+" "+b.Name+" "+compactJSON(string(b.Input)))
		case "tool_result":
			out = append(out, flat{Role: "tool", Result: b.ToolUseID, Text: fakeupstream.Text(json.RawMessage(`{"content":` + string(b.Content) + `}`))})
		}
	}
	main.Text = strings.Join(texts, "\n")
	if main.Text != "" || len(main.Calls) > 0 || len(out) == 0 {
		out = append(out, main)
	}
	return out
}

// flatStored reduces messages as CHAT stores them.
func flatStored(msgs []schemas.Message) []flat {
	var out []flat
	for _, m := range msgs {
		f := flat{Role: string(m.Role), Text: m.Content.String(), Result: m.ToolCallID}
		for _, c := range m.ToolCalls {
			f.Calls = append(f.Calls, c.ID+" "+c.Function.Name+" "+compactJSON(c.Function.Arguments))
		}
		out = append(out, f)
	}
	return out
}

// sameFlat compares two reductions.
func sameFlat(a, b []flat) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

func flatLines(fs []flat) string {
	var b strings.Builder
	for i, f := range fs {
		fmt.Fprintf(&b, "%3d %s\n", i, f)
	}
	return b.String()
}

// sameFieldsBut checks that got holds the fields of sent, each JSON-equal, but those
// named in except, and no other.
func sameFieldsBut(t *testing.T, got map[string]json.RawMessage, sent []byte, except ...string) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(sent, &want); err != nil {
		t.Fatal(err)
	}
	skip := map[string]bool{}
	for _, e := range except {
		skip[e] = true
	}
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if skip[k] {
			continue
		}
		if compactJSON(string(got[k])) != compactJSON(string(want[k])) {
			t.Errorf("field %q: the upstream got %s, the client sent %s", k, got[k], want[k])
		}
	}
}
