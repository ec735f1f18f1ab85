package proxy

import (
	"context"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// Wire is one of the two APIs whose conversation the proxy rewrites: OpenAI Chat
// Completions (POST /v1/chat/completions) and Anthropic Messages (POST /v1/messages).
// It is pure: no NATS, no HTTP client.
type Wire interface {
	// Name is "openai" or "anthropic".
	Name() string
	// Parse reads a request body. It refuses (an error wrapping ErrBadRequest, whose
	// text the client is shown) a body that is not the API's request.
	Parse(body []byte) (*Request, error)
	// Build returns the body to send upstream: req.Body byte for byte except the fields
	// that carry the conversation, which render cx (for anthropic: "system" and
	// "messages"; for openai: "messages"). Every other field (model, tools,
	// tool_choice, temperature, max_tokens, stream, metadata...) is left as sent.
	Build(req *Request, cx *assemble.Context) ([]byte, error)
	// Reply reads a non-streamed 2xx response body: the assistant message and the
	// usage the upstream reported (nil when none).
	Reply(body []byte) (schemas.Message, *Usage, error)
	// NewStream returns an accumulator for a streamed (text/event-stream) response.
	NewStream() Stream
	// StreamError is the bytes of the server-sent event that tells the client its
	// stream failed (the API's own error event), for a stream that broke before its end.
	StreamError(message string) []byte
}

// Request is a parsed request body.
type Request struct {
	// Body is the body as the client sent it.
	Body []byte
	// Messages is the conversation in Compactor's form (OpenAI chat messages), system
	// messages included, in order: for anthropic the "system" field is the first
	// message (role system).
	Messages []schemas.Message
	// Stream says the client asked for a streamed response.
	Stream bool
	// Model is the model field.
	Model string
	// MaxOutput is the output token limit the request asks for (max_tokens,
	// max_completion_tokens), 0 when none.
	MaxOutput int
}

// Usage is what the upstream reported for one call, in both APIs' terms.
type Usage struct {
	// Input is every input token, cached ones included (OpenAI prompt_tokens;
	// Anthropic input_tokens + cache_read_input_tokens + cache_creation_input_tokens).
	Input int
	// Output is the completion tokens.
	Output int
	// CacheRead is the input tokens served from the provider's prompt cache.
	CacheRead int
	// CacheWrite is the input tokens written to the cache (Anthropic only).
	CacheWrite int
}

// Stream puts a streamed reply back together from its server-sent events.
type Stream interface {
	// Event takes one event as the upstream sent it: its event name ("" when the
	// event has none) and its data. An error means the stream is not the API's.
	Event(name string, data []byte) error
	// Done says the stream reached the API's end ([DONE] or message_stop).
	Done() bool
	// Failed returns the error event the upstream itself sent, if any.
	Failed() bool
	// Result is the assistant message and usage put together; valid once Done.
	Result() (schemas.Message, *Usage, error)
}

// Conversations is the proxy's view of the stored conversations: it keeps each
// client message stored once, chooses what the model is sent, and stores the reply.
type Conversations interface {
	// Prepare stores what the client's history adds to the conversation conv and
	// returns what the model is sent. msgs is the client's whole history.
	Prepare(ctx context.Context, conv string, msgs []schemas.Message, opts TurnOptions) (*Turn, error)
	// Finish stores the upstream's reply to t. It is called once per turn whose
	// upstream answered 2xx with a whole reply; never for a broken stream.
	Finish(ctx context.Context, t *Turn, reply schemas.Message, usage *Usage) error
}

// TurnOptions bound one turn.
type TurnOptions struct {
	// Owner is the digest of the credential the request came with ("" when none):
	// a conversation written under one owner is refused to another (ErrNotOwner).
	// AnyOwner checks no owner and writes none.
	Owner string
	// MaxOutput is the output the request reserves in the window.
	MaxOutput int
	// Reserve is the tokens the request takes besides its messages (tool definitions,
	// a response format): the window left for the messages is smaller by it.
	Reserve int
	// Wait bounds the wait for a pending compaction when the context is over the window.
	Wait time.Duration
	// CacheTTL is how long the provider's prompt cache is taken to live: a newer
	// compaction is swapped in only past it, or when the window needs it.
	CacheTTL time.Duration
}

// Turn is one request's place in its conversation.
type Turn struct {
	// Conv is the conversation the turn was stored in and the reply goes to: the
	// client's, or a branch of it after an edit (Branch says why).
	Conv string
	// Branch is "" on the conversation itself; otherwise "edit", "regenerate" or
	// "truncate".
	Branch string
	// Context is what the model is sent: the compacted context plus the client's new
	// messages, never a message the client no longer has.
	Context *assemble.Context
	// ClientTokens is the estimate of the client's history as sent.
	ClientTokens int
	// Published is how many client messages this turn stored.
	Published int
	// Cut says the context was cut at read time to fit the window.
	Cut bool
	// Waited is how long the turn waited for a pending compaction.
	Waited time.Duration

	// state of the store's own, for Finish
	state any
}
