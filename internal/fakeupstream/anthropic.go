package fakeupstream

import (
	"encoding/json"
	"fmt"
)

// answerAnthropic writes the reply as Anthropic Messages does, streamed or not.
func (s *Server) answerAnthropic(o *writer, id int, u *Usage) {
	mid := fmt.Sprintf("msg_fake%d", id)
	blocks := anthropicBlocks(o.rep, id)
	stop := "end_turn"
	if len(o.rep.ToolCalls) > 0 {
		stop = "tool_use"
	}
	if !o.r.Stream {
		o.writeJSON(map[string]any{"id": mid, "type": "message", "role": "assistant", "model": o.r.Model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": anthropicUsage(u, u.Output)})
		return
	}
	o.startStream()
	errEvent := func() []sse {
		return one("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}})
	}
	o.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": mid, "type": "message", "role": "assistant", "model": o.r.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(u, 1)}}, errEvent)
	o.event("ping", map[string]any{"type": "ping"}, errEvent)
	for i, b := range blocks {
		streamBlock(o, i, b, errEvent)
	}
	o.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": u.Output}}, errEvent)
	o.event("message_stop", map[string]any{"type": "message_stop"}, errEvent)
}

// streamBlock writes one content block as its start, deltas and stop events.
func streamBlock(o *writer, i int, b map[string]any, errEvent func() []sse) {
	if b["type"] == "text" {
		o.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "text", "text": ""}}, errEvent)
		for _, piece := range pieces(b["text"].(string)) {
			o.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": piece}}, errEvent)
		}
	} else {
		o.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
			"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}}, errEvent)
		input, _ := json.Marshal(b["input"])
		for _, piece := range pieces(string(input)) {
			o.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}}, errEvent)
		}
	}
	o.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i}, errEvent)
}

// anthropicBlocks is the reply's content blocks: its text, then one tool_use block a
// call (input: the arguments object).
func anthropicBlocks(rep Reply, id int) []map[string]any {
	var out []map[string]any
	if rep.Text != "" {
		out = append(out, map[string]any{"type": "text", "text": rep.Text})
	}
	for i, c := range rep.ToolCalls {
		cid := c.ID
		if cid == "" {
			cid = fmt.Sprintf("toolu_fake%d_%d", id, i)
		}
		var input any = map[string]any{}
		if c.Arguments != "" {
			_ = json.Unmarshal([]byte(c.Arguments), &input)
		}
		out = append(out, map[string]any{"type": "tool_use", "id": cid, "name": c.Name, "input": input})
	}
	return out
}

// anthropicUsage is u in Anthropic's form: input_tokens is the uncached part.
func anthropicUsage(u *Usage, output int) map[string]any {
	return map[string]any{"input_tokens": u.Input - u.CacheRead - u.CacheWrite, "output_tokens": output,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead}
}
