package responses

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// Answer implements wire.Answerer: a response object holding one assistant message
// item, or with stream the events of one (response.created, the item added, its text
// delta and done, the item done, response.completed with the whole response).
func (responsesWire) Answer(req *wire.Request, reply schemas.Message, usage wire.Usage, stream bool) ([]byte, error) {
	id, msgID := "resp_compactor_"+wire.RandomID(), "msg_compactor_"+wire.RandomID()
	created := time.Now().Unix()
	text := reply.Content.String()
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	item := map[string]any{"type": "message", "id": msgID, "status": "completed", "role": "assistant", "content": []any{part}}
	response := func(status string, output []any, u any) map[string]any {
		r := map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": req.Model, "output": output}
		if u != nil {
			r["usage"] = u
		}
		return r
	}
	u := map[string]any{"input_tokens": usage.Input, "output_tokens": usage.Output, "total_tokens": usage.Input + usage.Output,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	if !stream {
		return wire.MarshalNoEscape(response("completed", []any{item}, u))
	}
	empty := map[string]any{"type": "message", "id": msgID, "status": "in_progress", "role": "assistant", "content": []any{}}
	events := []map[string]any{
		{"type": "response.created", "response": response("in_progress", []any{}, nil)},
		{"type": "response.output_item.added", "output_index": 0, "item": empty},
		{"type": "response.content_part.added", "item_id": msgID, "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}},
		{"type": "response.output_text.delta", "item_id": msgID, "output_index": 0, "content_index": 0, "delta": text},
		{"type": "response.output_text.done", "item_id": msgID, "output_index": 0, "content_index": 0, "text": text},
		{"type": "response.content_part.done", "item_id": msgID, "output_index": 0, "content_index": 0, "part": part},
		{"type": "response.output_item.done", "output_index": 0, "item": item},
		{"type": "response.completed", "response": response("completed", []any{item}, u)},
	}
	var b bytes.Buffer
	for i, e := range events {
		e["sequence_number"] = i
		j, err := wire.MarshalNoEscape(e)
		if err != nil {
			return nil, err
		}
		b.WriteString("event: " + e["type"].(string) + "\ndata: ")
		b.Write(j)
		b.WriteString("\n\n")
	}
	return b.Bytes(), nil
}

// AnswerCompact implements wire.CompactAnswerer: the response.compaction object of
// POST /v1/responses/compact, whose output (the history the client goes on with) is one
// user message holding the summary, readable by any model and any gateway: never an
// opaque compaction item.
func (responsesWire) AnswerCompact(_ *wire.Request, summary string, usage wire.Usage) ([]byte, error) {
	return wire.MarshalNoEscape(map[string]any{"id": "cmp_compactor_" + wire.RandomID(), "object": "response.compaction",
		"created_at": time.Now().Unix(),
		"output": []any{map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": summary}}}},
		"usage": map[string]any{"input_tokens": usage.Input, "output_tokens": usage.Output, "total_tokens": usage.Input + usage.Output,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}})
}

// CompactUsage implements wire.CompactAnswerer: the usage of a response.compaction
// object (the provider's answer to POST /v1/responses/compact).
func (responsesWire) CompactUsage(body []byte) *wire.Usage {
	var r response
	if json.Unmarshal(body, &r) != nil || r.Object != "response.compaction" {
		return nil
	}
	return r.Usage.usage()
}
