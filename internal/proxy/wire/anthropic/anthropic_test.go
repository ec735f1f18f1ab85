package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// anthropicRequest is a Messages request as the API reference shows them: extended
// thinking with tools, a tool round, an image, and the fields the proxy leaves as sent.
const anthropicRequest = `{
  "model": "claude-sonnet-4-5",
  "max_tokens": 16000,
  "system": [{"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "Answer briefly."}],
  "thinking": {"type": "enabled", "budget_tokens": 10000},
  "tools": [{"name": "get_weather", "description": "Get the current weather in a given location",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}],
  "messages": [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": [
      {"type": "thinking", "thinking": "The user wants the weather in Paris. I'll call get_weather.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
      {"type": "text", "text": "Let me check."},
      {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"unit": "celsius", "location": "Paris, France"}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"},
      {"type": "text", "text": "And this one?"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
      {"type": "image", "source": {"type": "url", "url": "https://upload.wikimedia.org/a.jpg"}}
    ]},
    {"role": "assistant", "content": [
      {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"},
      {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {}}
    ]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "toolu_02", "is_error": true, "content": [{"type": "text", "text": "location is required"}]}
    ]}
  ],
  "stream": true,
  "metadata": {"user_id": "u-1"}
}`

func TestAnthropicParse(t *testing.T) {
	req, err := Anthropic().Parse([]byte(anthropicRequest))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "claude-sonnet-4-5" || !req.Stream || req.MaxOutput != 16000 {
		t.Fatalf("model %q stream %v max %d", req.Model, req.Stream, req.MaxOutput)
	}
	var got []string
	for _, m := range req.Messages {
		enc, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(enc))
	}
	want := []string{
		`{"role":"system","content":[{"type":"text","text":"You are a weather bot."},{"type":"text","text":"Answer briefly."}]}`,
		`{"role":"user","content":"What's the weather in Paris?"}`,
		`{"role":"assistant","content":[{"type":"text","text":"Let me check."}],"tool_calls":[{"id":"toolu_01A09q90qw90lq917835lq9","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris, France\",\"unit\":\"celsius\"}"}}],"extra":{"anthropic_content_prefix":[{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds","thinking":"The user wants the weather in Paris. I'll call get_weather.","type":"thinking"}]}}`,
		`{"role":"tool","content":"15 degrees","tool_call_id":"toolu_01A09q90qw90lq917835lq9"}`,
		`{"role":"user","content":[{"type":"text","text":"And this one?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"image_url","image_url":{"url":"https://upload.wikimedia.org/a.jpg"}}]}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_02","type":"function","function":{"name":"get_weather","arguments":"{}"}}],"extra":{"anthropic_content_prefix":[{"data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP","type":"redacted_thinking"}]}}`,
		`{"role":"tool","content":[{"type":"text","text":"location is required"}],"tool_call_id":"toolu_02","extra":{"anthropic_is_error":true}}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAnthropicParseSystemString(t *testing.T) {
	req, err := Anthropic().Parse([]byte(`{"model":"m","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || string(req.Messages[0].Content.Raw()) != `"Be brief."` {
		t.Fatalf("%+v", req.Messages)
	}
	// A blank system is no message.
	req, err = Anthropic().Parse([]byte(`{"model":"m","max_tokens":5,"system":"","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil || len(req.Messages) != 1 {
		t.Fatalf("%+v %v", req, err)
	}
}

func TestAnthropicParseRefuses(t *testing.T) {
	for _, body := range []string{
		``,
		`[]`,
		`{"model":"m","max_tokens":5}`,
		`{"model":"m","max_tokens":5,"messages":[]}`,
		`{"model":"m","max_tokens":5,"messages":"hi"}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":7}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"text":"no type"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"","name":"f","input":{}}]}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"system":7,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":"5","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"system":"a","system":"b"}`,
		"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}",
		// Tool calls and results that do not pair up.
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]},{"role":"user","content":"no result"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"r"}]}]}`,
		// Field names are read exactly, as the API reads them.
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","Content":"x"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"Role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","Text":"x"}]}]}`,
	} {
		_, err := Anthropic().Parse([]byte(body))
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", body, err)
		}
	}
}

// normalizeAnthropic gives a request the form Build writes, meaning unchanged: string
// contents as one text block, system as one text block, no cache_control, tool inputs
// and thinking blocks as any JSON value.
func normalizeAnthropic(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	textBlocks := func(v any) any {
		if s, ok := v.(string); ok {
			return []any{map[string]any{"type": "text", "text": s}}
		}
		for _, b := range v.([]any) {
			delete(b.(map[string]any), "cache_control")
		}
		return v
	}
	if s, ok := r["system"]; ok {
		// The system blocks are one system message: Render joins its text parts.
		var texts []string
		for _, b := range textBlocks(s).([]any) {
			texts = append(texts, b.(map[string]any)["text"].(string))
		}
		r["system"] = []any{map[string]any{"type": "text", "text": strings.Join(texts, "\n")}}
	}
	for _, m := range r["messages"].([]any) {
		m := m.(map[string]any)
		m["content"] = textBlocks(m["content"])
		for _, b := range m["content"].([]any) {
			if b := b.(map[string]any); b["type"] == "tool_result" {
				if s, ok := b["content"].(string); ok {
					b["content"] = s // Build keeps a string result a string
				}
			}
		}
	}
	return r
}

func TestAnthropicRoundTrip(t *testing.T) {
	req, err := Anthropic().Parse([]byte(anthropicRequest))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	got, want := normalizeAnthropic(t, out), normalizeAnthropic(t, []byte(anthropicRequest))
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("round trip changed the request:\n%s\nwant\n%s", g, w)
	}
	// The fields around system and messages are the client's bytes.
	head := anthropicRequest[:strings.Index(anthropicRequest, `"system"`)]
	tail := anthropicRequest[strings.Index(anthropicRequest, `,
  "stream"`):]
	if !strings.HasPrefix(string(out), head) || !strings.HasSuffix(string(out), tail) {
		t.Fatalf("bytes around the conversation changed:\n%s", out)
	}
	if !strings.Contains(string(out), `"thinking": {"type": "enabled", "budget_tokens": 10000},`) {
		t.Fatalf("thinking settings changed:\n%s", out)
	}
	// Build is deterministic: the marker nonce never shows.
	again, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil || string(again) != string(out) {
		t.Fatalf("two builds differ:\n%s\n%s", out, again)
	}
	if strings.Contains(string(out), "compactor-mark") {
		t.Fatalf("a marker left in %s", out)
	}
}

func TestAnthropicBuildWithoutSystem(t *testing.T) {
	req, err := Anthropic().Parse([]byte(`{"system": "", "model":"m","max_tokens":5,"messages":[{"role":"user","content":"old"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []schemas.Message{{Role: "user", Content: schemas.Text("new")}}
	out, err := Anthropic().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"new"}]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	// A system message of the context replaces the client's system in place, or is
	// added when the client sent none.
	msgs = append([]schemas.Message{{Role: "system", Content: schemas.Text("pinned")}}, msgs...)
	out, err = Anthropic().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want = `{"system": [{"type":"text","text":"pinned"}], "model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"new"}]}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	req.Body = []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"old"}]}`)
	out, err = Anthropic().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"new"}]}],"system":[{"type":"text","text":"pinned"}]}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

// anthropicReply is a Messages response with thinking and a tool call, as the API
// reference shows them.
const anthropicReply = `{
  "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
  "content": [
    {"type": "thinking", "thinking": "I should look it up.", "signature": "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve"},
    {"type": "text", "text": "I'll check the weather.", "citations": null},
    {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {"location": "San Francisco, CA"}}
  ],
  "stop_reason": "tool_use", "stop_sequence": null,
  "usage": {"input_tokens": 472, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000, "output_tokens": 89}
}`

func TestAnthropicReply(t *testing.T) {
	m, u, err := Anthropic().Reply([]byte(anthropicReply))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := m.Encode()
	want := `{"role":"assistant","content":[{"type":"text","text":"I'll check the weather."}],"tool_calls":[{"id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"San Francisco, CA\"}"}}],"extra":{"anthropic_content_prefix":[{"signature":"WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve","thinking":"I should look it up.","type":"thinking"}]}}`
	if string(enc) != want {
		t.Fatalf("got  %s\nwant %s", enc, want)
	}
	if *u != (wire.Usage{Input: 2572, Output: 89, CacheRead: 2000, CacheWrite: 100}) {
		t.Fatalf("usage %+v", u)
	}
	// The client sends the reply back as the next request's assistant turn: it is
	// the same message.
	var r struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal([]byte(anthropicReply), &r)
	req, err := Anthropic().Parse([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":` + string(r.Content) + `},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","content":"15"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	back, _ := req.Messages[1].Encode()
	if string(back) != string(enc) {
		t.Fatalf("the turn sent back is\n%s\nthe reply stored\n%s", back, enc)
	}
	for _, bad := range []string{``, `{}`, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"x"}]}`} {
		if _, _, err := Anthropic().Reply([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	// An empty reply is an empty assistant message.
	m, u, err = Anthropic().Reply([]byte(`{"type":"message","role":"assistant","content":[]}`))
	if err != nil || u != nil || string(m.Content.Raw()) != `[]` {
		t.Fatalf("%+v %v %v", m, u, err)
	}
}

// anthropicStreamEvents is the streamed form of anthropicReply, as the streaming
// documentation shows it.
var anthropicStreamEvents = []sseEvent{
	{"message_start", `{"type":"message_start","message":{"id":"msg_01Aq9w938a90dw8q","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}`},
	{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I should "}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look it up."}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve"}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":0}`},
	{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`},
	{"ping", `{"type": "ping"}`},
	{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"I'll check "}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"the weather."}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":1}`},
	{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":2}`},
	{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`},
	{"message_stop", `{"type":"message_stop"}`},
}

func TestAnthropicStream(t *testing.T) {
	s := Anthropic().NewStream()
	for i, e := range anthropicStreamEvents {
		if s.Done() {
			t.Fatalf("done before event %d", i)
		}
		if i == len(anthropicStreamEvents)-1 {
			if _, _, err := s.Result(); err == nil {
				t.Fatal("a result before message_stop")
			}
		}
		if err := s.Event(e.name, []byte(e.data)); err != nil {
			t.Fatalf("%s: %v", e.data, err)
		}
	}
	if !s.Done() || s.Failed() {
		t.Fatalf("done %v failed %v", s.Done(), s.Failed())
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	want, wantU, _ := Anthropic().Reply([]byte(anthropicReply))
	got, _ := m.Encode()
	w, _ := want.Encode()
	if string(got) != string(w) {
		t.Fatalf("streamed\n%s\nwhole\n%s", got, w)
	}
	if *u != *wantU {
		t.Fatalf("usage %+v, want %+v", u, wantU)
	}
}

func TestAnthropicStreamFailed(t *testing.T) {
	s := Anthropic().NewStream()
	for _, e := range anthropicStreamEvents[:3] {
		if err := s.Event(e.name, []byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Event("error", []byte(`{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`)); err != nil {
		t.Fatal(err)
	}
	if !s.Failed() || s.Done() {
		t.Fatalf("failed %v done %v", s.Failed(), s.Done())
	}
	if _, _, err := s.Result(); err == nil {
		t.Fatal("a result from a failed stream")
	}
	for _, bad := range []sseEvent{{"content_block_delta", `{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"x"}}`},
		{"message_start", `not json`}, {"content_block_start", `{"type":"content_block_start","index":0}`}} {
		if err := Anthropic().NewStream().Event(bad.name, []byte(bad.data)); err == nil {
			t.Errorf("%s accepted", bad.data)
		}
	}
}

// The proxy's own error event, split from the bytes it writes, is a failure to the
// stream reader (and has the API's form: event error, type error).
func TestAnthropicStreamError(t *testing.T) {
	raw := Anthropic().StreamError("upstream connection lost")
	if !strings.HasPrefix(string(raw), "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"upstream connection lost\"}}\n\n") {
		t.Fatalf("%q", raw)
	}
	s := Anthropic().NewStream()
	sp := wire.NewSSESplitter(0, s.Event)
	if _, err := sp.Write(raw); err != nil {
		t.Fatal(err)
	}
	if !s.Failed() {
		t.Fatal("not a failure")
	}
}

// Blocks of the API's own that Compactor's format has no part for (a PDF document,
// server tool blocks, search results) go back to the API verbatim, not as the
// placeholder text formats.Render would give them.
func TestAnthropicRoundTripForeignBlocks(t *testing.T) {
	body := `{"model":"m","max_tokens":9,"messages":[
  {"role":"user","content":[
    {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"},"title":"Q3","citations":{"enabled":true}},
    {"type":"text","text":"Summarize it, then search."}]},
  {"role":"assistant","content":[
    {"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"q3 results"}},
    {"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://a.example","title":"A","encrypted_content":"EqgfCio","page_age":null}]},
    {"type":"text","text":"Found it."},
    {"type":"tool_use","id":"toolu_9","name":"lookup","input":{"k":1}},
    {"type":"tool_use","id":"toolu_10","name":"lookup","input":{"k":2}}]},
  {"role":"user","content":[
    {"type":"tool_result","tool_use_id":"toolu_9","content":[{"type":"search_result","source":"https://b.example","title":"B","content":[{"type":"text","text":"b"}]},{"type":"text","text":"done"}]},
    {"type":"tool_result","tool_use_id":"toolu_10","is_error":true,"content":"nope"}]}
]}`
	req, err := Anthropic().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Anthropic().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	got, want := normalizeAnthropic(t, out), normalizeAnthropic(t, []byte(body))
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		t.Fatalf("round trip changed the request:\n%s", g)
	}
}

// Build leaves the summary as formats.Render writes it (the cache breakpoint) and puts
// the thinking blocks back into the tail.
func TestAnthropicBuildWithSummary(t *testing.T) {
	req, err := Anthropic().Parse([]byte(anthropicRequest))
	if err != nil {
		t.Fatal(err)
	}
	// system, summary, then the tail from the first assistant turn on.
	msgs := append([]schemas.Message{req.Messages[0], {Role: "user", Content: schemas.Text("Summary: asked about Paris.")}}, req.Messages[2:]...)
	cx := wiretest.ContextOf(msgs)
	cx.HasSummary = true
	cx.Seqs[1] = 0
	out, err := Anthropic().Build(req, cx)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if !strings.Contains(s, `"messages": [{"role":"user","content":[{"type":"text","text":"Summary: asked about Paris.","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds","thinking":"The user wants the weather in Paris. I'll call get_weather.","type":"thinking"},{"type":"text","text":"Let me check."}`) {
		t.Fatalf("got %s", s)
	}
}

// A server tool's input streams like a tool's, and its block goes back verbatim.
func TestAnthropicStreamServerToolUse(t *testing.T) {
	s := Anthropic().NewStream()
	for _, e := range []sseEvent{
		{"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1}}}`},
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","name":"web_search","input":{}}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"weather NYC today\"}"}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","content":[{"type":"web_search_result","title":"Weather","url":"https://weather.example","encrypted_content":"Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k","page_age":null}]}}`},
		{"content_block_stop", `{"type":"content_block_stop","index":1}`},
		{"message_stop", `{"type":"message_stop"}`},
	} {
		if err := s.Event(e.name, []byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := m.Encode()
	want := `{"role":"assistant","content":[{"id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","input":{"query":"weather NYC today"},"name":"web_search","type":"server_tool_use"},{"content":[{"encrypted_content":"Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k","page_age":null,"title":"Weather","type":"web_search_result","url":"https://weather.example"}],"tool_use_id":"srvtoolu_014hJH82Qum7Td6UV8gDXThB","type":"web_search_tool_result"}]}`
	if string(enc) != want {
		t.Fatalf("got  %s\nwant %s", enc, want)
	}
	if *u != (wire.Usage{Input: 10, Output: 1}) {
		t.Fatalf("usage %+v", u)
	}
	// The same blocks whole, in another key order and spacing, are the same message.
	whole, _, err := Anthropic().Reply([]byte(`{"type":"message","role":"assistant","content":[
	  {"type": "server_tool_use", "name": "web_search", "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB", "input": {"query": "weather NYC today"}},
	  {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
	   "content": [{"url": "https://weather.example", "type": "web_search_result", "title": "Weather", "page_age": null, "encrypted_content": "Ev0DCioIAxgCIiQ3NmU4ZmI4OC1k"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := whole.Encode(); string(w) != want {
		t.Fatalf("whole reply %s", w)
	}
}

// The stream's bytes in any chunking, CRLF lines included, give the same reply.
func TestAnthropicStreamThroughTheSplitter(t *testing.T) {
	var b strings.Builder
	for _, e := range anthropicStreamEvents {
		b.WriteString("event: " + e.name + "\r\ndata: " + e.data + "\r\n\r\n")
	}
	want, wantU, _ := Anthropic().Reply([]byte(anthropicReply))
	w, _ := want.Encode()
	for _, n := range []int{1, 3, 64, b.Len()} {
		s := Anthropic().NewStream()
		sp := wire.NewSSESplitter(0, s.Event)
		raw := b.String()
		for i := 0; i < len(raw); i += n {
			if _, err := sp.Write([]byte(raw[i:min(i+n, len(raw))])); err != nil {
				t.Fatal(err)
			}
		}
		m, u, err := s.Result()
		if err != nil {
			t.Fatalf("chunks of %d: %v", n, err)
		}
		got, _ := m.Encode()
		if string(got) != string(w) || *u != *wantU {
			t.Fatalf("chunks of %d: %s %+v", n, got, u)
		}
	}
}

// The client's prompt cache breakpoints (left out of the messages Parse reads) are
// put back: on the last system block (when the context's system is not the client's,
// which goes as sent) and the last block of the last message, with the client's own
// cache_control, within the API's four breakpoints counting the tools' and the
// summary's; the bytes before them are those of the build without them.
func TestAnthropicBuildCarriesTheClientsBreakpoints(t *testing.T) {
	body := func(tools string) string {
		return `{"model":"m","max_tokens":9,"tools":[` + tools + `],
"system":[{"type":"text","text":"S1"},{"type":"text","text":"S2","cache_control":{"type":"ephemeral","ttl":"1h"}}],
"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"},"cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"old"}]},
{"role":"assistant","content":"ok"},
{"role":"user","content":[{"type":"text","text":"new","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`
	}
	tool := `{"name":"t%d","input_schema":{"type":"object"}%s}`
	marked := `,"cache_control":{"type":"ephemeral","ttl":"1h"}`
	build := func(t *testing.T, b string, summary bool) string {
		t.Helper()
		req, err := Anthropic().Parse([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		// The context's system is its own (the same text in one part): it is
		// rendered.
		msgs := append([]schemas.Message{{Role: "system", Content: schemas.Text("S1\nS2")}}, req.Messages[1:]...)
		cx := wiretest.ContextOf(msgs)
		if summary { // the first user message stands for the summary
			cx.HasSummary, cx.Seqs[1] = true, 0
		}
		out, err := Anthropic().Build(req, cx)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	// One tool breakpoint, no summary: system and the last message are marked, the
	// document's own breakpoint is not carried (it would be a fifth).
	oneTool := fmt.Sprintf(tool, 1, marked)
	got := build(t, body(oneTool), false)
	want := `"system":[{"type":"text","text":"S1\nS2","cache_control":{"type":"ephemeral","ttl":"1h"}}],` + "\n" +
		`"messages":[{"role":"user","content":[{"source":{"data":"doc","media_type":"text/plain","type":"text"},"type":"document"},{"type":"text","text":"old"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"ok"}]},` +
		`{"role":"user","content":[{"type":"text","text":"new","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`
	if !strings.HasSuffix(got, want) {
		t.Fatalf("got  %s\nwant …%s", got, want)
	}
	if strings.Count(got, "cache_control") != 3 {
		t.Fatalf("%d breakpoints: %s", strings.Count(got, "cache_control"), got)
	}
	// Three tool breakpoints and a summary leave none: only the summary's.
	three := fmt.Sprintf(tool, 1, marked) + "," + fmt.Sprintf(tool, 2, marked) + "," + fmt.Sprintf(tool, 3, marked)
	got = build(t, body(three), true)
	if n := strings.Count(got, "cache_control"); n != 4 {
		t.Fatalf("%d breakpoints: %s", n, got)
	}
	if !strings.Contains(got, `"system":[{"type":"text","text":"S1\nS2"}]`) {
		t.Fatalf("system marked: %s", got)
	}
	// Two tool breakpoints and a summary leave one: system's.
	two := fmt.Sprintf(tool, 1, marked) + "," + fmt.Sprintf(tool, 2, marked)
	got = build(t, body(two), true)
	if n := strings.Count(got, "cache_control"); n != 4 || !strings.Contains(got, `"S1\nS2","cache_control"`) {
		t.Fatalf("%d breakpoints: %s", n, got)
	}
	// Without a breakpoint of the client's, none is added, and the bytes are those
	// of the marked build with the breakpoints taken out.
	plain := strings.NewReplacer(marked, "")
	unmarked := build(t, plain.Replace(body(oneTool)), false)
	if strings.Contains(unmarked, "cache_control") {
		t.Fatalf("breakpoints added: %s", unmarked)
	}
	if plain.Replace(build(t, body(oneTool), false)) != unmarked {
		t.Fatalf("the breakpoints changed other bytes")
	}
	// With the client's own system in the context, the system field goes as sent,
	// its breakpoints counted with the tools'.
	req, err := Anthropic().Parse([]byte(body(three)))
	if err != nil {
		t.Fatal(err)
	}
	cx := wiretest.ContextOf(req.Messages)
	cx.HasSummary, cx.Seqs[1] = true, 0
	out, err := Anthropic().Build(req, cx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"system":[{"type":"text","text":"S1"},{"type":"text","text":"S2","cache_control":{"type":"ephemeral","ttl":"1h"}}]`) ||
		strings.Count(string(out), "cache_control") != 4 || strings.Contains(string(out), `"ephemeral"}`) {
		t.Fatalf("got %s", out)
	}
}

type sseEvent struct{ name, data string }

// streamOf is events as an event stream's bytes.
func streamOf(events []sseEvent) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("event: " + e.name + "\ndata: " + e.data + "\n\n")
	}
	return b.String()
}
