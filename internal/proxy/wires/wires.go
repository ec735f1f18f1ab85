// Package wires names every API the proxy rewrites, with its wire: what a proxy is
// built with.
package wires

import (
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/anthropic"
	"github.com/compactor/compactor/internal/proxy/wire/gemini"
	"github.com/compactor/compactor/internal/proxy/wire/openai"
	"github.com/compactor/compactor/internal/proxy/wire/responses"
)

// All is every wire, by its Name (the proxy's API names).
func All() map[string]wire.Wire {
	out := map[string]wire.Wire{}
	for _, w := range []wire.Wire{openai.OpenAI(), responses.Responses(), anthropic.Anthropic(), gemini.Gemini()} {
		out[w.Name()] = w
	}
	return out
}
