// Package proxy is the proxy role: an HTTP server an agent reaches instead of its model
// by changing one base URL. It speaks OpenAI Chat Completions (POST
// /v1/chat/completions) and Anthropic Messages (POST /v1/messages), stores each
// message of the conversation once in CHAT, and sends the upstream model the compacted
// context (pinned + summary + evidence + tail) in place of the whole history. Every
// other path passes through unchanged. docs/proxy.md is the user's guide.
package proxy

import (
	"errors"

	"github.com/compactor/compactor/internal/proxy/wire"
)

var (
	// ErrBadRequest wraps a request the proxy refuses with 400: its text is shown to
	// the client.
	ErrBadRequest = wire.ErrBadRequest
	// ErrNotOwner means the conversation was written with another credential: 403.
	ErrNotOwner = errors.New("the conversation belongs to another credential")
)
