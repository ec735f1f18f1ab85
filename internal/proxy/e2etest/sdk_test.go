package e2etest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/fakeupstream"
)

// The client credentials of the SDK tests: each must reach the upstream as sent, and
// never the summarizer.
const (
	openAIKey    = "sk-client-openai-e2e"
	anthropicKey = "sk-ant-client-e2e"
)

// target is where an SDK scenario sends its requests: the proxy (conv set) or, to test
// the scripts and the fake on their own, the fake upstream itself (conv "").
type target struct {
	up   *fakeupstream.Server
	root string // the proxy's or the fake's root URL
	conv string
	st   *stack // nil when direct
}

func (tg target) openAIBase() string    { return tg.root + "/v1" }
func (tg target) anthropicBase() string { return tg.root }

// turnResult is one turn of a scenario: what the client sent, what it got, and what the
// upstream received.
type turnResult struct {
	sent []byte
	got  nodeResult
	up   *fakeupstream.Request
}

// lastAgent is the upstream's last agent request, failing when there is none past n.
func lastAgent(t *testing.T, up *fakeupstream.Server, n int) *fakeupstream.Request {
	t.Helper()
	reqs := up.Agent()
	if len(reqs) <= n {
		t.Fatalf("the upstream received %d agent requests, want more than %d", len(reqs), n)
	}
	return reqs[len(reqs)-1]
}

// openAITurn runs one openai.mjs call of req, the upstream answering rep.
func openAITurn(t *testing.T, tg target, req map[string]any, rep fakeupstream.Reply) turnResult {
	t.Helper()
	n := len(tg.up.Agent())
	tg.up.Script(rep)
	sent, _ := json.Marshal(req)
	got := runNode(t, "openai.mjs", tg.openAIBase(), openAIKey, tg.conv, req)
	var up *fakeupstream.Request
	if len(tg.up.Agent()) > n {
		up = lastAgent(t, tg.up, n)
	}
	return turnResult{sent: sent, got: got, up: up}
}

var openAITools = []any{map[string]any{"type": "function", "function": map[string]any{
	"name": "get_weather", "description": "the weather in a city",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}}

// openAIScenario runs two turns of the official openai package (a tool call, then its
// result and a text reply), streamed or not, and checks each against the upstream.
func openAIScenario(t *testing.T, tg target, stream bool) {
	msgs := []any{map[string]any{"role": "system", "content": "You are terse."},
		map[string]any{"role": "user", "content": "What is the weather in Oslo? FACT-osl=12C"}}
	req := map[string]any{"model": "gpt-e2e", "messages": msgs, "tools": openAITools, "tool_choice": "auto",
		"temperature": 0.3, "max_tokens": 200, "user": "user-7", "stream": stream}
	if stream {
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	call := fakeupstream.ToolCall{ID: "call_w1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}
	r1 := openAITurn(t, tg, req, fakeupstream.Reply{Text: "Let me check.", ToolCalls: []fakeupstream.ToolCall{call}})
	checkOpenAITurn(t, tg, r1, "Let me check.", []string{`call_w1 get_weather {"city":"Oslo"}`})

	var reply map[string]any
	if err := json.Unmarshal(r1.got.Message, &reply); err != nil {
		t.Fatal(err)
	}
	req["messages"] = append(msgs, reply, map[string]any{"role": "tool", "tool_call_id": "call_w1", "content": "12C and clear"})
	r2 := openAITurn(t, tg, req, fakeupstream.Reply{Text: "It is 12C and clear in Oslo."})
	checkOpenAITurn(t, tg, r2, "It is 12C and clear in Oslo.", nil)
	if tg.st != nil {
		want := flatOpenAI(t, rawMessages(t, req["messages"]))
		want = append(want, flat{Role: "assistant", Text: "It is 12C and clear in Oslo."})
		got := flatStored(tg.st.waitStored(t, tg.conv, len(want)))
		if !sameFlat(got, want) {
			t.Fatalf("CHAT holds\n%swant\n%s", flatLines(got), flatLines(want))
		}
	}
}

// rawMessages is v (a []any of messages) as raw JSON messages.
func rawMessages(t *testing.T, v any) []json.RawMessage {
	t.Helper()
	b, _ := json.Marshal(v)
	var out []json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOpenAITurn checks one turn: the client got the upstream's reply whole; the
// upstream got the client's messages (reduced: the proxy may render them in canonical
// form), every other field as sent, and the client's credential.
func checkOpenAITurn(t *testing.T, tg target, r turnResult, text string, calls []string) {
	t.Helper()
	if !r.got.OK {
		t.Fatalf("the client failed: status %d %s %s", r.got.Status, r.got.Kind, r.got.Error)
	}
	got := flatOpenAI(t, []json.RawMessage{r.got.Message})[0]
	if got.Text != text || strings.Join(got.Calls, "|") != strings.Join(calls, "|") {
		t.Fatalf("the client got %s, the upstream answered %q %v", got, text, calls)
	}
	if r.up == nil {
		t.Fatal("the upstream received nothing")
	}
	var sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(r.sent, &sent)
	if want, gotUp := flatOpenAI(t, sent.Messages), flatOpenAI(t, r.up.Messages); !sameFlat(gotUp, want) {
		t.Fatalf("the upstream got\n%sthe client sent\n%s", flatLines(gotUp), flatLines(want))
	}
	sameFieldsBut(t, r.up.Fields, r.sent, "messages")
	if a := r.up.Header.Get("Authorization"); a != "Bearer "+openAIKey {
		t.Fatalf("the upstream got Authorization %q", a)
	}
	checkProxyHeaders(t, tg, r.got.Headers)
}

// checkProxyHeaders checks the response headers: the upstream's own reach the client
// (its request id), and through the proxy, the proxy's (the conversation, compacted,
// the tokens sent and the tokens the client sent).
func checkProxyHeaders(t *testing.T, tg target, h map[string]string) {
	t.Helper()
	if !strings.HasPrefix(h["x-request-id"], "req_fake_") {
		t.Fatalf("the upstream's x-request-id did not reach the client: %v", h)
	}
	if tg.st == nil {
		return
	}
	if h["x-compactor-status"] != "compacted" || h["x-compactor-conversation"] != tg.conv {
		t.Fatalf("the proxy's headers: %v", h)
	}
	for _, k := range []string{"x-compactor-tokens-sent", "x-compactor-tokens-client"} {
		if n, err := strconv.Atoi(h[k]); err != nil || n <= 0 {
			t.Fatalf("the proxy's %s is %q: %v", k, h[k], h)
		}
	}
}

// anthropicTurn runs one anthropic.mjs call of req, the upstream answering rep.
func anthropicTurn(t *testing.T, tg target, req map[string]any, rep fakeupstream.Reply) turnResult {
	t.Helper()
	n := len(tg.up.Agent())
	tg.up.Script(rep)
	sent, _ := json.Marshal(req)
	got := runNode(t, "anthropic.mjs", tg.anthropicBase(), anthropicKey, tg.conv, req)
	var up *fakeupstream.Request
	if len(tg.up.Agent()) > n {
		up = lastAgent(t, tg.up, n)
	}
	return turnResult{sent: sent, got: got, up: up}
}

var anthropicTools = []any{map[string]any{"name": "get_weather", "description": "the weather in a city",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}

// anthropicScenario is openAIScenario with the official @anthropic-ai/sdk package.
func anthropicScenario(t *testing.T, tg target, stream bool) {
	msgs := []any{map[string]any{"role": "user", "content": "What is the weather in Oslo? FACT-osl=12C"}}
	req := map[string]any{"model": "claude-e2e", "max_tokens": 256, "system": "You are terse.", "messages": msgs,
		"tools": anthropicTools, "tool_choice": map[string]any{"type": "auto"}, "temperature": 0.2,
		"metadata": map[string]any{"user_id": "user-7"}, "stream": stream}
	call := fakeupstream.ToolCall{ID: "toolu_w1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}
	r1 := anthropicTurn(t, tg, req, fakeupstream.Reply{Text: "Let me check.", ToolCalls: []fakeupstream.ToolCall{call}})
	checkAnthropicTurn(t, tg, r1, "Let me check.", []string{`toolu_w1 get_weather {"city":"Oslo"}`})

	var reply map[string]any
	if err := json.Unmarshal(r1.got.Message, &reply); err != nil {
		t.Fatal(err)
	}
	req["messages"] = append(msgs, reply, map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "tool_result", "tool_use_id": "toolu_w1", "content": "12C and clear"}}})
	r2 := anthropicTurn(t, tg, req, fakeupstream.Reply{Text: "It is 12C and clear in Oslo."})
	checkAnthropicTurn(t, tg, r2, "It is 12C and clear in Oslo.", nil)
	if tg.st != nil {
		want := flatAnthropic(t, json.RawMessage(`"You are terse."`), rawMessages(t, req["messages"]))
		want = append(want, flat{Role: "assistant", Text: "It is 12C and clear in Oslo."})
		got := flatStored(tg.st.waitStored(t, tg.conv, len(want)))
		if !sameFlat(got, want) {
			t.Fatalf("CHAT holds\n%swant\n%s", flatLines(got), flatLines(want))
		}
	}
}

// checkAnthropicTurn is checkOpenAITurn for the Anthropic API: the system and messages
// reduced, the other fields as sent, the x-api-key and anthropic-version headers.
func checkAnthropicTurn(t *testing.T, tg target, r turnResult, text string, calls []string) {
	t.Helper()
	if !r.got.OK {
		t.Fatalf("the client failed: status %d %s %s", r.got.Status, r.got.Kind, r.got.Error)
	}
	var msg struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(r.got.Message, &msg)
	got := flatBlocks(t, msg.Role, msg.Content)[0]
	if got.Text != text || strings.Join(got.Calls, "|") != strings.Join(calls, "|") {
		t.Fatalf("the client got %s, the upstream answered %q %v", got, text, calls)
	}
	if r.up == nil {
		t.Fatal("the upstream received nothing")
	}
	var sent struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(r.sent, &sent)
	if want, gotUp := flatAnthropic(t, sent.System, sent.Messages), flatAnthropic(t, r.up.System, r.up.Messages); !sameFlat(gotUp, want) {
		t.Fatalf("the upstream got\n%sthe client sent\n%s", flatLines(gotUp), flatLines(want))
	}
	sameFieldsBut(t, r.up.Fields, r.sent, "messages", "system")
	// @anthropic-ai/sdk 1.x sends its apiKey as Authorization: Bearer (0.x sent
	// x-api-key): the credential must arrive in the header it was sent in.
	k, a, v := r.up.Header.Get("X-Api-Key"), r.up.Header.Get("Authorization"), r.up.Header.Get("Anthropic-Version")
	if (k != anthropicKey && a != "Bearer "+anthropicKey) || v == "" {
		t.Fatalf("the upstream got x-api-key %q, authorization %q, anthropic-version %q", k, a, v)
	}
	checkProxyHeaders(t, tg, r.got.Headers)
}
