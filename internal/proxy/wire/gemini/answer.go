package gemini

import (
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// Answer implements wire.Answerer: a GenerateContentResponse with one candidate of one
// text part, or with stream that response as the one event of a stream (alt=sse).
func (geminiWire) Answer(req *wire.Request, reply schemas.Message, usage wire.Usage, stream bool) ([]byte, error) {
	body, err := wire.MarshalNoEscape(map[string]any{
		"candidates": []any{map[string]any{"index": 0, "finishReason": "STOP",
			"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": reply.Content.String()}}}}},
		"usageMetadata": map[string]any{"promptTokenCount": usage.Input, "candidatesTokenCount": usage.Output,
			"totalTokenCount": usage.Input + usage.Output},
		"modelVersion": req.Model,
	})
	if err != nil || !stream {
		return body, err
	}
	return append(append([]byte("data: "), body...), "\r\n\r\n"...), nil
}
