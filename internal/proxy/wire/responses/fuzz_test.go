package responses

import (
	"runtime"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

func FuzzParseResponses(f *testing.F) {
	f.Add(codexRequest)
	f.Add(`{"model":"m","input":"hi","instructions":"be brief"}`)
	f.Add(`{"input":[{"role":"user","content":"a"},{"type":"item_reference","id":"msg_9"},{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x","annotations":[]}]},{"type":"message","role":"assistant","content":"y"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"t","x":1},{"type":"input_image","image_url":"u","detail":"low"}]}]}`)
	f.Add(`{"input":[{"type":"local_shell_call","call_id":"c","status":"completed","action":{"type":"exec","command":["ls"]}},{"type":"local_shell_call_output","id":"c","output":"ok"},{"type":"custom_tool_call","call_id":"d","name":"p","input":"x"},{"type":"custom_tool_call_output","call_id":"d","output":{"o":1}}]}`)
	f.Add(`{"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"d"}]},{"type":"message","role":"assistant","content":""},{"type":"function_call","call_id":"c","name":"f","arguments":""},{"type":"function_call_output","call_id":"c","output":"r"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := Responses().Parse([]byte(body))
		if err != nil {
			return
		}
		out := wiretest.CheckBuild(t, Responses(), req, "input", "instructions")
		if out == nil {
			return
		}
		// Built from its own messages with the client's items: the body as sent.
		if string(out) != body {
			t.Fatalf("built %s\nsent %s", out, body)
		}
		// Built from the messages alone: a request that parses to the same messages.
		out, err = Responses().Build(&wire.Request{Body: req.Body}, wiretest.ContextOf(req.Messages))
		if err != nil {
			t.Fatalf("Build without the client's items: %v", err)
		}
		again, err := Responses().Parse(out)
		if err != nil {
			t.Fatalf("the built body does not parse: %v\n%s", err, out)
		}
		if len(again.Messages) != len(req.Messages) {
			t.Fatalf("%d messages, then %d\n%s", len(req.Messages), len(again.Messages), out)
		}
		for i := range req.Messages {
			if a, b := encode(req.Messages[i]), encode(again.Messages[i]); a != b {
				t.Fatalf("message %d: %s, then %s", i, a, b)
			}
		}
	})
}

func FuzzStreamResponses(f *testing.F) {
	f.Add("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"content_index\":0,\"delta\":\"hi\"}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"\"}}\n\n" +
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"output_index\":1,\"delta\":\"{}\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"object\":\"response\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
	f.Add("event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs\",\"summary\":[],\"encrypted_content\":\"e\"}}\n\n" +
		"data: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"x\"}]}}\n\n")
	f.Add("event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"x\"}]}]}}\n\n")
	f.Add("event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"message\":\"x\"}}}\n\n")
	f.Add(string(Responses().StreamError("x")))
	f.Fuzz(func(t *testing.T, stream string) { wiretest.StreamFuzz(t, Responses(), stream) })
}

// Deltas are appended in linear space (see the openai wire's test of the same name):
// 4x the deltas must not allocate 16x.
func TestDeltasAccumulateInLinearSpace(t *testing.T) {
	for _, c := range []struct{ added, delta string }{
		{`{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","call_id":"c1","name":"write_file","arguments":""}}`,
			`{"type":"response.function_call_arguments.delta","output_index":0,"delta":"ab"}`},
		{`{"type":"response.output_item.added","output_index":0,"item":{"type":"message","role":"assistant","content":[]}}`,
			`{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"ab"}`},
	} {
		run := func(n int) uint64 {
			s := Responses().NewStream()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if err := s.Event("", []byte(c.added)); err != nil {
				t.Fatal(err)
			}
			ev := []byte(c.delta)
			for i := 0; i < n; i++ {
				if err := s.Event("", ev); err != nil {
					t.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc
		}
		a, b := run(20_000), run(80_000)
		if float64(b) > 8*float64(a) {
			t.Fatalf("4x the deltas allocated %.1fx the bytes (%d and %d): quadratic", float64(b)/float64(a), a, b)
		}
	}
}
