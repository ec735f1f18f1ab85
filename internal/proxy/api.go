package proxy

import (
	"context"
	"time"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// The wire types, for the core and the server (package wire defines them).
type (
	Wire    = wire.Wire
	Request = wire.Request
	Usage   = wire.Usage
	Stream  = wire.Stream
)

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
	// Compaction says the request is the agent's request to summarize its own
	// conversation: a history without a copy of the newest message continues the
	// conversation all the same (see resolveTurn).
	Compaction bool
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
	// Stored is the conversation's context as read for the turn, through its newest
	// message (nil for a branch not made yet).
	Stored *assemble.Context
	// Flattened says the turn is an agent's compaction request whose messages are not
	// the conversation's: its history flattened into its prompt.
	Flattened bool

	// state of the store's own, for Finish
	state any
}
