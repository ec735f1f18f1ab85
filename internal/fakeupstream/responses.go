package fakeupstream

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// parseResponses reads a Responses API body: model, stream, input (a string, or an
// array of items) as Messages and instructions as System.
func parseResponses(r *Request) error {
	_ = json.Unmarshal(r.Fields["model"], &r.Model)
	_ = json.Unmarshal(r.Fields["stream"], &r.Stream)
	in := present(r.Fields["input"])
	switch {
	case in == nil:
		return fmt.Errorf("input: missing")
	case in[0] == '"':
		r.Messages = []json.RawMessage{in}
	default:
		if err := json.Unmarshal(in, &r.Messages); err != nil || len(r.Messages) == 0 {
			return fmt.Errorf("input: must be a string or a non-empty array of items")
		}
	}
	r.System = present(r.Fields["instructions"])
	return nil
}

// wantsEncryptedReasoning says the request asked for reasoning items with their
// encrypted_content (include: ["reasoning.encrypted_content"], as Codex does).
func wantsEncryptedReasoning(r *Request) bool {
	var include []string
	_ = json.Unmarshal(r.Fields["include"], &include)
	return slices.Contains(include, "reasoning.encrypted_content")
}

// answerResponses writes the reply as the Responses API does, streamed or not: a
// reasoning item first when the request asked for encrypted reasoning, a message
// item with the text, one function_call item a tool call.
func (s *Server) answerResponses(o *writer, id int, u *Usage) {
	rid := fmt.Sprintf("resp_fake%d", id)
	created := time.Now().Unix()
	var items []map[string]any
	var sigs []string
	if wantsEncryptedReasoning(o.r) {
		sig := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "fakeupstream-reasoning/%d", id))
		sigs = append(sigs, sig)
		items = append(items, map[string]any{"id": fmt.Sprintf("rs_fake%d", id), "type": "reasoning",
			"summary": []any{}, "encrypted_content": sig})
	}
	if o.rep.Text != "" || len(o.rep.ToolCalls) == 0 {
		items = append(items, map[string]any{"id": fmt.Sprintf("msg_fake%d", id), "type": "message", "status": "completed",
			"role": "assistant", "content": []any{outputText(o.rep.Text)}})
	}
	for i, c := range o.rep.ToolCalls {
		cid := c.ID
		if cid == "" {
			cid = fmt.Sprintf("call_fake%d_%d", id, i)
		}
		args := c.Arguments
		if args == "" {
			args = "{}"
		}
		item := map[string]any{"id": fmt.Sprintf("fc_fake%d_%d", id, i), "type": "function_call",
			"status": "completed", "call_id": cid, "name": c.Name, "arguments": args}
		if c.Namespace != "" {
			item["namespace"] = c.Namespace
		}
		items = append(items, item)
	}
	if sigs != nil {
		s.setSignatures(o.r, sigs)
	}
	response := func(status string, output []map[string]any, usage any) map[string]any {
		tools := present(o.r.Fields["tools"])
		if tools == nil {
			tools = json.RawMessage("[]")
		}
		if output == nil {
			output = []map[string]any{}
		}
		return map[string]any{"id": rid, "object": "response", "created_at": created, "status": status,
			"error": nil, "incomplete_details": nil, "instructions": o.r.System, "max_output_tokens": nil,
			"model": o.r.Model, "output": output, "parallel_tool_calls": true, "previous_response_id": nil,
			"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": false, "temperature": 1.0,
			"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto",
			"tools": tools, "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": nil,
			"metadata": map[string]any{}}
	}
	if !o.r.Stream {
		o.writeJSON(response("completed", items, responsesUsage(u)))
		return
	}
	o.startStream()
	seq := 0
	errEvent := func() []sse {
		const msg = "The server had an error processing your request. Sorry about that!"
		failed := response("failed", nil, nil)
		failed["error"] = map[string]any{"code": "server_error", "message": msg}
		return []sse{
			{"error", map[string]any{"type": "error", "code": "server_error", "message": msg, "param": nil, "sequence_number": seq}},
			{"response.failed", map[string]any{"type": "response.failed", "response": failed, "sequence_number": seq + 1}},
		}
	}
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		o.event(typ, fields, errEvent)
	}
	ev("response.created", map[string]any{"response": response("in_progress", nil, nil)})
	ev("response.in_progress", map[string]any{"response": response("in_progress", nil, nil)})
	for i, it := range items {
		iid := it["id"]
		switch it["type"] {
		case "reasoning":
			ev("response.output_item.added", map[string]any{"output_index": i, "item": it})
		case "message":
			ev("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"id": iid,
				"type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
			ev("response.content_part.added", map[string]any{"item_id": iid, "output_index": i, "content_index": 0,
				"part": outputText("")})
			for _, piece := range pieces(o.rep.Text) {
				ev("response.output_text.delta", map[string]any{"item_id": iid, "output_index": i, "content_index": 0,
					"delta": piece, "logprobs": []any{}})
			}
			ev("response.output_text.done", map[string]any{"item_id": iid, "output_index": i, "content_index": 0,
				"text": o.rep.Text, "logprobs": []any{}})
			ev("response.content_part.done", map[string]any{"item_id": iid, "output_index": i, "content_index": 0,
				"part": outputText(o.rep.Text)})
		case "function_call":
			added := map[string]any{"id": iid, "type": "function_call", "status": "in_progress", "call_id": it["call_id"], "name": it["name"], "arguments": ""}
			if ns, ok := it["namespace"]; ok {
				added["namespace"] = ns
			}
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			for _, piece := range pieces(it["arguments"].(string)) {
				ev("response.function_call_arguments.delta", map[string]any{"item_id": iid, "output_index": i, "delta": piece})
			}
			ev("response.function_call_arguments.done", map[string]any{"item_id": iid, "output_index": i,
				"arguments": it["arguments"]})
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	ev("response.completed", map[string]any{"response": response("completed", items, responsesUsage(u))})
}

// outputText is an output_text content part.
func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// responsesUsage is u in the Responses API's form: input_tokens counts the cached
// ones too.
func responsesUsage(u *Usage) map[string]any {
	return map[string]any{"input_tokens": u.Input, "input_tokens_details": map[string]int{"cached_tokens": u.CacheRead},
		"output_tokens": u.Output, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
		"total_tokens": u.Input + u.Output}
}
