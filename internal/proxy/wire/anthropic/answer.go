package anthropic

import (
	"bytes"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// Answer implements wire.Answerer: a message object, or with stream the Messages
// events (message_start, one text block's start, delta and stop, message_delta with
// the stop reason and usage, message_stop).
func (anthropicWire) Answer(req *wire.Request, reply schemas.Message, usage wire.Usage, stream bool) ([]byte, error) {
	id, err := nonce()
	if err != nil {
		return nil, err
	}
	id = "msg_compactor_" + id
	text := reply.Content.String()
	u := map[string]any{"input_tokens": usage.Input, "output_tokens": usage.Output}
	if !stream {
		return wire.MarshalNoEscape(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{map[string]any{"type": "text", "text": text}}, "stop_reason": "end_turn", "stop_sequence": nil, "usage": u})
	}
	var b bytes.Buffer
	for _, e := range []struct {
		name string
		data map[string]any
	}{
		{"message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant",
			"model": req.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": usage.Input, "output_tokens": 0}}}},
		{"content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
		{"content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text}}},
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}},
		{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": usage.Output}}},
		{"message_stop", map[string]any{"type": "message_stop"}},
	} {
		j, err := wire.MarshalNoEscape(e.data)
		if err != nil {
			return nil, err
		}
		b.WriteString("event: " + e.name + "\ndata: ")
		b.Write(j)
		b.WriteString("\n\n")
	}
	return b.Bytes(), nil
}
