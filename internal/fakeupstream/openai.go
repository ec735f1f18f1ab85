package fakeupstream

import (
	"encoding/json"
	"fmt"
	"time"
)

// answerOpenAI writes the reply as OpenAI Chat Completions does, streamed or not.
func (s *Server) answerOpenAI(o *writer, id int, u *Usage) {
	cid := fmt.Sprintf("chatcmpl-fake%d", id)
	calls := openAICalls(o.rep.ToolCalls, id)
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if !o.r.Stream {
		msg := map[string]any{"role": "assistant", "content": nilIfEmpty(o.rep.Text), "refusal": nil}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		o.writeJSON(map[string]any{
			"id": cid, "object": "chat.completion", "created": time.Now().Unix(), "model": o.r.Model,
			"system_fingerprint": "fp_fake",
			"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":              openAIUsage(u),
		})
		return
	}
	o.startStream()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": cid, "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": o.r.Model, "system_fingerprint": "fp_fake",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	errEvent := func() []sse {
		return one("", map[string]any{"error": map[string]any{"message": "the server had an error while processing your request",
			"type": "server_error", "param": nil, "code": nil}})
	}
	o.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil), errEvent)
	for _, piece := range pieces(o.rep.Text) {
		o.event("", chunk(map[string]any{"content": piece}, nil), errEvent)
	}
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		o.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""}}}}, nil), errEvent)
		for _, piece := range pieces(fn["arguments"].(string)) {
			o.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": piece}}}}, nil), errEvent)
		}
	}
	o.event("", chunk(map[string]any{}, finish), errEvent)
	if includeUsage(o.r) {
		o.event("", map[string]any{"id": cid, "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": o.r.Model, "system_fingerprint": "fp_fake", "choices": []any{}, "usage": openAIUsage(u)}, errEvent)
	}
	o.event("", "[DONE]", errEvent)
}

// openAICalls is the reply's tool calls in OpenAI's form, ids made up where missing.
func openAICalls(calls []ToolCall, id int) []map[string]any {
	var out []map[string]any
	for i, c := range calls {
		cid := c.ID
		if cid == "" {
			cid = fmt.Sprintf("call_fake%d_%d", id, i)
		}
		out = append(out, map[string]any{"id": cid, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
	}
	return out
}

// openAIUsage is u in OpenAI's form.
func openAIUsage(u *Usage) map[string]any {
	return map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
		"prompt_tokens_details":     map[string]int{"cached_tokens": u.CacheRead, "audio_tokens": 0},
		"completion_tokens_details": map[string]int{"reasoning_tokens": 0, "audio_tokens": 0}}
}

// includeUsage says the request asked for the usage chunk (stream_options.include_usage).
func includeUsage(r *Request) bool {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(r.Fields["stream_options"], &so)
	return so.IncludeUsage
}

// pieces cuts text into the deltas a stream sends it in (a few runes each).
func pieces(text string) []string {
	var out []string
	r := []rune(text)
	for len(r) > 0 {
		n := min(len(r), 7)
		out = append(out, string(r[:n]))
		r = r[n:]
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
