package gemini

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// cliRequest is a request shaped like those Gemini CLI (packages/core, through
// @google/genai) sends: systemInstruction as a user Content, generationConfig with a
// thinkingConfig, tools with functionDeclarations; function calls with the ids the CLI
// gives them (the upstream sent none) and the thoughtSignature on a turn's first call;
// thought parts stripped from its history; an old tool output masked.
const cliRequest = `{
  "contents": [
    {"role": "user", "parts": [{"text": "This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Monday, December 7, 2026.\nMy operating system is: linux"}, {"text": "Got it."}]},
    {"role": "user", "parts": [{"text": "Which Go files are there, and what does main.go do?"}]},
    {"role": "model", "parts": [
      {"text": "I'll list the directory first."},
      {"functionCall": {"id": "list_directory_1765090000000_0", "name": "list_directory", "args": {"dir_path": "/repo"}}, "thoughtSignature": "CtwBAdHtim9+fWxnbWH0zXcHBjGQy1x1EsQVSp0Bq3oHnw=="}
    ]},
    {"role": "user", "parts": [{"functionResponse": {"id": "list_directory_1765090000000_0", "name": "list_directory", "response": {"output": "Directory listing for /repo:\ngo.mod\nmain.go"}}}]},
    {"role": "model", "parts": [
      {"functionCall": {"id": "read_file_1765090000100_1", "name": "read_file", "args": {"file_path": "/repo/main.go"}}, "thoughtSignature": "skip_thought_signature_validator"},
      {"functionCall": {"id": "read_file_1765090000100_2", "name": "read_file", "args": {"file_path": "/repo/go.mod", "limit": 20}}}
    ]},
    {"role": "user", "parts": [
      {"functionResponse": {"id": "read_file_1765090000100_1", "name": "read_file", "response": {"output": "<tool_output_masked>\n[Tool output string (0.02MB, 612 lines) masked to preserve context window. Full string saved to: /tmp/tool-outputs/read_file_1.txt]\n</tool_output_masked>"}}},
      {"functionResponse": {"id": "read_file_1765090000100_2", "name": "read_file", "response": {"error": "File not found: /repo/go.mod"}}},
      {"text": "Also, keep it short."}
    ]},
    {"role": "model", "parts": [{"text": "main.go prints a greeting; there is no go.mod.", "thoughtSignature": "EoYCCoMCAdHtim8jQ0s7"}]},
    {"role": "user", "parts": [{"text": "Thanks. Now run the tests."}]}
  ],
  "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent specializing in software engineering tasks."}]},
  "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64, "maxOutputTokens": 65536, "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "HIGH"}},
  "tools": [{"functionDeclarations": [
    {"name": "list_directory", "description": "Lists a directory.", "parametersJsonSchema": {"type": "object", "properties": {"dir_path": {"type": "string"}}, "required": ["dir_path"]}},
    {"name": "read_file", "description": "Reads a file.", "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}, "limit": {"type": "number"}}, "required": ["file_path"]}}
  ]}],
  "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}
}`

func encodeAll(t *testing.T, msgs []schemas.Message) []string {
	t.Helper()
	out := make([]string, len(msgs))
	for i := range msgs {
		enc, err := msgs[i].Encode()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(enc)
	}
	return out
}

func TestParseCLIRequest(t *testing.T) {
	req, err := Gemini().Parse([]byte(cliRequest))
	if err != nil {
		t.Fatal(err)
	}
	if req.MaxOutput != 65536 || req.Model != "" || req.Stream {
		t.Fatalf("max %d model %q stream %v", req.MaxOutput, req.Model, req.Stream)
	}
	want := []string{
		`{"role":"system","content":"You are an interactive CLI agent specializing in software engineering tasks."}`,
		`{"role":"user","content":[{"type":"text","text":"This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Monday, December 7, 2026.\nMy operating system is: linux"},{"type":"text","text":"Got it."}]}`,
		`{"role":"user","content":"Which Go files are there, and what does main.go do?","extra":{"gemini_new_content":true}}`,
		`{"role":"assistant","content":"I'll list the directory first.","tool_calls":[{"id":"gemini_0_list_directory","type":"function","function":{"name":"list_directory","arguments":"{\"dir_path\":\"/repo\"}"}}],"extra":{"gemini_parts":[{"c":{}},{"t":{"thoughtSignature":"CtwBAdHtim9+fWxnbWH0zXcHBjGQy1x1EsQVSp0Bq3oHnw=="},"f":{"id":"list_directory_1765090000000_0"}}]}}`,
		`{"role":"tool","content":"Directory listing for /repo:\ngo.mod\nmain.go","tool_call_id":"gemini_0_list_directory","extra":{"gemini_response":{"id":"list_directory_1765090000000_0"}}}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"gemini_0_read_file","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"/repo/main.go\"}"}},{"id":"gemini_1_read_file","type":"function","function":{"name":"read_file","arguments":"{\"file_path\":\"/repo/go.mod\",\"limit\":20}"}}],"extra":{"gemini_parts":[{"t":{"thoughtSignature":"skip_thought_signature_validator"},"f":{"id":"read_file_1765090000100_1"}},{"t":{},"f":{"id":"read_file_1765090000100_2"}}]}}`,
		`{"role":"tool","content":"<tool_output_masked>\n[Tool output string (0.02MB, 612 lines) masked to preserve context window. Full string saved to: /tmp/tool-outputs/read_file_1.txt]\n</tool_output_masked>","tool_call_id":"gemini_0_read_file","extra":{"gemini_response":{"id":"read_file_1765090000100_1"}}}`,
		`{"role":"tool","content":"File not found: /repo/go.mod","tool_call_id":"gemini_1_read_file","extra":{"gemini_response":{"id":"read_file_1765090000100_2","key":"error"}}}`,
		`{"role":"user","content":"Also, keep it short."}`,
		`{"role":"assistant","content":"main.go prints a greeting; there is no go.mod.","extra":{"gemini_parts":[{"c":{"thoughtSignature":"EoYCCoMCAdHtim8jQ0s7"}}]}}`,
		`{"role":"user","content":"Thanks. Now run the tests."}`,
	}
	got := encodeAll(t, req.Messages)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// roundTrip builds body from the messages it parses to: the same JSON value, every
// field but contents and the system instruction byte for byte, and parsed again the
// same messages.
func roundTrip(t *testing.T, body string) *wire.Request {
	t.Helper()
	req, err := Gemini().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out := wiretest.CheckBuild(t, Gemini(), req, "contents", "systemInstruction", "system_instruction")
	if out == nil {
		t.Fatal("Build refused the request's own messages")
	}
	if !wiretest.JSONEqual(t, out, []byte(body)) {
		t.Fatalf("built\n%s\nsent\n%s", out, body)
	}
	again, err := Gemini().Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	a, b := encodeAll(t, req.Messages), encodeAll(t, again.Messages)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("parsed\n%s\nthen\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	return req
}

func TestRoundTripCLIRequest(t *testing.T) {
	req := roundTrip(t, cliRequest)
	// The system instruction, unchanged, is left as sent: byte for byte.
	out, err := Gemini().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := wire.FieldMap(out)
	if string(f["systemInstruction"]) != `{"role": "user", "parts": [{"text": "You are an interactive CLI agent specializing in software engineering tasks."}]}` {
		t.Fatalf("systemInstruction rewritten: %s", f["systemInstruction"])
	}
}

// Gemini CLI before May 2026 kept the upstream's calls without an id and gave each
// response an id of its own: the calls and responses pair by name and order, and
// Build sends the call without an id and the response with the client's.
func TestRoundTripOldCLIIds(t *testing.T) {
	body := `{"contents":[
	  {"role":"user","parts":[{"text":"read both"}]},
	  {"role":"model","parts":[{"functionCall":{"name":"read_file","args":{"file_path":"a"}}},{"functionCall":{"name":"glob","args":{"pattern":"*.go"}}},{"functionCall":{"name":"read_file","args":{"file_path":"b"}}}]},
	  {"role":"user","parts":[
	    {"functionResponse":{"id":"glob-1752000000000-9f1c2a","name":"glob","response":{"output":"main.go"}}},
	    {"functionResponse":{"id":"read_file-1752000000000-1a2b3c","name":"read_file","response":{"output":"A"}}},
	    {"functionResponse":{"id":"read_file-1752000000001-4d5e6f","name":"read_file","response":{"output":"B"}}}]}
	]}`
	req := roundTrip(t, body)
	got := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == schemas.RoleTool {
			got[m.Content.String()] = m.ToolCallID
		}
	}
	want := map[string]string{"main.go": "gemini_1_glob", "A": "gemini_0_read_file", "B": "gemini_2_read_file"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("result %q paired with %q, want %q", k, got[k], v)
		}
	}
}

// Parts Compactor's form has no part for, a thought part, a document, code execution,
// nested function response parts, siblings between responses, two user Contents in a
// row, a Content without a role, snake_case fields: all come back as sent.
func TestRoundTripEveryKindOfPart(t *testing.T) {
	for name, body := range map[string]string{
		"thoughts and code": `{"contents":[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[
		  {"text":"Let me think","thought":true,"thoughtSignature":"c2ln"},{"executableCode":{"language":"PYTHON","code":"print(1)"}},
		  {"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"1\n"}},{"text":""},{"text":"done","thoughtSignature":"c2lnMg=="}]}]}`,
		"media": `{"contents":[{"parts":[{"text":"what is this"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},
		  {"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}},{"fileData":{"mimeType":"video/mp4","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/abc"}},
		  {"text":"x","videoMetadata":{"fps":1}}]}]}`,
		"nested response parts and siblings": `{"contents":[{"role":"user","parts":[{"text":"look"}]},
		  {"role":"model","parts":[{"functionCall":{"name":"read_file","args":{"file_path":"a.png"}}},{"functionCall":{"name":"read_file","args":{"file_path":"b.mp3"}}}]},
		  {"role":"user","parts":[{"functionResponse":{"name":"read_file","response":{"output":"Binary content provided (1 item(s))."},"parts":[{"inlineData":{"mimeType":"image/png","data":"iVBO"}}],"willContinue":false}},
		    {"inlineData":{"mimeType":"audio/mpeg","data":"SUQz"}},
		    {"functionResponse":{"name":"read_file","response":{"output":"b","__binary_injection__":[{"inlineData":{"mimeType":"audio/mpeg","data":"SUQz"}}]}}},
		    {"fileData":{"mimeType":"application/pdf","fileUri":"gs://b/c.pdf"}}]}]}`,
		"same roles apart": `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"user","parts":[{"text":"b"}]},
		  {"role":"model","parts":[{"text":"c"}]},{"role":"model","parts":[{"functionCall":{"name":"f"}}]},
		  {"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"g"}}]}]}`,
		"empty model turn":   `{"system_instruction":{"parts":[{"text":"s1"},{"text":"s2"}]},"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[]},{"role":"user","parts":[{"text":"b"}]}]}`,
		"snake case parts":   `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"AA=="}}]},{"role":"model","parts":[{"function_call":{"name":"f","args":{}}},{"text":"t","thought_signature":"AA=="}]},{"role":"user","parts":[{"function_response":{"name":"f","response":{}}}]}]}`,
		"args not an object": `{"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":[1,2.50,"x"]}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"r","exit":0}}}]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if strings.Contains(name, "same roles") {
				// A functionResponse to g answers no call: refused, as the API does.
				if _, err := Gemini().Parse([]byte(body)); !errors.Is(err, wire.ErrBadRequest) {
					t.Fatalf("an orphan response: %v", err)
				}
				body = strings.Replace(body, `{"functionResponse":{"name":"g"}}`, `{"text":"more"}`, 1)
			}
			roundTrip(t, body)
		})
	}
}

// Gemini CLI 0.61 sends each response twice: with two calls of one name, the second
// copy of the first response is the first's, not the second call's answer.
func TestDuplicateResponsesPairById(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"go"}]},
	  {"role":"model","parts":[{"functionCall":{"id":"A","name":"run","args":{"c":"a"}}},{"functionCall":{"id":"B","name":"run","args":{"c":"b"}}}]},
	  {"role":"user","parts":[{"functionResponse":{"id":"A","name":"run","response":{"output":"a"}}},{"functionResponse":{"id":"A","name":"run","response":{"output":"a"}}},
	    {"functionResponse":{"id":"B","name":"run","response":{"output":"b"}}},{"functionResponse":{"id":"B","name":"run","response":{"output":"b"}}}]}]}`
	req := roundTrip(t, body)
	got := encodeAll(t, req.Messages[2:])
	want := []string{
		`{"role":"tool","content":"a","tool_call_id":"gemini_0_run","extra":{"gemini_response":{"id":"A","after":[{"functionResponse":{"id":"A","name":"run","response":{"output":"a"}}}]}}}`,
		`{"role":"tool","content":"b","tool_call_id":"gemini_1_run","extra":{"gemini_response":{"id":"B","after":[{"functionResponse":{"id":"B","name":"run","response":{"output":"b"}}}]}}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A copy in a Content of its own is refused: it would answer no call the API sees.
	bad := strings.Replace(body, `]}]}`, `]},{"role":"user","parts":[{"functionResponse":{"id":"A","name":"run","response":{}}}]}]}`, 1)
	if _, err := Gemini().Parse([]byte(bad)); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "answered in an earlier Content") {
		t.Fatalf("got %v", err)
	}
}

func TestParsePassesThrough(t *testing.T) {
	for body, reason := range map[string]string{
		`{"cachedContent":"cachedContents/abc123","contents":[{"role":"user","parts":[{"text":"hi"}]}]}`: "cached-content",
	} {
		_, err := Gemini().Parse([]byte(body))
		var pt *wire.Passthrough
		if !errors.As(err, &pt) || pt.Reason != reason {
			t.Errorf("%s: got %v, want %s", body, err, reason)
		}
	}
	for _, body := range []string{
		`{"generationConfig":{"responseMimeType":"text/plain"},"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
		// Structured output (Gemini CLI's side requests) is the proxy's to handle.
		`{"generationConfig":{"responseMimeType":"application/json"},"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
		`{"generationConfig":{"responseJsonSchema":{"type":"OBJECT"}},"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`,
	} {
		if _, err := Gemini().Parse([]byte(body)); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"not json":           `{"contents":`,
		"no contents":        `{"generationConfig":{}}`,
		"empty contents":     `{"contents":[]}`,
		"contents object":    `{"contents":{"role":"user"}}`,
		"bad role":           `{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}`,
		"part not object":    `{"contents":[{"role":"user","parts":["x"]}]}`,
		"orphan response":    `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}`,
		"unanswered call":    `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"f"}}]},{"role":"user","parts":[{"text":"y"}]}]}`,
		"bad max":            `{"generationConfig":{"maxOutputTokens":-1},"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		"bad system":         `{"systemInstruction":{"parts":[{"inlineData":{}}]},"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		"two systems":        `{"systemInstruction":{"parts":[{"text":"a"}]},"system_instruction":{"parts":[{"text":"b"}]},"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		"invalid utf-8":      "{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"\xff\"}]}]}",
		"duplicate field":    `{"contents":[],"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		"parts not an array": `{"contents":[{"role":"user","parts":{"text":"x"}}]}`,
	} {
		if _, err := Gemini().Parse([]byte(body)); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// The compacted context: the summary is user text merged with the tail's first user
// message, the system instruction left as sent, the calls of the tail with the
// client's ids and signatures.
func TestBuildWithSummary(t *testing.T) {
	req, err := Gemini().Parse([]byte(cliRequest))
	if err != nil {
		t.Fatal(err)
	}
	sum := assemble.SummaryMessage(&schemas.Result{Summary: "The user asked about the repo."})
	msgs := append([]schemas.Message{req.Messages[0], sum}, req.Messages[5:]...)
	seqs := []uint64{1, 0}
	for i := 5; i < len(req.Messages); i++ {
		seqs = append(seqs, uint64(i+1))
	}
	out, err := Gemini().Build(req, &assemble.Context{Messages: msgs, Seqs: seqs, HasSummary: true})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := wire.FieldMap(out)
	var contents []struct {
		Role  string            `json:"role"`
		Parts []json.RawMessage `json:"parts"`
	}
	if err := json.Unmarshal(f["contents"], &contents); err != nil {
		t.Fatal(err)
	}
	if len(contents) < 2 || contents[0].Role != "user" || !strings.Contains(string(contents[0].Parts[0]), "The user asked about the repo.") {
		t.Fatalf("contents %s", f["contents"])
	}
	if !strings.Contains(string(f["contents"]), `"id":"read_file_1765090000100_2"`) || !strings.Contains(string(f["contents"]), `"thoughtSignature":"skip_thought_signature_validator"`) {
		t.Fatalf("the client's ids or signatures are lost: %s", f["contents"])
	}
	if _, err := Gemini().Parse(out); err != nil {
		t.Fatalf("the compacted request does not parse: %v", err)
	}
	// A context without the system message drops the field; another system text
	// replaces its parts, its role kept.
	out, err = Gemini().Build(req, wiretest.ContextOf(req.Messages[1:]))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := wire.FieldMap(out); f["systemInstruction"] != nil {
		t.Fatalf("systemInstruction kept: %s", f["systemInstruction"])
	}
	other := append([]schemas.Message{{Role: schemas.RoleSystem, Content: schemas.Text("Be brief.")}}, req.Messages[1:]...)
	out, err = Gemini().Build(req, wiretest.ContextOf(other))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := wire.FieldMap(out); string(f["systemInstruction"]) != `{"role": "user", "parts": [{"text":"Be brief."}]}` {
		t.Fatalf("systemInstruction %s", f["systemInstruction"])
	}
}

// A truncated message (an override joins its text parts) still renders: its slots no
// longer match, so its parts go in Compactor's order with its calls' ids kept.
func TestBuildTruncatedMessages(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"go"}]},{"role":"model","parts":[
	  {"text":"a","thought":true},{"text":"one","thoughtSignature":"s1"},{"text":"two"},{"functionCall":{"id":"c1","name":"f","args":{"x":1}},"thoughtSignature":"s2"}]},
	  {"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{"output":"` + strings.Repeat("r", 1000) + `"}}}]}]}`
	req, err := Gemini().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	msgs := append([]schemas.Message(nil), req.Messages...)
	for i := range msgs {
		msgs[i] = assemble.ApplyOverride(msgs[i], schemas.Override{KeepHead: 2, KeepTail: 2})
	}
	out, err := Gemini().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	again, err := Gemini().Parse(out)
	if err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(again.Messages) != 3 || !strings.Contains(string(out), `"id":"c1"`) || !strings.Contains(string(out), "characters cut by Compactor") {
		t.Fatalf("built %s", out)
	}
}

const replyBody = `{
  "candidates": [{
    "content": {"role": "model", "parts": [
      {"text": "**Planning** I should run the tests.", "thought": true},
      {"text": "Running the tests."},
      {"functionCall": {"name": "run_shell_command", "args": {"command": "go test ./...", "description": "Run the tests"}}, "thoughtSignature": "CiQBjz1rX2Fz"}
    ]},
    "finishReason": "STOP", "index": 0
  }],
  "usageMetadata": {"promptTokenCount": 12000, "candidatesTokenCount": 40, "thoughtsTokenCount": 160, "cachedContentTokenCount": 8000, "totalTokenCount": 12200},
  "modelVersion": "gemini-3-pro-preview", "responseId": "abc"
}`

func TestReply(t *testing.T) {
	m, u, err := Gemini().Reply([]byte(replyBody))
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := m.Encode()
	want := `{"role":"assistant","content":"Running the tests.","tool_calls":[{"id":"gemini_0_run_shell_command","type":"function","function":{"name":"run_shell_command","arguments":"{\"command\":\"go test ./...\",\"description\":\"Run the tests\"}"}}],"extra":{"gemini_parts":[{"p":{"text":"**Planning** I should run the tests.","thought":true}},{"c":{}},{"t":{"thoughtSignature":"CiQBjz1rX2Fz"}}],"gemini_upstream":true}}`
	if string(enc) != want {
		t.Fatalf("got\n%s\nwant\n%s", enc, want)
	}
	if *u != (wire.Usage{Input: 12000, Output: 200, CacheRead: 8000}) {
		t.Fatalf("usage %+v", *u)
	}
	for _, bad := range []string{`{"candidates":[]}`, `[1]`, `{"candidates":[{"content":{"parts":[1]}}]}`, `{"promptFeedback":{"blockReason":"SAFETY"}}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"hmm","thought":true}]},"finishReason":"STOP"}]}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"text":" "}]},"finishReason":"STOP"}]}`, `{"candidates":[{"finishReason":"SAFETY"}]}`} {
		if _, _, err := Gemini().Reply([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// streamEvents is a streamGenerateContent?alt=sse answer as the API sends it: thought
// text, then answer text in deltas, a call whole with its signature, usage on the
// last chunk with the finishReason.
var streamEvents = []wiretest.SSEEvent{
	{Data: `{"candidates":[{"content":{"parts":[{"text":"**Planning** I should ","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":12000,"totalTokenCount":12000},"modelVersion":"gemini-3-pro-preview"}`},
	{Data: `{"candidates":[{"content":{"parts":[{"text":"run the tests.","thought":true}],"role":"model"},"index":0}]}`},
	{Data: `{"candidates":[{"content":{"parts":[{"text":"Running "}],"role":"model"},"index":0}]}`},
	{Data: `{"candidates":[{"content":{"parts":[{"text":"the tests."}],"role":"model"},"index":0}]}`},
	{Data: `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"go test ./...","description":"Run the tests"}},"thoughtSignature":"CiQBjz1rX2Fz"}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":12000,"candidatesTokenCount":40,"thoughtsTokenCount":160,"cachedContentTokenCount":8000,"totalTokenCount":12200}}`},
}

func TestStream(t *testing.T) {
	s := Gemini().NewStream()
	sp := wire.NewSSESplitter(0, s.Event)
	stream := wiretest.Stream(streamEvents)
	for i := 0; i < len(stream); i += 7 { // in chunks that cut events anywhere
		if _, err := sp.Write([]byte(stream[i:min(i+7, len(stream))])); err != nil {
			t.Fatal(err)
		}
	}
	if !s.Done() || s.Failed() {
		t.Fatalf("done %v failed %v", s.Done(), s.Failed())
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r, ru, _ := Gemini().Reply([]byte(replyBody))
	a, _ := m.Encode()
	b, _ := r.Encode()
	if string(a) != string(b) || *u != *ru {
		t.Fatalf("streamed\n%s %+v\nwhole\n%s %+v", a, *u, b, *ru)
	}
}

func TestStreamFailedAndUnfinished(t *testing.T) {
	s := Gemini().NewStream()
	_ = s.Event("", []byte(streamEvents[2].Data))
	if s.Done() {
		t.Fatal("done without a finishReason")
	}
	if _, _, err := s.Result(); err == nil {
		t.Fatal("a result from a stream that did not finish")
	}
	if err := s.Event("", []byte(`{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`)); err != nil {
		t.Fatal(err)
	}
	if !s.Failed() {
		t.Fatal("an error event did not fail the stream")
	}
	if err := Gemini().NewStream().Event("", []byte(`not json`)); err == nil {
		t.Fatal("a stream of something else is not refused")
	}
}

func TestStreamIsBounded(t *testing.T) {
	defer func(m int) { maxStream = m }(maxStream)
	maxStream = 1 << 20
	s := Gemini().NewStream()
	chunk := []byte(`{"candidates":[{"content":{"parts":[{"text":"` + strings.Repeat("x", 1<<10) + `"}]}}]}`)
	var err error
	for i := 0; i < 2000 && err == nil; i++ {
		err = s.Event("", chunk)
	}
	if err == nil {
		t.Fatal("2 MiB of text accumulated past a bound of 1 MiB")
	}
}

func TestErrors(t *testing.T) {
	got := string(Gemini().ErrorBody(429, "rate_limit_error", "slow down"))
	if got != `{"error":{"code":429,"message":"slow down","status":"RESOURCE_EXHAUSTED"}}` {
		t.Fatalf("ErrorBody %s", got)
	}
	for status, want := range map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"} {
		if StatusName(status) != want {
			t.Errorf("%d: %s, want %s", status, StatusName(status), want)
		}
	}
	ev := string(Gemini().StreamError("upstream broke"))
	if ev != "data: {\"error\":{\"code\":500,\"message\":\"upstream broke\",\"status\":\"INTERNAL\"}}\n\n" {
		t.Fatalf("StreamError %q", ev)
	}
	// The event fails a stream read by this wire.
	s := Gemini().NewStream()
	sp := wire.NewSSESplitter(0, s.Event)
	if _, err := sp.Write([]byte(ev)); err != nil || !s.Failed() {
		t.Fatalf("err %v failed %v", err, s.Failed())
	}
}
