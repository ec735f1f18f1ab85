package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/formats"
)

// `compactor context --format`: openai prints today's JSONL, the other formats one JSON
// document, the request fragment of that API; --json carries it as "rendered"; an
// unknown format is a usage error (exit 2) that lists the valid ones.
func TestContextFormat(t *testing.T) {
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")},
		{Role: schemas.RoleUser, Content: schemas.Text("list the files")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "call_1", Type: "function",
			Function: schemas.FunctionCall{Name: "ls", Arguments: `{"dir":"."}`}}}},
		{Role: schemas.RoleTool, ToolCallID: "call_1", Content: schemas.Text("a.go b.go")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("two files")},
	}
	if _, errOut, err := cli(t, jsonl(msgs), "publish", "fmt-conv"); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	plain, _, err := cli(t, "", "context", "fmt-conv")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, "", "context", "fmt-conv", "--format", "openai")
	if err != nil || out != plain {
		t.Fatalf("--format openai: %v\n%s\nwant today's JSONL\n%s", err, out, plain)
	}
	tests := []struct {
		format string
		keys   []string // the fragment's top-level fields
		wants  []string
	}{
		{format: "anthropic", keys: []string{"messages", "system"},
			wants: []string{`"type":"tool_use","id":"call_1","name":"ls","input":{"dir":"."}`, `"type":"tool_result","tool_use_id":"call_1","content":"a.go b.go"`}},
		{format: "responses", keys: []string{"input"},
			wants: []string{`"type":"function_call","call_id":"call_1"`, `"type":"function_call_output","call_id":"call_1","output":"a.go b.go"`}},
		{format: "gemini", keys: []string{"contents", "systemInstruction"},
			wants: []string{`"functionCall":{"id":"call_1","name":"ls","args":{"dir":"."}}`, `"functionResponse":{"id":"call_1","name":"ls","response":{"output":"a.go b.go"}}`}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			out, errOut, err := cli(t, "", "context", "fmt-conv", "--format", tt.format)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			dec := json.NewDecoder(strings.NewReader(out))
			var doc map[string]json.RawMessage
			if err := dec.Decode(&doc); err != nil || dec.More() {
				t.Fatalf("printed %q; want one JSON document (%v)", out, err)
			}
			if keys := slices.Sorted(maps.Keys(doc)); !slices.Equal(keys, tt.keys) {
				t.Fatalf("fields %v; want %v", keys, tt.keys)
			}
			for _, w := range tt.wants {
				if !strings.Contains(out, w) {
					t.Errorf("printed %s; want it to contain %s", out, w)
				}
			}
			if !strings.Contains(errOut, "fmt-conv: generation 0, 5 messages") {
				t.Errorf("stderr %q; want the read's summary", errOut)
			}
			var wrapped struct {
				Format   string          `json:"format"`
				Rendered json.RawMessage `json:"rendered"`
				Messages []any           `json:"messages"`
			}
			js, _, err := cli(t, "", "context", "fmt-conv", "--format", tt.format, "--json")
			var compact bytes.Buffer
			if err == nil {
				err = json.Unmarshal([]byte(js), &wrapped)
			}
			if err == nil {
				err = json.Compact(&compact, wrapped.Rendered)
			}
			if err != nil || wrapped.Format != tt.format || compact.String() != strings.TrimSpace(out) || len(wrapped.Messages) != 5 {
				t.Fatalf("--json: %v %s; want format, rendered and the messages", err, js)
			}
		})
	}
	for _, bad := range []string{"claude", "OpenAI"} {
		_, _, err := cli(t, "", "context", "fmt-conv", "--format="+bad)
		want := `--format "` + bad + `": want one of ` + strings.Join(formats.Names(), ", ")
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--format %s: %v (exit %d); want a usage error saying %q", bad, err, exitCode(err), want)
		}
	}
}
