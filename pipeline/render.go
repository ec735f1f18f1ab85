package pipeline

import (
	"context"

	"github.com/compactor/compactor/schemas/formats"
)

// Render reads a conversation's context like Context (same options) and renders it as
// the request fragment of the API the agent calls: formats.OpenAI, formats.Anthropic,
// formats.Responses or formats.Gemini (see package schemas/formats). The fragment's
// first Request.Prefix bytes (pinned messages + summary) stay byte-identical until the
// next compaction, so the provider's prompt cache hits. An unknown format is an error
// matching formats.ErrUnknownFormat, returned before anything is read.
func (c *Client) Render(ctx context.Context, conv string, f formats.Format, opts ...ContextOption) (formats.Request, error) {
	if _, err := formats.Parse(string(f)); err != nil {
		return formats.Request{}, err
	}
	cx, err := c.Context(ctx, conv, opts...)
	if err != nil {
		return formats.Request{}, err
	}
	return formats.Render(cx, f)
}
