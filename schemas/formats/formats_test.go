package formats_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

var validators = map[formats.Format]func([]byte) error{
	formats.OpenAI:    validateOpenAI,
	formats.Anthropic: validateAnthropic,
	formats.Responses: validateResponses,
	formats.Gemini:    validateGemini,
}

func text(role schemas.Role, s string) schemas.Message {
	return schemas.Message{Role: role, Content: schemas.Text(s)}
}

func call(content string, calls ...schemas.ToolCall) schemas.Message {
	m := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: calls}
	if content != "" {
		m.Content = schemas.Text(content)
	}
	return m
}

func tc(id, name, args string) schemas.ToolCall {
	return schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: args}}
}

func result(id, s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(s)}
}

func parts(role schemas.Role, ps ...string) schemas.Message {
	raws := make([]json.RawMessage, len(ps))
	for i, p := range ps {
		raws[i] = json.RawMessage(p)
	}
	return schemas.Message{Role: role, Content: schemas.Parts(raws...)}
}

// build assembles a context: pinned entries (seq 1..), a summary when summary != "",
// and the tail.
func build(pinned []schemas.Message, summary string, tail []schemas.Message) assemble.Context {
	in := assemble.Input{}
	seq := uint64(1)
	var pins []uint64
	for _, m := range pinned {
		in.Pinned = append(in.Pinned, schemas.Entry{Seq: seq, Message: m})
		pins = append(pins, seq)
		seq++
	}
	seq += 10 // the summarized messages
	if summary != "" {
		in.Value = &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1, Summary: summary,
			PinnedSeqs: pins, TailStartSeq: seq}
	}
	for _, m := range tail {
		in.Tail = append(in.Tail, schemas.Entry{Seq: seq, Message: m})
		seq++
	}
	if summary == "" {
		in.Tail = append(in.Pinned, in.Tail...)
		in.Pinned = nil
	}
	return assemble.Assemble(in, assemble.Options{})
}

// cases are contexts every format must render into a valid request.
var cases = []struct {
	name    string
	pinned  []schemas.Message
	summary string
	tail    []schemas.Message
}{
	{name: "empty"},
	{name: "system only", pinned: []schemas.Message{text(schemas.RoleSystem, "be brief")}},
	{name: "plain", pinned: []schemas.Message{text(schemas.RoleSystem, "be brief")}, summary: "we met",
		tail: []schemas.Message{text(schemas.RoleUser, "hi"), text(schemas.RoleAssistant, "hello")}},
	{name: "leading assistant", tail: []schemas.Message{text(schemas.RoleAssistant, "I start"), text(schemas.RoleUser, "ok")}},
	{name: "pinned assistant before the summary", pinned: []schemas.Message{text(schemas.RoleAssistant, "I keep this")},
		summary: "s", tail: []schemas.Message{text(schemas.RoleAssistant, "next")}},
	{name: "same roles merged", summary: "s", tail: []schemas.Message{
		text(schemas.RoleUser, "one"), text(schemas.RoleUser, "two"),
		text(schemas.RoleAssistant, "a"), text(schemas.RoleAssistant, "b")}},
	{name: "parallel calls then user", pinned: []schemas.Message{text(schemas.RoleSystem, "sys")}, summary: "s", tail: []schemas.Message{
		text(schemas.RoleUser, "go"),
		call("running both", tc("call_1", "ls", `{"dir": "."}`), tc("call_2", "cat", `{"f":"a"}`)),
		result("call_1", "a b"), result("call_2", ""),
		text(schemas.RoleUser, "and then?"),
		call("", tc("call_3", "rm", `not json`)), result("call_3", "done"),
		call("", tc("call_4", "noargs", ``)), result("call_4", "ok"),
		text(schemas.RoleAssistant, "all done")}},
	{name: "calls right after the summary", summary: "s", tail: []schemas.Message{
		call("", tc("call_1", "ls", `[1,2]`)), result("call_1", "x")}},
	{name: "hostile ids", summary: "s", tail: []schemas.Message{
		call("", tc("call.1/é", "ls", `{}`), tc("call 2", "ls", `{}`)), result("call.1/é", "x"), result("call 2", "y")}},
	{name: "an id reused by a later round", summary: "s", tail: []schemas.Message{
		call("", tc("call_1", "ls", `{}`)), result("call_1", "x"),
		call("", tc("call_1", "ls", `{}`), tc("call_1_2", "cat", `{}`)), result("call_1", "y"), result("call_1_2", "z")}},
	{name: "system in the tail", pinned: []schemas.Message{text(schemas.RoleSystem, "sys")}, summary: "s", tail: []schemas.Message{
		text(schemas.RoleUser, "hi"), text(schemas.RoleSystem, "new rule"), text(schemas.RoleAssistant, "ok")}},
	{name: "blank and null contents", summary: "s", tail: []schemas.Message{
		text(schemas.RoleUser, "  "), {Role: schemas.RoleAssistant}, text(schemas.RoleUser, "real"),
		text(schemas.RoleAssistant, "")}},
	{name: "content parts", summary: "s", tail: []schemas.Message{
		parts(schemas.RoleUser, `{"type":"text","text":"look"}`,
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}`,
			`{"type":"image_url","image_url":{"url":"https://example.com/a.jpg"}}`,
			`{"type":"image_url","image_url":"data:image/bmp;base64,Qk0="}`,
			`{"type":"image_url","image_url":{"url":"ftp://x"}}`,
			`{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}`,
			`{"type":"file","file":{"filename":"a.pdf","file_data":"JVBE"}}`,
			`{"type":"text","text":""}`),
		call("", tc("call_1", "shot", `{}`)),
		{Role: schemas.RoleTool, ToolCallID: "call_1", Content: schemas.Parts(
			json.RawMessage(`{"type":"text","text":"screenshot"}`),
			json.RawMessage(`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/"}}`))},
		parts(schemas.RoleAssistant, `{"type":"text","text":"seen"}`, `{"type":"refusal","refusal":"no"}`)}},
	{name: "reasoning and extra dropped", summary: "s", tail: []schemas.Message{
		text(schemas.RoleUser, "q"),
		{Role: schemas.RoleAssistant, Content: schemas.Text("a"), Reasoning: "thought", Extra: json.RawMessage(`{"sig":"x"}`), Name: "bot"}}},
}

func TestRenderEveryFormatIsValidAndDeterministic(t *testing.T) {
	for _, c := range cases {
		cx := build(c.pinned, c.summary, c.tail)
		for _, f := range formats.Names() {
			t.Run(c.name+"/"+f, func(t *testing.T) {
				req, err := formats.Render(&cx, formats.Format(f))
				if err != nil {
					t.Fatal(err)
				}
				if err := validators[req.Format](req.JSON); err != nil {
					t.Fatalf("%v\n%s", err, req.JSON)
				}
				again, err := formats.Render(&cx, formats.Format(f))
				if err != nil || !bytes.Equal(again.JSON, req.JSON) || again.Prefix != req.Prefix {
					t.Fatalf("second rendering differs (%v):\n%s\n%s", err, req.JSON, again.JSON)
				}
				if cx.HasSummary != (req.Prefix > 0) {
					t.Fatalf("prefix %d; want > 0 exactly when there is a summary (%v)", req.Prefix, cx.HasSummary)
				}
				if req.Prefix > 0 && !bytes.Contains(req.JSON[:req.Prefix], []byte(c.summary)) {
					t.Fatalf("prefix %q does not hold the summary", req.JSON[:req.Prefix])
				}
				if bytes.Contains(req.JSON, []byte("thought")) != (f == "openai" && c.name == "reasoning and extra dropped") {
					t.Fatalf("reasoning kept or dropped wrongly: %s", req.JSON)
				}
			})
		}
	}
}

func TestRenderShapes(t *testing.T) {
	cx := build([]schemas.Message{text(schemas.RoleSystem, "sys")}, "old", []schemas.Message{
		text(schemas.RoleUser, "go"),
		call("ok", tc("call_1", "ls", `{"d": 1}`)), result("call_1", "a"),
	})
	sum := strings.ReplaceAll(assemble.SummaryPrefix, "\n", `\n`) + "old"
	tests := []struct {
		give formats.Format
		want string
	}{
		{give: formats.OpenAI, want: `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"` + sum + `"},` +
			`{"role":"user","content":"go"},{"role":"assistant","content":"ok","tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"d\": 1}"}}]},` +
			`{"role":"tool","content":"a","tool_call_id":"call_1"}]}`},
		{give: formats.Anthropic, want: `{"system":[{"type":"text","text":"sys"}],"messages":[` +
			`{"role":"user","content":[{"type":"text","text":"` + sum + `","cache_control":{"type":"ephemeral"}},{"type":"text","text":"go"}]},` +
			`{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"call_1","name":"ls","input":{"d":1}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"a"}]}]}`},
		{give: formats.Responses, want: `{"input":[{"type":"message","role":"system","content":"sys"},` +
			`{"type":"message","role":"user","content":"` + sum + `"},{"type":"message","role":"user","content":"go"},` +
			`{"type":"message","role":"assistant","content":"ok"},{"type":"function_call","call_id":"call_1","name":"ls","arguments":"{\"d\": 1}"},` +
			`{"type":"function_call_output","call_id":"call_1","output":"a"}]}`},
		{give: formats.Gemini, want: `{"systemInstruction":{"parts":[{"text":"sys"}]},"contents":[` +
			`{"role":"user","parts":[{"text":"` + sum + `"},{"text":"go"}]},` +
			`{"role":"model","parts":[{"text":"ok"},{"functionCall":{"id":"call_1","name":"ls","args":{"d":1}}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"id":"call_1","name":"ls","response":{"output":"a"}}}]}]}`},
	}
	for _, tt := range tests {
		t.Run(string(tt.give), func(t *testing.T) {
			req, err := formats.Render(&cx, tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if string(req.JSON) != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", req.JSON, tt.want)
			}
			// The prefix ends right after the summary's block, message or item.
			if i := strings.Index(tt.want, `"go"`); req.Prefix >= i || !strings.HasSuffix(string(req.JSON[:req.Prefix]), `}`) {
				t.Fatalf("prefix %q does not end right after the summary", req.JSON[:req.Prefix])
			}
		})
	}
}

func TestRenderDetails(t *testing.T) {
	hostile := build(nil, "s", []schemas.Message{call("", tc("call.1", "ls", `nope`)), result("call.1", "x")})
	leading := build(nil, "", []schemas.Message{text(schemas.RoleAssistant, "hello")})
	reused := build(nil, "s", []schemas.Message{call("", tc("c1", "a", `{}`)), result("c1", "x"), call("", tc("c1", "b", `{}`)), result("c1", "y")})
	tests := []struct {
		name  string
		cx    assemble.Context
		f     formats.Format
		wants []string
	}{
		{name: "anthropic hashes an invalid id the same in use and result", cx: hostile, f: formats.Anthropic,
			wants: []string{`"id":"toolu_`, `"tool_use_id":"toolu_`, `"input":{"_raw":"nope"}`}},
		{name: "gemini wraps invalid arguments", cx: hostile, f: formats.Gemini, wants: []string{`"args":{"_raw":"nope"}`}},
		{name: "responses keeps arguments as sent", cx: hostile, f: formats.Responses, wants: []string{`"arguments":"nope"`, `"call_id":"call.1"`}},
		{name: "anthropic renames an id a later round reuses, in use and result", cx: reused, f: formats.Anthropic,
			wants: []string{`"id":"c1","name":"a"`, `"tool_use_id":"c1","content":"x"`, `"id":"c1_2","name":"b"`, `"tool_use_id":"c1_2","content":"y"`}},
		{name: "responses renames an id a later round reuses", cx: reused, f: formats.Responses,
			wants: []string{`"call_id":"c1","name":"a"`, `"call_id":"c1","output":"x"`, `"call_id":"c1_2","name":"b"`, `"call_id":"c1_2","output":"y"`}},
		{name: "gemini keeps ids: a response answers the turn right before", cx: reused, f: formats.Gemini,
			wants: []string{`"functionResponse":{"id":"c1","name":"b","response":{"output":"y"}}`}},
		{name: "anthropic leading assistant gets a user placeholder", cx: leading, f: formats.Anthropic,
			wants: []string{`{"role":"user","content":[{"type":"text","text":"` + formats.PlaceholderStart + `"}]},{"role":"assistant"`}},
		{name: "gemini leading model turn gets a user placeholder", cx: leading, f: formats.Gemini,
			wants: []string{`{"role":"user","parts":[{"text":"` + formats.PlaceholderStart + `"}]},{"role":"model"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := formats.Render(&tt.cx, tt.f)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.wants {
				if !bytes.Contains(req.JSON, []byte(w)) {
					t.Errorf("got %s; want it to contain %s", req.JSON, w)
				}
			}
		})
	}
	// A system message of the tail is a user text, not part of system: the prefix holds.
	cx := build([]schemas.Message{text(schemas.RoleSystem, "sys")}, "s", []schemas.Message{text(schemas.RoleSystem, "later")})
	for _, f := range []formats.Format{formats.Anthropic, formats.Gemini} {
		req, err := formats.Render(&cx, f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(req.JSON[req.Prefix:], []byte(formats.SystemMarker+"later")) {
			t.Errorf("%s: got %s; want the tail's system message as user text after the prefix", f, req.JSON)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	ok := build(nil, "", []schemas.Message{text(schemas.RoleUser, "hi")})
	unpaired := assemble.Context{Messages: []schemas.Message{call("", tc("c1", "ls", "{}"))}, Seqs: []uint64{1}}
	orphan := assemble.Context{Messages: []schemas.Message{result("c1", "x")}, Seqs: []uint64{1}}
	short := assemble.Context{Messages: []schemas.Message{text(schemas.RoleUser, "hi")}}
	tests := []struct {
		name    string
		cx      *assemble.Context
		f       formats.Format
		wantErr error
		wantMsg string
	}{
		{name: "unknown format", cx: &ok, f: "claude", wantErr: formats.ErrUnknownFormat, wantMsg: `unknown format "claude": use one of openai, anthropic, responses, gemini`},
		{name: "empty format", cx: &ok, f: "", wantErr: formats.ErrUnknownFormat},
		{name: "call without result", cx: &unpaired, f: formats.Anthropic, wantErr: formats.ErrUnpaired},
		{name: "result without call", cx: &orphan, f: formats.Gemini, wantErr: formats.ErrUnpaired},
		{name: "seqs missing", cx: &short, f: formats.OpenAI, wantErr: formats.ErrInvalidContext},
		{name: "nil", cx: nil, f: formats.OpenAI, wantErr: formats.ErrInvalidContext},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := formats.Render(tt.cx, tt.f)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v; want %v", err, tt.wantErr)
			}
			if tt.wantMsg != "" && err.Error() != tt.wantMsg {
				t.Fatalf("got %q; want %q", err, tt.wantMsg)
			}
		})
	}
	if _, err := formats.Parse(strings.Repeat("x", 10000)); err == nil || len(err.Error()) > 200 {
		t.Fatalf("a long unknown name: got %v; want a short error", err)
	}
	for _, n := range formats.Names() {
		if f, err := formats.Parse(n); err != nil || string(f) != n {
			t.Fatalf("Parse(%q) = %q, %v", n, f, err)
		}
	}
}

// TestPrefixDoesNotDependOnLaterMessages renders the context as its tail grows one
// message (or one whole tool round) at a time: the prefix bytes never change.
func TestPrefixDoesNotDependOnLaterMessages(t *testing.T) {
	for _, c := range cases {
		if c.summary == "" {
			continue
		}
		full := build(c.pinned, c.summary, c.tail)
		for _, f := range formats.Names() {
			t.Run(c.name+"/"+f, func(t *testing.T) {
				want, err := formats.Render(&full, formats.Format(f))
				if err != nil {
					t.Fatal(err)
				}
				for k := 0; k <= len(c.tail); k++ {
					cx := build(c.pinned, c.summary, c.tail[:k])
					if len(cx.Skipped) > 0 {
						continue // k cuts a tool round: not a context a reader returns
					}
					got, err := formats.Render(&cx, formats.Format(f))
					if err != nil {
						t.Fatal(err)
					}
					if got.Prefix != want.Prefix || !bytes.Equal(got.JSON[:got.Prefix], want.JSON[:want.Prefix]) {
						t.Fatalf("tail of %d: prefix\n%s\nwant\n%s", k, got.JSON[:got.Prefix], want.JSON[:want.Prefix])
					}
				}
			})
		}
	}
}

// TestValidatorsRefuse shows that each validator catches the rules it checks.
func TestValidatorsRefuse(t *testing.T) {
	tests := []struct {
		name string
		f    formats.Format
		give string
		want string
	}{
		{"anthropic first assistant", formats.Anthropic, `{"messages":[{"role":"assistant","content":"x"}]}`, "first message"},
		{"anthropic no alternation", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"user","content":"y"}]}`, "alternate"},
		{"anthropic unanswered", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{}}]},{"role":"user","content":"y"}]}`, "no tool_result"},
		{"anthropic wrong id", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"b"}]}]}`, "answers no tool_use"},
		{"anthropic text before result", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":{}}]},{"role":"user","content":[{"type":"text","text":"t"},{"type":"tool_result","tool_use_id":"a"}]}]}`, "come first"},
		{"anthropic bad id", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a.b","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a.b"}]}]}`, "does not match"},
		{"anthropic input not object", formats.Anthropic, `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"n","input":"s"}]}]}`, "must be an object"},
		{"anthropic empty text", formats.Anthropic, `{"messages":[{"role":"user","content":[{"type":"text","text":" "}]}]}`, "non-whitespace"},
		{"anthropic bmp", formats.Anthropic, `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"x"}}]}]}`, "media_type"},
		{"anthropic unknown field", formats.Anthropic, `{"messages":[],"extra":1}`, "unknown field"},
		{"responses orphan output", formats.Responses, `{"input":[{"type":"function_call_output","call_id":"a","output":"x"}]}`, "no function_call"},
		{"responses unanswered", formats.Responses, `{"input":[{"type":"function_call","call_id":"a","name":"n","arguments":"{}"}]}`, "no function_call_output"},
		{"responses bad role", formats.Responses, `{"input":[{"type":"message","role":"tool","content":"x"}]}`, "role"},
		{"responses bad part", formats.Responses, `{"input":[{"type":"message","role":"user","content":[{"type":"image_url","image_url":"x"}]}]}`, "input_text or input_image"},
		{"gemini first model", formats.Gemini, `{"contents":[{"role":"model","parts":[{"text":"x"}]}]}`, "first turn"},
		{"gemini no alternation", formats.Gemini, `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"user","parts":[{"text":"y"}]}]}`, "alternate"},
		{"gemini unanswered", formats.Gemini, `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"n","args":{}}}]},{"role":"user","parts":[{"text":"y"}]}]}`, "no functionResponse"},
		{"gemini wrong name", formats.Gemini, `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"n","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"m","response":{}}}]}]}`, "answers no functionCall"},
		{"gemini response not object", formats.Gemini, `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"n"}}]},{"role":"user","parts":[{"functionResponse":{"name":"n","response":"s"}}]}]}`, "must be an object"},
		{"gemini two fields in a part", formats.Gemini, `{"contents":[{"role":"user","parts":[{"text":"x","inlineData":{"mimeType":"a","data":"b"}}]}]}`, "exactly one"},
		{"gemini empty parts", formats.Gemini, `{"contents":[{"role":"user","parts":[]}]}`, "must not be empty"},
		{"openai metadata", formats.OpenAI, `{"messages":[{"role":"user","content":"x","tokens":3}]}`, "stripped"},
		{"openai unanswered", formats.OpenAI, `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a"}]},{"role":"user","content":"x"}]}`, "unanswered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validators[tt.f]([]byte(tt.give))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want an error about %q", err, tt.want)
			}
		})
	}
}

// The service validates formats in package schemas (which imports nothing of ours) and
// its JSON Schema files list them: all must name the same formats.
func TestNamesAreTheServiceFormats(t *testing.T) {
	if got, want := strings.Join(formats.Names(), ","), strings.Join(schemas.ContextFormats(), ","); got != want {
		t.Fatalf("formats.Names() = %s; schemas.ContextFormats() = %s", got, want)
	}
	for _, file := range []string{"service-context-request.v1.json", "service-context-response.v1.json"} {
		b, err := schemas.Files.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Properties struct {
				Format struct {
					Enum []string `json:"enum"`
				} `json:"format"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(doc.Properties.Format.Enum, ","); got != strings.Join(formats.Names(), ",") {
			t.Fatalf("%s: format enum %s; want %s", file, got, strings.Join(formats.Names(), ","))
		}
	}
}

// The summary is a user block in anthropic and gemini whatever its summary_role, so it
// carries the cache breakpoint; responses and openai keep its role.
func TestSummaryRole(t *testing.T) {
	for _, role := range []schemas.Role{schemas.RoleUser, schemas.RoleSystem, schemas.RoleAssistant} {
		in := assemble.Input{
			Value: &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1, Summary: "the summary",
				SummaryRole: role, TailStartSeq: 5, PinnedSeqs: []uint64{1}},
			Pinned: []schemas.Entry{{Seq: 1, Message: text(schemas.RoleSystem, "sys")}},
			Tail:   []schemas.Entry{{Seq: 5, Message: text(schemas.RoleAssistant, "next")}},
		}
		cx := assemble.Assemble(in, assemble.Options{})
		for _, name := range formats.Names() {
			req, err := formats.Render(&cx, formats.Format(name))
			if err != nil {
				t.Fatal(err)
			}
			if err := validators[req.Format](req.JSON); err != nil {
				t.Fatalf("%s, summary_role %s: %v\n%s", name, role, err, req.JSON)
			}
			prefix := string(req.JSON[:req.Prefix])
			wantRole := map[string]string{"openai": `"role":"` + string(role) + `"`, "responses": `"role":"` + string(role) + `"`,
				"anthropic": `{"role":"user","content":[{"type":"text","text":"[Summary`, "gemini": `{"role":"user","parts":[{"text":"[Summary`}[name]
			if !strings.Contains(prefix, "the summary") || !strings.Contains(prefix, wantRole) {
				t.Errorf("%s, summary_role %s: prefix %s; want the summary as %s", name, role, prefix, wantRole)
			}
		}
	}
}
