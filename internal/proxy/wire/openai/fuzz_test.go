package openai

import (
	"runtime"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

func FuzzParseOpenAI(f *testing.F) {
	f.Add(openAIRequest)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"messages":[{"role":"developer","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{"}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := OpenAI().Parse([]byte(body))
		if err != nil {
			return
		}
		out := wiretest.CheckBuild(t, OpenAI(), req, "messages")
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

func FuzzStreamOpenAI(f *testing.F) {
	f.Add("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\",\"tool_calls\":[{\"index\":2,\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"error\":{\"message\":\"x\"}}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { wiretest.StreamFuzz(t, OpenAI(), stream) })
}

// OpenAI streams a tool call's arguments in deltas of a few characters: the
// accumulator appends them in linear time (it used to copy all the arguments so far for
// each delta: quadratic, minutes of CPU for a large write_file call). Measured by the
// bytes allocated, not the time: 4x the deltas must not allocate 16x.
func TestToolArgumentsAccumulateInLinearSpace(t *testing.T) {
	run := func(n int) uint64 {
		s := OpenAI().NewStream()
		first := []byte(`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"write_file","arguments":""}}]}}]}`)
		ev := []byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ab"}}]}}]}`)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := s.Event("", first); err != nil {
			t.Fatal(err)
		}
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
