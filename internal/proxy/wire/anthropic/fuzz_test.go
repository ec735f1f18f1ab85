package anthropic

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

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
		out := wiretest.CheckBuild(t, Anthropic(), req, "messages", "system")
		if out == nil {
			return
		}
		if strings.Contains(string(out), "compactor-mark") {
			t.Fatalf("a marker left in %s", out)
		}
		// What Build sends is a request the wire reads again (but for a context of
		// empty turns only, which renders no message at all: the API's refusal is
		// then the client's answer).
		f, _ := wire.FieldMap(out)
		if _, err := Anthropic().Parse(out); err != nil && string(f["messages"]) != "[]" {
			t.Fatalf("the built body does not parse: %v\n%s", err, out)
		}
	})
}

func FuzzStreamAnthropic(f *testing.F) {
	var b strings.Builder
	b.WriteString(streamOf(anthropicStreamEvents))
	f.Add(b.String())
	f.Add("event: error\ndata: {\"type\":\"error\"}\n\n")
	f.Add("data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\"}}\n\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { wiretest.StreamFuzz(t, Anthropic(), stream) })
}
