package anthropic

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
)

// claudeCodeRequest has the shape of a Claude Code 2.1 request (POST
// /v1/messages?beta=true): mid-conversation system turns ({"role": "system"} inside
// messages, a string and text blocks), adaptive thinking, output_config,
// context_management, and 1-hour breakpoints on tools and system before the 5-minute
// one on the newest block. Its blocks are in the form Build writes (content arrays,
// one system block), so that the request built from what Parse read is this JSON.
const claudeCodeRequest = `{
  "model": "claude-opus-4-8",
  "max_tokens": 32000,
  "thinking": {"type": "adaptive"},
  "output_config": {"effort": "high"},
  "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}, {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 180000}}]},
  "tools": [
    {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
  ],
  "system": [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
  "messages": [
    {"role": "user", "content": [{"type": "text", "text": "<system-reminder>As you answer, use the context below.</system-reminder>"}, {"type": "text", "text": "Why does the build fail?"}]},
    {"role": "system", "content": "The following deferred tools are now available via ToolSearch: WebFetch, WebSearch"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "Let me run the build.", "signature": "EqQBCkgIARABGAIiQL2x/Kz+0c9Q=="},
      {"type": "text", "text": "I'll run the build."},
      {"type": "tool_use", "id": "toolu_01Bash", "name": "Bash", "input": {"command": "go build ./..."}}
    ]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01Bash", "content": "main.go:3: undefined: x", "is_error": true}]},
    {"role": "system", "content": [{"type": "text", "text": "The user sent the following message while you were working: also update the changelog."}]},
    {"role": "assistant", "content": [
      {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
      {"type": "text", "text": "x is undefined in main.go; I'll fix it and update the changelog."}
    ]},
    {"role": "user", "content": [{"type": "text", "text": "Go ahead.", "cache_control": {"type": "ephemeral"}}]}
  ],
  "metadata": {"user_id": "user_abc_account_def_session_0a1b2c3d"},
  "stream": true
}`

// Claude Code's request parses (it was refused: "messages[1]: role must be user or
// assistant, not \"system\""), each mid-conversation system turn is a system message
// at its place, and the request built from what was parsed is the request sent.
func TestAnthropicClaudeCodeRoundTrip(t *testing.T) {
	req, err := Anthropic().Parse([]byte(claudeCodeRequest))
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range req.Messages {
		r := string(m.Role)
		if readExtra(&m).InMessages {
			r += "(in messages)"
		}
		roles = append(roles, r)
	}
	if got := strings.Join(roles, " "); got != "system user system(in messages) assistant tool system(in messages) assistant user" {
		t.Fatalf("roles %s", got)
	}
	if enc, _ := req.Messages[2].Encode(); string(enc) != `{"role":"system","content":"The following deferred tools are now available via ToolSearch: WebFetch, WebSearch","extra":{"anthropic_in_messages":true}}` {
		t.Fatalf("the first system turn is %s", enc)
	}
	if enc, _ := req.Messages[5].Encode(); string(enc) != `{"role":"system","content":[{"type":"text","text":"The user sent the following message while you were working: also update the changelog."}],"extra":{"anthropic_in_messages":true}}` {
		t.Fatalf("the second system turn is %s", enc)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, []byte(claudeCodeRequest)) {
		t.Fatalf("the built request is not the one sent:\n%s", out)
	}
	// The fields the proxy does not rewrite are the client's bytes.
	wiretest.CheckBuild(t, Anthropic(), req, "messages", "system")
	// What Build sends parses to the same messages.
	again, err := Anthropic().Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range req.Messages {
		a, _ := req.Messages[i].Encode()
		b, _ := again.Messages[i].Encode()
		if string(a) != string(b) {
			t.Fatalf("message %d: %s, then %s", i, a, b)
		}
	}
}

// The top-level system and a system turn of messages with the same text are two
// messages: Build tells them apart by ExtraInMessages.
func TestAnthropicSystemTurnIsNotTheSystemField(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"system","content":"Be brief."}]}`
	req, err := Anthropic().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := req.Messages[0].Encode()
	b, _ := req.Messages[2].Encode()
	if string(a) == string(b) {
		t.Fatalf("the same message twice: %s", a)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"system","content":"Be brief."}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	// As the API: a system turn may not be the first of messages.
	if _, err := Anthropic().Parse([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"},{"role":"user","content":"hi"}]}`)); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("a leading system turn: %v", err)
	}
}

// In a compacted context a system turn of messages stays a system turn after the
// summary (a user turn); one that falls in the prefix (pinned, before the summary, or
// first of a context without one) goes to the system field, since a system turn may
// neither be the first of messages nor come before the summary.
func TestAnthropicSystemTurnInACompactedContext(t *testing.T) {
	req, err := Anthropic().Parse([]byte(claudeCodeRequest))
	if err != nil {
		t.Fatal(err)
	}
	summary := schemas.Message{Role: "user", Content: schemas.Text("Summary: the build failed on x.")}
	// system, summary, then the tail from the second system turn on.
	msgs := append([]schemas.Message{req.Messages[0], summary}, req.Messages[5:]...)
	cx := wiretest.ContextOf(msgs)
	cx.HasSummary, cx.Seqs[1] = true, 0
	out, err := Anthropic().Build(req, cx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := wire.FieldMap(out)
	want := `[{"role":"user","content":[{"type":"text","text":"Summary: the build failed on x.","cache_control":{"type":"ephemeral"}}]},` +
		`{"role":"system","content":[{"type":"text","text":"The user sent the following message while you were working: also update the changelog."}]},` +
		`{"role":"assistant","content":[{"data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP","type":"redacted_thinking"},{"type":"text","text":"x is undefined in main.go; I'll fix it and update the changelog."}]},` +
		`{"role":"user","content":[{"type":"text","text":"Go ahead.","cache_control":{"type":"ephemeral"}}]}]`
	if string(f["messages"]) != want {
		t.Fatalf("messages\n%s\nwant\n%s", f["messages"], want)
	}
	// A system turn before the summary (pinned) joins the system field.
	msgs = append([]schemas.Message{req.Messages[0], req.Messages[2], summary}, req.Messages[6:]...)
	cx = wiretest.ContextOf(msgs)
	cx.HasSummary, cx.Seqs[2] = true, 0
	if out, err = Anthropic().Build(req, cx); err != nil {
		t.Fatal(err)
	}
	f, _ = wire.FieldMap(out)
	if !strings.Contains(string(f["system"]), "deferred tools") || strings.Contains(string(f["messages"]), `"role":"system"`) {
		t.Fatalf("system %s\nmessages %s", f["system"], f["messages"])
	}
	// Without a summary, a context whose tail starts with a system turn (the
	// messages before it dropped) has it in the system field too.
	msgs = append([]schemas.Message{req.Messages[0]}, req.Messages[5:]...)
	if out, err = Anthropic().Build(req, wiretest.ContextOf(msgs)); err != nil {
		t.Fatal(err)
	}
	f, _ = wire.FieldMap(out)
	if !strings.Contains(string(f["system"]), "also update the changelog") || strings.Contains(string(f["messages"]), `"role":"system"`) {
		t.Fatalf("system %s\nmessages %s", f["system"], f["messages"])
	}
	if _, err := Anthropic().Parse(out); err != nil {
		t.Fatalf("the built request does not parse: %v", err)
	}
}

// A turn of a role the proxy does not know is kept whole, in place (its blocks'
// breakpoints left out): the API decides whether it takes the role.
func TestAnthropicUnknownRoleKeptWhole(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"messages":[
{"role":"user","content":"hi"},
{"role":"developer","content":[{"type":"text","text":"Use tabs.","cache_control":{"type":"ephemeral"}},{"type":"tool_reference","tool_name":"Bash"}],"name":"policy"},
{"role":"assistant","content":"ok"},
{"role":"operator","content":"Quiet hours."}]}`
	req, err := Anthropic().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Messages) != 4 {
		t.Fatalf("%d messages", len(req.Messages))
	}
	enc, _ := req.Messages[1].Encode()
	if want := `{"role":"user","content":[{"type":"text","text":"Use tabs."}],"extra":{"anthropic_turn":{"content":[{"text":"Use tabs.","type":"text"},{"tool_name":"Bash","type":"tool_reference"}],"name":"policy","role":"developer"}}}`; string(enc) != want {
		t.Fatalf("got  %s\nwant %s", enc, want)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(body, `,"cache_control":{"type":"ephemeral"}`, "", 1)
	want = strings.Replace(want, `"content":"hi"`, `"content":[{"type":"text","text":"hi"}]`, 1)
	// The client's breakpoint goes to the last block of the last turn that can have
	// one (not a string content).
	want = strings.Replace(want, `"content":"ok"`, `"content":[{"type":"text","text":"ok","cache_control":{"type":"ephemeral"}}]`, 1)
	if !wiretest.JSONEqual(t, out, []byte(want)) {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// Every content block type of the Messages API goes through Parse and Build unchanged
// and in place; an assistant turn's interleaved thinking (between tool uses, after a
// server tool's result) keeps its position, and server tool and MCP blocks stay in
// the assistant turn in order. (Shapes from anthropic-sdk-go's BetaContentBlockParamUnion.)
func TestAnthropicEveryBlockTypeInPlace(t *testing.T) {
	body := `{"model":"m","max_tokens":9,"messages":[
{"role":"user","content":[
  {"type":"text","text":"Look at these."},
  {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
  {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"},"title":"Q3","citations":{"enabled":true}},
  {"type":"search_result","source":"https://kb.example/a","title":"A","content":[{"type":"text","text":"a"}],"citations":{"enabled":true}},
  {"type":"container_upload","file_id":"file_011CNha8iCJcU1wXNR6q4V8w"},
  {"type":"some_future_block","x":{"y":[1,2.50]}}]},
{"role":"assistant","content":[
  {"type":"thinking","thinking":"Search first.","signature":"sig-1"},
  {"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"q3"}},
  {"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://a.example","title":"A","encrypted_content":"EqgfCio","page_age":null}]},
  {"type":"thinking","thinking":"Now fetch.","signature":"sig-2"},
  {"type":"server_tool_use","id":"srvtoolu_02","name":"web_fetch","input":{"url":"https://a.example"}},
  {"type":"web_fetch_tool_result","tool_use_id":"srvtoolu_02","content":{"type":"web_fetch_result","url":"https://a.example","content":{"type":"document","source":{"type":"text","media_type":"text/plain","data":"A"}},"retrieved_at":"2026-01-01T00:00:00Z"}},
  {"type":"server_tool_use","id":"srvtoolu_03","name":"code_execution","input":{"code":"print(1)"}},
  {"type":"code_execution_tool_result","tool_use_id":"srvtoolu_03","content":{"type":"code_execution_result","stdout":"1\n","stderr":"","return_code":0,"content":[]}},
  {"type":"server_tool_use","id":"srvtoolu_04","name":"bash_code_execution","input":{"command":"ls"}},
  {"type":"bash_code_execution_tool_result","tool_use_id":"srvtoolu_04","content":{"type":"bash_code_execution_result","stdout":"a.txt","stderr":"","return_code":0,"content":[]}},
  {"type":"server_tool_use","id":"srvtoolu_05","name":"text_editor_code_execution","input":{"command":"view","path":"a.txt"}},
  {"type":"text_editor_code_execution_tool_result","tool_use_id":"srvtoolu_05","content":{"type":"text_editor_code_execution_view_result","content":"hello","file_type":"text","num_lines":1,"start_line":1,"total_lines":1}},
  {"type":"mcp_tool_use","id":"mcptoolu_01","name":"echo","server_name":"tools","input":{"s":"x"}},
  {"type":"mcp_tool_result","tool_use_id":"mcptoolu_01","is_error":false,"content":[{"type":"text","text":"x"}]},
  {"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"},
  {"type":"text","text":"Q3 grew.","citations":[{"type":"web_search_result_location","url":"https://a.example","title":"A","encrypted_index":"Eo8BCi","cited_text":"grew"}]},
  {"type":"tool_use","id":"toolu_01","name":"lookup","input":{"k":1}},
  {"type":"thinking","thinking":"And the other one.","signature":"sig-3"},
  {"type":"tool_use","id":"toolu_02","name":"lookup","input":{"k":2}}]},
{"role":"user","content":[
  {"type":"tool_result","tool_use_id":"toolu_01","content":[{"type":"search_result","source":"https://b.example","title":"B","content":[{"type":"text","text":"b"}]},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}}]},
  {"type":"tool_result","tool_use_id":"toolu_02","content":"two"}]},
{"role":"assistant","content":[{"type":"text","text":"Done."}]}
]}`
	req, err := Anthropic().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	a := readExtra(&req.Messages[1])
	if len(a.Prefix) != 4 {
		t.Fatalf("extra %s", req.Messages[1].Extra)
	}
	if a.Order != "kppkppppppppppkptkt" {
		t.Fatalf("order %q", a.Order)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, []byte(body)) {
		t.Fatalf("the built request is not the one sent:\n%s", out)
	}
	// Compacted (a summary in place of the first turn), the rest goes as sent.
	msgs := append([]schemas.Message{{Role: "user", Content: schemas.Text("Summary.")}}, req.Messages[1:]...)
	cx := wiretest.ContextOf(msgs)
	cx.HasSummary, cx.Seqs[0] = true, 0
	if out, err = Anthropic().Build(req, cx); err != nil {
		t.Fatal(err)
	}
	var got, sent struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(out, &got)
	_ = json.Unmarshal([]byte(body), &sent)
	if len(got.Messages) != len(sent.Messages) || string(got.Messages[0]) != `{"role":"user","content":[{"type":"text","text":"Summary.","cache_control":{"type":"ephemeral"}}]}` {
		t.Fatalf("compacted: %s", out)
	}
	for i := 1; i < len(sent.Messages); i++ {
		if !wiretest.JSONEqual(t, got.Messages[i], sent.Messages[i]) {
			t.Fatalf("compacted, turn %d: %s\nwant %s", i, got.Messages[i], sent.Messages[i])
		}
	}
	// The same blocks in the default order (thinking, content, tool uses) need no
	// order in Extra.
	plain, err := Anthropic().Parse([]byte(anthropicRequest))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plain.Messages {
		if strings.Contains(string(m.Extra), ExtraBlockOrder) {
			t.Fatalf("an order for %s", m.Extra)
		}
	}
}

// ttlsOf returns the ttl of each cache_control of a request body, in the order the
// API reads them: tools, system, messages (blocks, and tool_result blocks' content).
func ttlsOf(t *testing.T, body []byte) []string {
	t.Helper()
	var r struct {
		CacheControl json.RawMessage   `json:"cache_control"`
		Tools        []json.RawMessage `json:"tools"`
		System       json.RawMessage   `json:"system"`
		Messages     []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var out []string
	var add func(raw json.RawMessage)
	add = func(raw json.RawMessage) {
		var b struct {
			CacheControl *struct {
				TTL string `json:"ttl"`
			} `json:"cache_control"`
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(raw, &b)
		if b.Type == "tool_result" {
			var inner []json.RawMessage
			_ = json.Unmarshal(b.Content, &inner)
			for _, i := range inner {
				add(i)
			}
		}
		if b.CacheControl != nil {
			ttl := b.CacheControl.TTL
			if ttl == "" {
				ttl = "5m"
			}
			out = append(out, ttl)
		}
	}
	for _, tl := range r.Tools {
		add(tl)
	}
	var blocks []json.RawMessage
	_ = json.Unmarshal(r.System, &blocks)
	for _, b := range blocks {
		add(b)
	}
	for _, m := range r.Messages {
		blocks = nil
		_ = json.Unmarshal(m.Content, &blocks)
		for _, b := range blocks {
			add(b)
		}
	}
	if len(r.CacheControl) > 0 {
		add(json.RawMessage(`{"cache_control":` + string(r.CacheControl) + `}`))
	}
	return out
}

// The breakpoints Build writes are never more than four and never a 1-hour one after
// a 5-minute one (tools, then system, then messages): 1-hour breakpoints on tools and
// system and a 5-minute one on the newest turn, with and without a summary, with the
// client's breakpoints taking some or all of the four.
func TestAnthropicBreakpointsTTLOrderAndLimit(t *testing.T) {
	const h1, m5 = `{"type":"ephemeral","ttl":"1h"}`, `{"type":"ephemeral"}`
	body := func(tools []string, sys, newest, auto string) string {
		var ts []string
		for i, cc := range tools {
			tl := `{"name":"t` + string(rune('a'+i)) + `","input_schema":{"type":"object"}`
			if cc != "" {
				tl += `,"cache_control":` + cc
			}
			ts = append(ts, tl+"}")
		}
		mark := func(cc string) string {
			if cc == "" {
				return ""
			}
			return `,"cache_control":` + cc
		}
		b := `{"model":"m","max_tokens":9,"tools":[` + strings.Join(ts, ",") + `],
"system":[{"type":"text","text":"S"` + mark(sys) + `}],
"messages":[{"role":"user","content":[{"type":"text","text":"old"}]},{"role":"assistant","content":[{"type":"text","text":"ok"}]},
{"role":"user","content":[{"type":"text","text":"new"` + mark(newest) + `}]}]`
		if auto != "" {
			b += `,"cache_control":` + auto
		}
		return b + "}"
	}
	type variant struct {
		name     string
		rendered bool
	}
	for _, c := range []struct {
		name              string
		tools             []string
		sys, newest, auto string
		summary           bool
		// want is the ttls in order with the client's system sent as it came, and
		// with the context's own system rendered (rendered: when they differ).
		want, rendered string
	}{
		{name: "1h tools and system, 5m newest", tools: []string{"", h1}, sys: h1, newest: m5, want: "1h 1h 5m"},
		{name: "the same with a summary", tools: []string{"", h1}, sys: h1, newest: m5, summary: true, want: "1h 1h 5m 5m"},
		{name: "1h everywhere with a summary: the summary's is 1h too", tools: []string{h1}, sys: h1, newest: h1, summary: true, want: "1h 1h 1h 1h"},
		{name: "two 1h tools and a summary leave one", tools: []string{h1, h1}, sys: h1, newest: m5, summary: true, want: "1h 1h 1h 5m"},
		{name: "three tools and a summary leave none", tools: []string{h1, h1, h1}, newest: m5, summary: true, want: "1h 1h 1h 5m"},
		{name: "four tools: not even the summary's", tools: []string{h1, h1, h1, h1}, summary: true, want: "1h 1h 1h 1h"},
		{name: "a 5m tool before a 1h newest: lowered", tools: []string{m5}, newest: h1, summary: true, want: "5m 5m 5m"},
		{name: "a 5m system before a 1h newest", sys: m5, newest: h1, summary: true, want: "5m 5m 5m", rendered: "1h 1h 1h"},
		{name: "automatic caching counts", tools: []string{h1}, sys: h1, newest: m5, auto: m5, summary: true, want: "1h 1h 5m 5m"},
		{name: "a 1h automatic breakpoint", sys: h1, newest: h1, auto: h1, summary: true, want: "1h 1h 1h 1h"},
	} {
		for _, v := range []variant{{"client's system", false}, {"rendered system", true}} {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				b := body(c.tools, c.sys, c.newest, c.auto)
				req, err := Anthropic().Parse([]byte(b))
				if err != nil {
					t.Fatal(err)
				}
				msgs := req.Messages
				if v.rendered {
					msgs = append([]schemas.Message{{Role: "system", Content: schemas.Text("S2")}}, msgs[1:]...)
				}
				cx := wiretest.ContextOf(msgs)
				if c.summary { // the first user message stands for the summary
					cx.HasSummary, cx.Seqs[1] = true, 0
				}
				out, err := Anthropic().Build(req, cx)
				if err != nil {
					t.Fatal(err)
				}
				want := c.want
				if v.rendered && c.rendered != "" {
					want = c.rendered
				}
				ttls := ttlsOf(t, out)
				if got := strings.Join(ttls, " "); got != want {
					t.Fatalf("breakpoints %q, want %q in\n%s", got, want, out)
				}
				if len(ttls) > maxBreakpoints {
					t.Fatalf("%d breakpoints", len(ttls))
				}
				for i := 1; i < len(ttls); i++ {
					if ttls[i] == "1h" && ttls[i-1] == "5m" {
						t.Fatalf("a 1h breakpoint after a 5m one: %v", ttls)
					}
				}
			})
		}
	}
}

// A streamed reply holding thinking (signature_delta), text with a citation
// (citations_delta) and a tool_use is stored as the message the client's next request
// sends back: the same turn, the same message.
func TestAnthropicStreamedReplyEchoed(t *testing.T) {
	events := []sseEvent{
		{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-opus-4-8","usage":{"input_tokens":12,"cache_read_input_tokens":3000,"cache_creation_input_tokens":0,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"The user wants "}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"the tests run.","estimated_tokens":7}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkgIARABGAIiQ+/=="}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","citations":null}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"The docs say run "}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"web_search_result_location","url":"https://go.dev/doc","title":"Go","encrypted_index":"Eo8B","cited_text":"go test"}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"go test."}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01X","name":"Bash","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"command\": \"go te"}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"st ./...\", \"timeout\": 1.50}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":2}`},
		{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":60}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
	s := Anthropic().NewStream()
	sp := wire.NewSSESplitter(0, s.Event)
	if _, err := sp.Write([]byte(streamOf(events))); err != nil {
		t.Fatal(err)
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := m.Encode()
	want := `{"role":"assistant","content":[{"citations":[{"cited_text":"go test","encrypted_index":"Eo8B","title":"Go","type":"web_search_result_location","url":"https://go.dev/doc"}],"text":"The docs say run go test.","type":"text"}],` +
		`"tool_calls":[{"id":"toolu_01X","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"go test ./...\",\"timeout\":1.50}"}}],` +
		`"extra":{"anthropic_content_prefix":[{"signature":"EqQBCkgIARABGAIiQ+/==","thinking":"The user wants the tests run.","type":"thinking"}]}}`
	if string(stored) != want {
		t.Fatalf("stored\n%s\nwant\n%s", stored, want)
	}
	if *u != (wire.Usage{Input: 3012, Output: 60, CacheRead: 3000}) {
		t.Fatalf("usage %+v", u)
	}
	// Claude Code sends the turn back as the SDK put it together (its own key order
	// and spacing), then the tool's result.
	next := `{"model":"claude-opus-4-8","max_tokens":32000,"system":"s","messages":[
{"role":"user","content":"Run the tests."},
{"role":"assistant","content":[
  {"type":"thinking","thinking":"The user wants the tests run.","signature":"EqQBCkgIARABGAIiQ+/=="},
  {"type":"text","text":"The docs say run go test.","citations":[{"type":"web_search_result_location","cited_text":"go test","url":"https://go.dev/doc","title":"Go","encrypted_index":"Eo8B"}]},
  {"type":"tool_use","id":"toolu_01X","name":"Bash","input":{"timeout":1.50,"command":"go test ./..."}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01X","content":"ok"}]},
{"role":"system","content":"The user sent: and lint."}]}`
	req, err := Anthropic().Parse([]byte(next))
	if err != nil {
		t.Fatal(err)
	}
	if back, _ := req.Messages[2].Encode(); string(back) != string(stored) {
		t.Fatalf("sent back\n%s\nstored\n%s", back, stored)
	}
	// An interleaved reply (thinking after a server tool's result) likewise.
	events = []sseEvent{
		{"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\":\"go\"}"}}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}}`},
		{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"Nothing found."}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"signature_delta","signature":"c2ln"}}`},
		{"content_block_start", `{"type":"content_block_start","index":3,"content_block":{"type":"text","text":"No results."}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}
	s = Anthropic().NewStream()
	for _, e := range events {
		if err := s.Event(e.name, []byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	m, _, err = s.Result()
	if err != nil {
		t.Fatal(err)
	}
	stored, _ = m.Encode()
	if x := readExtra(&m); x.Order != "ppkp" {
		t.Fatalf("order %q in %s", x.Order, stored)
	}
	req, err = Anthropic().Parse([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[
{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go"}},
{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},
{"type":"thinking","thinking":"Nothing found.","signature":"c2ln"},
{"type":"text","text":"No results."}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if back, _ := req.Messages[1].Encode(); string(back) != string(stored) {
		t.Fatalf("sent back\n%s\nstored\n%s", back, stored)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `{"role":"assistant","content":[{"id":"srvtoolu_1","input":{"query":"go"},"name":"web_search","type":"server_tool_use"},{"content":[],"tool_use_id":"srvtoolu_1","type":"web_search_tool_result"},{"signature":"c2ln","thinking":"Nothing found.","type":"thinking"},{"type":"text","text":"No results."}]}`) {
		t.Fatalf("the order changed: %s", out)
	}
}

// Captured Claude Code requests (testdata/claude-code/*.json, when there are some)
// parse, and build back to themselves but for what Build writes in its own form.
func TestAnthropicClaudeCodeCaptures(t *testing.T) {
	files, _ := os.ReadDir("testdata/claude-code")
	if len(files) == 0 {
		t.Skip("no captured Claude Code requests")
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".json") {
			continue
		}
		t.Run(f.Name(), func(t *testing.T) {
			body, err := os.ReadFile("testdata/claude-code/" + f.Name())
			if err != nil {
				t.Fatal(err)
			}
			req, err := Anthropic().Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			out := wiretest.CheckBuild(t, Anthropic(), req, "messages", "system")
			if out == nil {
				t.Fatal("Build refused the request's own context")
			}
			ttls := ttlsOf(t, out)
			if len(ttls) > maxBreakpoints {
				t.Fatalf("%d breakpoints", len(ttls))
			}
			for i := 1; i < len(ttls); i++ {
				if ttls[i] == "1h" && ttls[i-1] == "5m" {
					t.Fatalf("a 1h breakpoint after a 5m one: %v", ttls)
				}
			}
			again, err := Anthropic().Parse(out)
			if err != nil {
				t.Fatalf("the built request does not parse: %v", err)
			}
			if len(again.Messages) != len(req.Messages) {
				t.Fatalf("%d messages, then %d", len(req.Messages), len(again.Messages))
			}
			// Compacted at each message that may start a tail, the request built
			// still parses, starts with a user turn, and keeps the breakpoint rules.
			for k := 2; k < len(req.Messages); k++ {
				if req.Messages[k].Role == schemas.RoleTool {
					continue
				}
				msgs := append([]schemas.Message{req.Messages[0], {Role: "user", Content: schemas.Text("Summary.")}}, req.Messages[k:]...)
				cx := wiretest.ContextOf(msgs)
				cx.HasSummary, cx.Seqs[1] = true, 0
				out, err := Anthropic().Build(req, cx)
				if err != nil {
					t.Fatalf("compacted at %d: %v", k, err)
				}
				if _, err := Anthropic().Parse(out); err != nil {
					t.Fatalf("compacted at %d: %v", k, err)
				}
				var r struct {
					Messages []struct {
						Role string `json:"role"`
					} `json:"messages"`
				}
				_ = json.Unmarshal(out, &r)
				if r.Messages[0].Role != "user" {
					t.Fatalf("compacted at %d: the first turn is %s's", k, r.Messages[0].Role)
				}
				ttls := ttlsOf(t, out)
				if len(ttls) > maxBreakpoints || strings.Contains(strings.Join(ttls, " "), "5m 1h") {
					t.Fatalf("compacted at %d: breakpoints %v", k, ttls)
				}
			}
			// But for the form Build writes, and the breakpoint it moves to the
			// newest block, the request built is the one sent.
			got, want := normalizeCapture(t, out), normalizeCapture(t, body)
			if !wiretest.JSONEqual(t, got, want) {
				t.Fatalf("the built request is not the one sent:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// normalizeCapture gives a request the form Build writes, meaning unchanged: a user or
// assistant turn's string content as one text block, no is_error false, no
// cache_control in messages (Build moves the client's to the newest block).
func normalizeCapture(t *testing.T, body []byte) []byte {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	for _, m := range r["messages"].([]any) {
		m := m.(map[string]any)
		if s, ok := m["content"].(string); ok && m["role"] != "system" {
			m["content"] = []any{map[string]any{"type": "text", "text": s}}
		}
		blocks, _ := m["content"].([]any)
		for _, b := range blocks {
			b := b.(map[string]any)
			delete(b, "cache_control")
			if b["is_error"] == false {
				delete(b, "is_error")
			}
		}
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A turn's fields besides role and content (per-turn settings: Claude Code sends
// output_config on its system turns) go back into the turn, whatever its role.
func TestAnthropicTurnFieldsKept(t *testing.T) {
	body := `{"model":"m","max_tokens":9,"messages":[
{"role":"user","content":[{"type":"text","text":"a"}],"output_config":{"effort":"low"}},
{"role":"system","content":[],"output_config":{"effort":"medium"}},
{"role":"assistant","content":[{"type":"text","text":"b"},{"type":"tool_use","id":"t1","name":"f","input":{}}],"x_turn":{"n":1.50}},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r","is_error":true}],"output_config":{"effort":"high"}},
{"role":"system","content":"s","output_config":{"effort":"max"}},
{"role":"assistant","content":[{"type":"thinking","thinking":"","signature":"c2ln"},{"type":"text","text":"c"}],"x_turn":{}},
{"role":"user","content":"d","output_config":{"effort":"xhigh"}}]}`
	req, err := Anthropic().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if enc, _ := req.Messages[1].Encode(); string(enc) != `{"role":"system","content":[],"extra":{"anthropic_in_messages":true,"anthropic_turn_fields":{"output_config":{"effort":"medium"}}}}` {
		t.Fatalf("the system turn is %s", enc)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(body, `"content":"d"`, `"content":[{"type":"text","text":"d"}]`, 1)
	if !wiretest.JSONEqual(t, out, []byte(want)) {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}
