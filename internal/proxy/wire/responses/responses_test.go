package responses

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// codexRequest is a Codex-like request (fields as codex-rs sends them): developer and
// user messages with ids, reasoning with encrypted content, a function call and its
// output, an assistant answer, and a custom (apply_patch) call.
const codexRequest = `{"model":"gpt-5.1-codex","instructions":"You are Codex.","input":[` +
	`{"type":"message","id":"msg_dev","role":"developer","content":[{"type":"input_text","text":"<permissions instructions>sandbox</permissions instructions>"}]},` +
	`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]},` +
	`{"type":"message","id":"msg_u1","role":"user","content":[{"type":"input_text","text":"run echo hi"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]},` +
	`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Planning**"}],"content":null,"encrypted_content":"gAAAA-opaque-1"},` +
	`{"type":"function_call","id":"fc_1","status":"completed","name":"exec_command","arguments":"{\"cmd\":\"echo hi\"}","call_id":"call_1"},` +
	`{"type":"function_call","id":"fc_2","status":"completed","name":"exec_command","arguments":"{\"cmd\":\"ls\"}","call_id":"call_2"},` +
	`{"type":"function_call_output","call_id":"call_1","output":"hi\n"},` +
	`{"type":"function_call_output","id":"fco_2","call_id":"call_2","output":[{"type":"input_text","text":"a.go"}]},` +
	`{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"gAAAA-opaque-2"},` +
	`{"type":"message","id":"msg_a1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Printed hi.","annotations":[]}]},` +
	`{"type":"custom_tool_call","status":"completed","call_id":"call_3","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},` +
	`{"type":"custom_tool_call_output","call_id":"call_3","output":"Done!"},` +
	`{"role":"user","content":"thanks"}` +
	`],"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"},"strict":false}],` +
	`"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,` +
	`"include":["reasoning.encrypted_content"],"prompt_cache_key":"019a-session","text":{"verbosity":"low"},"max_output_tokens":2048}`

func parse(t *testing.T, body string) *wire.Request {
	t.Helper()
	req, err := Responses().Parse([]byte(body))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return req
}

func encode(m schemas.Message) string {
	s := m.StripMetadata()
	b, _ := s.Encode()
	return string(b)
}

// fixedPoint builds req from its own messages, with and without the client's items
// (State): both give the request sent (the same JSON value), and parse back to the
// same messages.
func fixedPoint(t *testing.T, body string) *wire.Request {
	t.Helper()
	req := parse(t, body)
	for _, st := range []any{req.State, nil} {
		r := *req
		r.State = st
		out, err := Responses().Build(&r, wiretest.ContextOf(req.Messages))
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		// (Without the client's items, a string input is sent as its message item.)
		if f, _ := wire.FieldMap([]byte(body)); (st != nil || f["input"][0] == '[') && !wiretest.JSONEqual(t, out, []byte(body)) {
			t.Fatalf("built (state %v):\n%s\nsent:\n%s", st != nil, out, body)
		}
		again := parse(t, string(out))
		if len(again.Messages) != len(req.Messages) {
			t.Fatalf("%d messages, then %d", len(req.Messages), len(again.Messages))
		}
		for i := range req.Messages {
			if a, b := encode(req.Messages[i]), encode(again.Messages[i]); a != b {
				t.Fatalf("message %d: %s, then %s", i, a, b)
			}
		}
	}
	return req
}

func TestParseCodexRequest(t *testing.T) {
	req := fixedPoint(t, codexRequest)
	if req.Model != "gpt-5.1-codex" || !req.Stream || req.MaxOutput != 2048 {
		t.Fatalf("model %q stream %v max %d", req.Model, req.Stream, req.MaxOutput)
	}
	want := []struct {
		role  schemas.Role
		calls int
		text  string
	}{
		{schemas.RoleSystem, 0, "You are Codex."},
		{schemas.RoleSystem, 0, "<permissions instructions>sandbox</permissions instructions>"},
		{schemas.RoleUser, 0, "<environment_context>cwd</environment_context>"},
		{schemas.RoleUser, 0, "run echo hi"},
		{schemas.RoleAssistant, 2, ""},
		{schemas.RoleTool, 0, "hi\n"},
		{schemas.RoleTool, 0, "a.go"},
		{schemas.RoleAssistant, 1, "Printed hi."},
		{schemas.RoleTool, 0, "Done!"},
		{schemas.RoleUser, 0, "thanks"},
	}
	if len(req.Messages) != len(want) {
		for _, m := range req.Messages {
			t.Log(encode(m))
		}
		t.Fatalf("%d messages, want %d", len(req.Messages), len(want))
	}
	for i, w := range want {
		m := req.Messages[i]
		if m.Role != w.role || len(m.ToolCalls) != w.calls || m.Content.String() != w.text {
			t.Fatalf("message %d: %s", i, encode(m))
		}
	}
	// The instructions' message is marked; the developer message keeps its role and id.
	if string(req.Messages[0].Extra) != `{"responses_instructions":true}` {
		t.Fatalf("instructions' extra %s", req.Messages[0].Extra)
	}
	if x := string(req.Messages[1].Extra); x != `{"responses_items":[{"message":{"id":"msg_dev","role":"developer","type":"message"}}]}` {
		t.Fatalf("developer's extra %s", x)
	}
	// The reasoning is kept whole, in place, before the calls of its turn.
	a := req.Messages[4]
	if a.ToolCalls[0].ID != "call_1" || a.ToolCalls[1].Function.Arguments != `{"cmd":"ls"}` || !a.Content.IsNull() {
		t.Fatalf("calls %s", encode(a))
	}
	if x := string(a.Extra); x != `{"responses_items":[{"keep":{"content":null,"encrypted_content":"gAAAA-opaque-1","id":"rs_1","summary":[{"text":"**Planning**","type":"summary_text"}],"type":"reasoning"}},{"call":{"id":"fc_1","status":"completed","type":"function_call"}},{"call":{"id":"fc_2","status":"completed","type":"function_call"}}]}` {
		t.Fatalf("layout %s", x)
	}
	// The image is an image_url part; the annotations of the answer stay in its layout.
	if c := string(req.Messages[3].Content.Raw()); !strings.Contains(c, `{"image_url":{"url":"data:image/png;base64,AAAA"},"type":"image_url"}`) {
		t.Fatalf("user content %s", c)
	}
	if x := string(req.Messages[7].Extra); !strings.Contains(x, `"texts":[{"annotations":[]}]`) {
		t.Fatalf("answer's extra %s", x)
	}
	// The custom call is a tool call whose arguments are its input.
	if tc := req.Messages[7].ToolCalls[0]; tc.ID != "call_3" || tc.Function.Name != "apply_patch" || tc.Function.Arguments != "*** Begin Patch\n*** End Patch" {
		t.Fatalf("custom call %+v", tc)
	}
}

// loadFixture returns the body of a request Codex sent (captured against a scripted
// model server: internal/proxy/agenttest/capture).
func loadFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "codex", name))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Path string          `json:"path"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Path != "/v1/responses" {
		t.Fatalf("%s: path %s", name, f.Path)
	}
	return f.Body
}

func TestCodexCaptures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "codex", "*.json"))
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body := loadFixture(t, filepath.Base(f))
			req := fixedPoint(t, string(body))
			// Built from its own messages with the client's items, the request is the
			// one sent byte for byte.
			out, err := Responses().Build(req, wiretest.ContextOf(req.Messages))
			if err != nil || string(out) != string(body) {
				t.Fatalf("not byte for byte: %v", err)
			}
			for _, m := range req.Messages {
				if m.Role == schemas.RoleAssistant && strings.Contains(string(m.Content.Raw()), "encrypted") {
					t.Fatalf("reasoning read as content: %s", encode(m))
				}
			}
		})
	}
}

// The reply the proxy stores and the same turn Codex sends back next time are the
// same message: the stream and the response the capture's model server sent for the
// first turns (a reasoning and a call; a reasoning and an answer), and the items
// Codex sent back in its next requests.
func TestReplyIsTheTurnSentBack(t *testing.T) {
	next := parse(t, string(loadFixture(t, "05-p2-responses-text-answer.json")))
	// The messages: 2 developer, 2 user, [rs_0001 fc_0001], tool, [rs_0002 msg_0002], user, ...
	call, answer := next.Messages[4], next.Messages[6]
	if len(call.ToolCalls) != 1 || answer.Role != schemas.RoleAssistant || len(answer.ToolCalls) != 0 {
		t.Fatalf("unexpected turns %s / %s", encode(call), encode(answer))
	}
	callStream := wiretest.Stream([]wiretest.SSEEvent{
		ev("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_0001","object":"response","status":"in_progress","output":[]}}`),
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_0001","summary":[]}}`),
		ev("response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":2,"output_index":0,"item_id":"rs_0001","summary_index":0,"delta":"**Planning**\n\nRun the command."}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{"type":"reasoning","id":"rs_0001","summary":[{"type":"summary_text","text":"**Planning**\n\nRun the command."}],"encrypted_content":"capture-encrypted-reasoning-0001"}}`),
		ev("response.output_item.added", `{"type":"response.output_item.added","sequence_number":4,"output_index":1,"item":{"type":"function_call","id":"fc_0001","call_id":"call_0001","name":"exec_command","arguments":"","status":"in_progress"}}`),
		ev("response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":5,"output_index":1,"item_id":"fc_0001","delta":"{\"cmd\":"}`),
		ev("response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":6,"output_index":1,"item_id":"fc_0001","delta":"\"echo hi\"}"}`),
		ev("response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":7,"output_index":1,"item_id":"fc_0001","arguments":"{\"cmd\":\"echo hi\"}"}`),
		ev("response.output_item.done", `{"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"type":"function_call","id":"fc_0001","call_id":"call_0001","name":"exec_command","arguments":"{\"cmd\":\"echo hi\"}","status":"completed"}}`),
		ev("response.completed", `{"type":"response.completed","sequence_number":9,"response":{"id":"resp_0001","object":"response","status":"completed","output":[],"usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1230}}}`),
	})
	m, u := streamResult(t, callStream)
	if key(&m) != key(&call) {
		t.Fatalf("streamed %s\nsent back %s", encode(m), encode(call))
	}
	// The next request, built from the stored history (the client's messages and the
	// reply stored, through the store's encoding, with Compactor's metadata), is the
	// one Codex sent, byte for byte: the client's own items.
	stored := append([]schemas.Message(nil), next.Messages...)
	stored[4] = m
	for i := range stored {
		stored[i].Tokens = 10 + i
		stored[i].Meta = map[string]string{"chain": "ab"}
		raw, err := stored[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		if stored[i], err = schemas.DecodeMessage(raw); err != nil {
			t.Fatal(err)
		}
	}
	out, err := Responses().Build(next, wiretest.ContextOf(stored))
	if err != nil || string(out) != string(next.Body) {
		t.Fatalf("the request built from the stored history is not the one sent (%v)", err)
	}
	// Without the client's items, the same messages (the reasoning item as the
	// upstream gave it: Codex adds "content": null to it).
	out, err = Responses().Build(&wire.Request{Body: next.Body}, wiretest.ContextOf(stored))
	if err != nil {
		t.Fatal(err)
	}
	again := parse(t, string(out))
	for i := range again.Messages {
		if key(&again.Messages[i]) != key(&next.Messages[i]) {
			t.Fatalf("message %d: %s, sent %s", i, encode(again.Messages[i]), encode(next.Messages[i]))
		}
	}
	if u == nil || *u != (wire.Usage{Input: 1200, Output: 30, CacheRead: 1024}) {
		t.Fatalf("usage %+v", u)
	}
	// The answer, as a response object (not streamed).
	body := `{"id":"resp_0002","object":"response","created_at":1,"status":"completed","model":"gpt-5.1-codex","output":[` +
		`{"type":"reasoning","id":"rs_0002","summary":[{"type":"summary_text","text":"**Planning**\n\nRun the command."}],"encrypted_content":"capture-encrypted-reasoning-0002"},` +
		`{"type":"message","id":"msg_0002","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Done: the command printed hi. FACT-ALPHA-1 is noted.","annotations":[]}]}],` +
		`"usage":{"input_tokens":1500,"input_tokens_details":{"cached_tokens":0},"output_tokens":12,"total_tokens":1512}}`
	r, u, err := Responses().Reply([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if key(&r) != key(&answer) {
		t.Fatalf("reply %s\nsent back %s", encode(r), encode(answer))
	}
	if u == nil || *u != (wire.Usage{Input: 1500, Output: 12}) {
		t.Fatalf("usage %+v", u)
	}
	// The same answer streamed as text deltas (no output_item.done) reads the same.
	textStream := wiretest.Stream([]wiretest.SSEEvent{
		ev("response.output_item.done", `{"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_0002","summary":[{"type":"summary_text","text":"**Planning**\n\nRun the command."}],"encrypted_content":"capture-encrypted-reasoning-0002"}}`),
		ev("response.output_item.added", `{"type":"response.output_item.added","output_index":1,"item":{"type":"message","id":"msg_0002","role":"assistant","status":"in_progress","content":[]}}`),
		ev("response.output_text.delta", `{"type":"response.output_text.delta","output_index":1,"content_index":0,"item_id":"msg_0002","delta":"Done: the command printed hi. "}`),
		ev("response.output_text.delta", `{"type":"response.output_text.delta","output_index":1,"content_index":0,"item_id":"msg_0002","delta":"FACT-ALPHA-1 is noted."}`),
		ev("response.completed", `{"type":"response.completed","response":{"id":"resp_0002","object":"response","status":"completed","output":[]}}`),
	})
	s, u := streamResult(t, textStream)
	if key(&s) != key(&answer) || u != nil {
		t.Fatalf("streamed %s (usage %v)\nsent back %s", encode(s), u, encode(answer))
	}
}

func ev(name, data string) wiretest.SSEEvent { return wiretest.SSEEvent{Name: name, Data: data} }

func streamResult(t *testing.T, stream string) (schemas.Message, *wire.Usage) {
	t.Helper()
	s := Responses().NewStream()
	sp := wire.NewSSESplitter(1<<20, s.Event)
	if _, err := sp.Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	if !s.Done() || s.Failed() {
		t.Fatalf("done %v failed %v", s.Done(), s.Failed())
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	return m, u
}

func TestStreamFailures(t *testing.T) {
	for name, stream := range map[string]string{
		"failed":     "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"x\"}}}\n\n",
		"incomplete": "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"status\":\"incomplete\"}}\n\n",
		"error":      "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}\n\n",
		"error-data": "data: {\"type\":\"error\",\"message\":\"x\"}\n\n",
		"proxy":      string(Responses().StreamError("the upstream went away")),
	} {
		s := Responses().NewStream()
		sp := wire.NewSSESplitter(1<<20, s.Event)
		if _, err := sp.Write([]byte(stream)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !s.Failed() {
			t.Fatalf("%s: not failed", name)
		}
		if _, _, err := s.Result(); err == nil {
			t.Fatalf("%s: a result", name)
		}
	}
	// A stream cut before response.completed has no result.
	s := Responses().NewStream()
	_ = s.Event("response.output_item.added", []byte(`{"type":"response.output_item.added","output_index":0,"item":{"type":"message","role":"assistant","content":[]}}`))
	if _, _, err := s.Result(); err == nil || s.Done() {
		t.Fatal("a result without response.completed")
	}
	// A delta for an item never added is not the API's stream.
	if err := Responses().NewStream().Event("", []byte(`{"type":"response.output_text.delta","output_index":3,"delta":"x"}`)); err == nil {
		t.Fatal("a delta for no item accepted")
	}
}

// StreamError is what Codex reads as a failed response: a response.failed event whose
// response has an error with a message (codex-rs codex-api sse/responses.rs), after an
// error event (type, code, message, param, sequence_number: the API's ResponseErrorEvent).
func TestStreamErrorShape(t *testing.T) {
	var events []wiretest.SSEEvent
	sp := wire.NewSSESplitter(1<<20, func(name string, data []byte) error {
		events = append(events, wiretest.SSEEvent{Name: name, Data: string(data)})
		return nil
	})
	if _, err := sp.Write(Responses().StreamError("boom")); err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].Name != "error" || events[1].Name != "response.failed" {
		t.Fatalf("events %+v", events)
	}
	var e struct {
		Type, Code, Message string
		Param               *string
	}
	if err := json.Unmarshal([]byte(events[0].Data), &e); err != nil || e.Type != "error" || e.Message != "boom" || e.Code == "" {
		t.Fatalf("error event %s", events[0].Data)
	}
	var f struct {
		Type     string `json:"type"`
		Response struct {
			Status string `json:"status"`
			Error  struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"response"`
	}
	if err := json.Unmarshal([]byte(events[1].Data), &f); err != nil || f.Type != "response.failed" || f.Response.Status != "failed" || f.Response.Error.Message != "boom" {
		t.Fatalf("response.failed %s", events[1].Data)
	}
	// No top-level error field: the openai-go stream would stop at it before reading
	// the event (ssestream: a data object with an "error" key).
	if top, _ := wire.FieldMap([]byte(events[1].Data)); top["error"] != nil {
		t.Fatalf("%s", events[1].Data)
	}
}

func TestErrorBody(t *testing.T) {
	var e struct {
		Error struct {
			Message, Type string
			Param, Code   any
		}
	}
	if err := json.Unmarshal(Responses().ErrorBody(400, "invalid_request_error", "no <input>"), &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Message != "no <input>" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("%+v", e)
	}
}

func TestPassthrough(t *testing.T) {
	for _, c := range []struct{ body, reason string }{
		{`{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`, "previous-response-id"},
		{`{"model":"m","conversation":"conv_1","input":"hi"}`, "conversation"},
	} {
		_, err := Responses().Parse([]byte(c.body))
		var p *wire.Passthrough
		if !errors.As(err, &p) || p.Reason != c.reason {
			t.Fatalf("%s: %v", c.body, err)
		}
	}
	// Null previous_response_id and store: true are a stateless request.
	req := fixedPoint(t, `{"model":"m","previous_response_id":null,"store":true,"input":"hi"}`)
	if len(req.Messages) != 1 || req.Messages[0].Content.String() != "hi" {
		t.Fatalf("%+v", req.Messages)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, body := range []string{
		`[]`,
		`{"model":"m"}`,
		`{"input":null}`,
		`{"input":[]}`,
		`{"input":42}`,
		`{"input":[42]}`,
		`{"input":[{"content":"no role nor type"}]}`,
		`{"input":[{"type":"message","role":"critic","content":"x"}]}`,
		`{"input":[{"type":"message","role":"user"}]}`,
		`{"input":[{"type":"message","role":"user","content":[{"type":"text","text":"chat part"}]}]}`,
		`{"instructions":["x"],"input":"hi"}`,
		`{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"role":"user","content":"between"},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"input":"hi","stream":"yes"}`,
		"{\"input\":\"\xff\"}",
		`{"input":"a","input":"b"}`,
	} {
		_, err := Responses().Parse([]byte(body))
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("%s: %v", body, err)
		}
	}
}

// Each kind of item round-trips, in place: the shorthand message, the local shell call
// and its output (named by id, as the API documents it), an unknown item between two
// user messages, several answers in one turn, a call beside an empty answer, an output
// that is neither a string nor parts.
func TestItemsRoundTrip(t *testing.T) {
	for _, body := range []string{
		`{"input":"just a string"}`,
		`{"input":[{"role":"user","content":"shorthand"},{"role":"assistant","content":"reply"},{"role":"system","content":"sys"},{"role":"developer","content":"dev"}]}`,
		`{"input":[{"type":"message","role":"user","content":"ls"},{"type":"local_shell_call","id":"lsh_1","call_id":"call_1","status":"completed","action":{"type":"exec","command":["ls","-l"],"timeout_ms":1000,"env":{}}},{"type":"local_shell_call_output","id":"call_1","output":"{\"output\":\"a\"}"}]}`,
		`{"input":[{"type":"local_shell_call","call_id":"c","status":"completed","action":{"type":"exec","command":["true"]}},{"type":"local_shell_call_output","call_id":"c","output":"ok","status":"completed"}],"instructions":""}`,
		`{"input":[{"role":"user","content":"a"},{"type":"item_reference","id":"msg_9"},{"role":"user","content":"b"}]}`,
		`{"input":[{"role":"user","content":"a"},{"id":"msg_9"},{"role":"user","content":"b"}]}`,
		`{"input":[{"role":"user","content":"a"},{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"go"}},{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","phase":"commentary","content":[{"type":"output_text","text":"first"}]},{"type":"message","role":"assistant","content":"second"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x","logprobs":[]},{"type":"refusal","refusal":"no"}]},{"role":"user","content":"c"}]}`,
		`{"input":[{"type":"message","role":"assistant","content":""},{"type":"function_call","call_id":"c","name":"f","arguments":""},{"type":"function_call_output","call_id":"c","output":{"content":"x","success":false}}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"message","role":"assistant","content":"after"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"t","extra":1},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},{"type":"input_image","file_id":"file_1"},{"type":"input_file","file_id":"file_2"}]}]}`,
		`{"input":[{"type":"reasoning","summary":[],"encrypted_content":"e"}]}`,
		`{"input":[{"type":"compaction","encrypted_content":"opaque"},{"role":"user","content":"go on"}]}`,
		`{"input":[{"role":"user","content":"ls"},{"type":"shell_call","call_id":"s1","action":{"commands":["ls"]}},{"type":"shell_call_output","call_id":"s1","output":[]},{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":"done"}]}`,
	} {
		fixedPoint(t, body)
	}
}

// Build with a compacted context: the summary a message item, the tail the client's
// own items, every other field as sent, the instructions kept.
func TestBuildCompacted(t *testing.T) {
	req := parse(t, codexRequest)
	summary := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(assemble.SummaryPrefix + "They ran echo hi.")}
	// Kept: the instructions and the developer message (pinned), the summary, and the
	// tail from the custom call on.
	cx := &assemble.Context{HasSummary: true,
		Messages: []schemas.Message{req.Messages[0], req.Messages[1], summary, req.Messages[7], req.Messages[8], req.Messages[9]},
		Seqs:     []uint64{1, 2, 0, 8, 9, 10}}
	out, err := Responses().Build(req, cx)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := wire.FieldMap(out)
	sent, _ := wire.FieldMap([]byte(codexRequest))
	for k, v := range sent {
		if k != "input" && string(got[k]) != string(v) {
			t.Fatalf("%s: %s, sent %s", k, got[k], v)
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(got["input"], &items); err != nil {
		t.Fatal(err)
	}
	var sentItems []json.RawMessage
	_ = json.Unmarshal(sent["input"], &sentItems)
	want := []string{string(sentItems[0]), `{"content":"` + strings.ReplaceAll(assemble.SummaryPrefix, "\n", `\n`) + `They ran echo hi.","role":"user","type":"message"}`}
	for _, it := range sentItems[8:] {
		want = append(want, string(it))
	}
	if len(items) != len(want) {
		t.Fatalf("%d items, want %d:\n%s", len(items), len(want), got["input"])
	}
	for i := range want {
		if string(items[i]) != want[i] {
			t.Fatalf("item %d: %s\nwant %s", i, items[i], want[i])
		}
	}
	again := parse(t, string(out))
	if len(again.Messages) != len(cx.Messages) {
		t.Fatalf("%d messages", len(again.Messages))
	}
	// Built from the stored messages alone (no client's items), the same request.
	out2, err := Responses().Build(&wire.Request{Body: req.Body}, cx)
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, out2) {
		t.Fatalf("from the messages:\n%s\nfrom the items:\n%s", out2, out)
	}
	// A context without the instructions' message leaves them as sent.
	cx2 := &assemble.Context{Messages: cx.Messages[1:], Seqs: cx.Seqs[1:], HasSummary: true}
	out3, err := Responses().Build(req, cx2)
	if err != nil {
		t.Fatal(err)
	}
	f3, _ := wire.FieldMap(out3)
	if string(f3["instructions"]) != `"You are Codex."` {
		t.Fatalf("instructions %s", f3["instructions"])
	}
}

// A message that is not the client's own (a summary of role system, messages from
// Compactor's other producers) renders in the API's terms.
func TestBuildForeignMessages(t *testing.T) {
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("sys")},
		{Role: schemas.RoleUser, Content: schemas.Parts(json.RawMessage(`{"type":"text","text":"look"}`), json.RawMessage(`{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"high"}}`), json.RawMessage(`{"type":"file","file":{"file_id":"f1"}}`))},
		{Role: schemas.RoleAssistant, Content: schemas.Text(""), ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}},
		{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Parts(json.RawMessage(`{"type":"text","text":"r"}`))},
		{Role: schemas.RoleAssistant, Content: schemas.Parts(json.RawMessage(`{"type":"text","text":"a"}`), json.RawMessage(`{"type":"text","text":"b"}`))},
	}
	out, err := Responses().Build(&wire.Request{Body: []byte(`{"model":"m","input":"x"}`)}, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","input":[{"content":"sys","role":"system","type":"message"},` +
		`{"content":[{"text":"look","type":"input_text"},{"detail":"high","image_url":"https://x/a.png","type":"input_image"},{"file_id":"f1","type":"input_file"}],"role":"user","type":"message"},` +
		`{"arguments":"{}","call_id":"c1","name":"f","type":"function_call"},` +
		`{"call_id":"c1","output":[{"text":"r","type":"input_text"}],"type":"function_call_output"},` +
		`{"content":[{"text":"a","type":"output_text"},{"text":"b","type":"output_text"}],"role":"assistant","type":"message"}]}`
	if string(out) != want {
		t.Fatalf("built\n%s\nwant\n%s", out, want)
	}
	if _, err := Responses().Parse(out); err != nil {
		t.Fatal(err)
	}
}

func TestReplyRefuses(t *testing.T) {
	for _, body := range []string{
		`not json`,
		`{"object":"chat.completion","choices":[]}`,
		`{"object":"response","status":"failed","output":[]}`,
		`{"object":"response","output":[{"type":"message","role":"user","content":"x"}]}`,
		`{"object":"response","output":[{"type":"function_call_output","call_id":"c","output":"x"}]}`,
	} {
		if _, _, err := Responses().Reply([]byte(body)); err == nil {
			t.Fatalf("%s: no error", body)
		}
	}
	// An empty output is an empty answer.
	m, u, err := Responses().Reply([]byte(`{"object":"response","status":"incomplete","output":[]}`))
	if err != nil || m.Role != schemas.RoleAssistant || m.Content.String() != "" || u != nil {
		t.Fatalf("%v %v %v", encode(m), u, err)
	}
}

// Build renders a message whatever its Extra holds (a stored message, another
// producer's): a layout that does not fit the message is not used.
func TestBuildOddExtra(t *testing.T) {
	call := []schemas.ToolCall{{ID: "c", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}
	parts := schemas.Parts(json.RawMessage(`{"type":"text","text":"a"}`), json.RawMessage(`{"type":"text","text":"b"}`))
	for _, c := range []struct {
		m     schemas.Message
		extra string
	}{
		{schemas.Message{Role: schemas.RoleAssistant, Content: parts}, `{"responses_items":[{"message":{"type":"message"}},{"message":{"type":"message"},"parts":9223372036854775807},{"message":{"type":"message"},"parts":2}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: parts}, `{"responses_items":[{"message":{"type":"message"},"parts":-1},{"message":{"type":"message"},"parts":3}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: parts}, `{"responses_items":[{"message":{"type":"message"},"parts":1},{"message":{"type":"message"}}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: parts, ToolCalls: call}, `{"responses_items":[{"keep":{"type":"reasoning"},"message":{"type":"message"}},{"call":{"type":"local_shell_call"}}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, ToolCalls: call}, `{"responses_items":[{"message":{"type":"message"}},{"call":{"type":"function_call"}},{"call":{"type":"function_call"}}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("x")}, `{"responses_items":[{}]}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("x")}, `{"responses_items":"no"}`},
		{schemas.Message{Role: schemas.RoleAssistant, Content: parts}, `{"responses_items":[{"message":{"type":"message"},"texts":[1,{"a":1}]}]}`},
		{schemas.Message{Role: schemas.RoleUser, Content: parts}, `{"responses_items":[{"message":[]},{"output":{}}]}`},
		{schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Content: schemas.Text("r")}, `{"responses_items":[{"output":{"type":"local_shell_call_output"},"texts":[null]}]}`},
	} {
		c.m.Extra = json.RawMessage(c.extra)
		msgs := []schemas.Message{c.m}
		switch {
		case c.m.Role == schemas.RoleTool:
			msgs = []schemas.Message{{Role: schemas.RoleAssistant, ToolCalls: call}, c.m}
		case len(c.m.ToolCalls) > 0:
			msgs = append(msgs, schemas.Message{Role: schemas.RoleTool, ToolCallID: "c", Content: schemas.Text("r")})
		}
		out, err := Responses().Build(&wire.Request{Body: []byte(`{"input":"x"}`)}, wiretest.ContextOf(msgs))
		if err != nil {
			t.Fatalf("%s: %v", c.extra, err)
		}
		if _, err := Responses().Parse(out); err != nil {
			t.Fatalf("%s: built %s: %v", c.extra, out, err)
		}
	}
}

// An item the client answers the model with (here shell_call_output) is a message of
// its own: the model's items before and after it are the two replies stored.
func TestClientOutputsSplitRuns(t *testing.T) {
	req := parse(t, `{"input":[{"role":"user","content":"ls"},{"type":"shell_call","call_id":"s1","action":{"commands":["ls"]}},{"type":"shell_call_output","call_id":"s1","output":[]},{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}`)
	if len(req.Messages) != 4 {
		t.Fatalf("%d messages", len(req.Messages))
	}
	first, _, err := Responses().Reply([]byte(`{"object":"response","output":[{"type":"shell_call","call_id":"s1","action":{"commands":["ls"]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := Responses().Reply([]byte(`{"object":"response","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if encode(first) != encode(req.Messages[1]) || encode(second) != encode(req.Messages[3]) {
		t.Fatalf("replies %s, %s\nsent back %s, %s", encode(first), encode(second), encode(req.Messages[1]), encode(req.Messages[3]))
	}
}

// From turn to turn Codex sends the history again and more: each request's messages
// start with the previous request's, the same messages (the proxy's digest chain
// links them).
func TestCodexTurnsExtendTheHistory(t *testing.T) {
	var prev []schemas.Message
	for _, name := range []string{"02-p1-responses-text-answer.json", "05-p2-responses-text-answer.json", "10-p5-responses-summary-request.json"} {
		req := parse(t, string(loadFixture(t, name)))
		if len(req.Messages) <= len(prev) {
			t.Fatalf("%s: %d messages after %d", name, len(req.Messages), len(prev))
		}
		for i := range prev {
			if encode(req.Messages[i]) != encode(prev[i]) {
				t.Fatalf("%s: message %d: %s, was %s", name, i, encode(req.Messages[i]), encode(prev[i]))
			}
		}
		prev = req.Messages
	}
}
