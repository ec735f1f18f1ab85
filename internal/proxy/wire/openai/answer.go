package openai

import (
	"bytes"
	"time"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// Answer implements wire.Answerer: a chat.completion object, or with stream the
// chat.completion.chunk events (the role, the text, the finish reason, the usage) and
// [DONE].
func (openAIWire) Answer(req *wire.Request, reply schemas.Message, usage wire.Usage, stream bool) ([]byte, error) {
	id := "chatcmpl-compactor-" + wire.RandomID()
	created := time.Now().Unix()
	u := map[string]any{"prompt_tokens": usage.Input, "completion_tokens": usage.Output, "total_tokens": usage.Input + usage.Output}
	text := reply.Content.String()
	if !stream {
		return wire.MarshalNoEscape(map[string]any{"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
			"usage":   u})
	}
	var b bytes.Buffer
	chunk := func(delta map[string]any, finish any, usage any) error {
		c := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		if usage != nil {
			c["choices"], c["usage"] = []any{}, usage
		}
		j, err := wire.MarshalNoEscape(c)
		if err != nil {
			return err
		}
		b.WriteString("data: ")
		b.Write(j)
		b.WriteString("\n\n")
		return nil
	}
	for _, step := range []func() error{
		func() error { return chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil) },
		func() error { return chunk(map[string]any{"content": text}, nil, nil) },
		func() error { return chunk(map[string]any{}, "stop", nil) },
		func() error { return chunk(nil, nil, u) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes(), nil
}
