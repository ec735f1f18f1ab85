package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// checkBuild builds req with its own messages and checks the body is one valid JSON
// object whose other fields are the client's, byte for byte.
func checkBuild(t *testing.T, w Wire, req *Request, conv ...string) []byte {
	t.Helper()
	out, err := w.Build(req, contextOf(req.Messages))
	if err != nil {
		return nil // a context the renderer refuses (unpaired tool calls...)
	}
	if !json.Valid(out) {
		t.Fatalf("Build gave invalid JSON: %q", out)
	}
	before, err := fieldMap(req.Body)
	if err != nil {
		t.Fatalf("a parsed body has no fields: %v", err)
	}
	after, err := fieldMap(out)
	if err != nil {
		t.Fatalf("built body: %v in %q", err, out)
	}
	skip := map[string]bool{}
	for _, c := range conv {
		skip[c] = true
	}
	for k, v := range before {
		if !skip[k] && string(after[k]) != string(v) {
			t.Fatalf("field %q changed: %s -> %s", k, v, after[k])
		}
	}
	return out
}

func FuzzParseOpenAI(f *testing.F) {
	f.Add(openAIRequest)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"messages":[{"role":"developer","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{"}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := OpenAI().Parse([]byte(body))
		if err != nil {
			return
		}
		out := checkBuild(t, OpenAI(), req, "messages")
		if out == nil {
			return
		}
		// What Build sends parses back to the same messages.
		again, err := OpenAI().Parse(out)
		if err != nil {
			t.Fatalf("the built body does not parse: %v\n%s", err, out)
		}
		if len(again.Messages) != len(req.Messages) {
			t.Fatalf("%d messages, then %d", len(req.Messages), len(again.Messages))
		}
		for i := range req.Messages {
			stripped := req.Messages[i].StripMetadata()
			a, _ := stripped.Encode()
			b, _ := again.Messages[i].Encode()
			if string(a) != string(b) {
				t.Fatalf("message %d: %s, then %s", i, a, b)
			}
		}
	})
}

func FuzzParseAnthropic(f *testing.F) {
	f.Add(anthropicRequest)
	f.Add(`{"model":"m","max_tokens":1,"system":"s","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"tools":[{"name":"t","cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"document","cache_control":{"type":"ephemeral"}},{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`)
	f.Add(`{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"a","name":"f","input":{"b":1,"a":[2]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","is_error":true,"content":"x"},{"type":"tool_result","tool_use_id":"a","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := Anthropic().Parse([]byte(body))
		if err != nil {
			return
		}
		out := checkBuild(t, Anthropic(), req, "messages", "system")
		if out == nil {
			return
		}
		if strings.Contains(string(out), "compactor-mark") {
			t.Fatalf("a marker left in %s", out)
		}
		// What Build sends is a request the wire reads again (but for a context of
		// empty turns only, which renders no message at all: the API's refusal is
		// then the client's answer).
		f, _ := fieldMap(out)
		if _, err := Anthropic().Parse(out); err != nil && string(f["messages"]) != "[]" {
			t.Fatalf("the built body does not parse: %v\n%s", err, out)
		}
	})
}

// streamFuzz feeds a fuzzed stream, split into events, to a wire's accumulator: it
// must never panic, and a result, when it gives one, is a valid message.
func streamFuzz(t *testing.T, w Wire, stream string) {
	s := w.NewStream()
	sp := NewSSESplitter(1<<16, s.Event)
	if _, err := sp.Write([]byte(stream)); err != nil {
		return
	}
	m, _, err := s.Result()
	if err != nil {
		return
	}
	if !s.Done() || s.Failed() {
		t.Fatalf("a result with done %v failed %v", s.Done(), s.Failed())
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("the result is not a valid message: %v", err)
	}
}

func FuzzStreamOpenAI(f *testing.F) {
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\",\"tool_calls\":[{\"index\":2,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"error\":{\"message\":\"x\"}}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { streamFuzz(t, OpenAI(), stream) })
}

func FuzzStreamAnthropic(f *testing.F) {
	var b strings.Builder
	for _, e := range anthropicStreamEvents {
		b.WriteString("event: " + e.name + "\ndata: " + e.data + "\n\n")
	}
	f.Add(b.String())
	f.Add("event: error\ndata: {\"type\":\"error\"}\n\n")
	f.Add("data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\"}}\n\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { streamFuzz(t, Anthropic(), stream) })
}
