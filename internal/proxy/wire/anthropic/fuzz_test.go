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
	f.Add(claudeCodeRequest)
	// Mid-conversation system turns (string, blocks, empty with per-turn fields, first).
	f.Add(`{"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"},{"role":"assistant","content":"c"},{"role":"user","content":[{"type":"text","text":"d"}]},{"role":"system","content":[],"output_config":{"effort":"medium"}},{"role":"system","content":[{"type":"text","text":"e","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`)
	f.Add(`{"messages":[{"role":"system","content":"first"},{"role":"user","content":"a"}]}`)
	// Per-turn fields on every role.
	f.Add(`{"messages":[{"role":"user","content":"a","output_config":{"effort":"low"}},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}],"x":1},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":""}],"y":[]},{"role":"system","content":[],"output_config":{}}]}`)
	// Unknown roles and blocks.
	f.Add(`{"messages":[{"role":"user","content":"a"},{"role":"developer","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"name":"n"},{"role":"operator","content":7},{"role":"user","content":[{"type":"future","x":1}]}]}`)
	// Interleaved thinking, server tool and MCP blocks, citations.
	f.Add(`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}},{"type":"web_search_tool_result","tool_use_id":"s1","content":[]},{"type":"thinking","thinking":"t","signature":"s"},{"type":"mcp_tool_use","id":"m1","name":"e","server_name":"x","input":{}},{"type":"mcp_tool_result","tool_use_id":"m1","content":[{"type":"text","text":"r"}]},{"type":"text","text":"a","citations":[{"type":"char_location","cited_text":"a","document_index":0,"start_char_index":0,"end_char_index":1}]},{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"redacted_thinking","data":"d"},{"type":"tool_use","id":"t2","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"1"},{"type":"tool_result","tool_use_id":"t2","content":"2"}]}]}`)
	// Breakpoints with ttls on tools, system, messages and the top level.
	f.Add(`{"cache_control":{"type":"ephemeral","ttl":"1h"},"tools":[{"name":"a","cache_control":{"type":"ephemeral","ttl":"1h"}},{"name":"b","cache_control":{"type":"ephemeral","ttl":"5m"}}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}]},{"role":"system","content":"y"}]}`)
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
	// Thinking with its signature, text with a citation, a compaction block.
	f.Add(streamOf([]sseEvent{
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}`},
		{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"","citations":[]}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"a"}}}`},
		{"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"compaction","content":""}}`},
		{"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"compaction_delta","content":"sum","encrypted_content":"e"}}`},
		{"message_stop", `{"type":"message_stop"}`},
	}))
	f.Add("data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\"}}\n\ndata: {\"type\":\"message_stop\"}\n\n")
	f.Fuzz(func(t *testing.T, stream string) { wiretest.StreamFuzz(t, Anthropic(), stream) })
}
