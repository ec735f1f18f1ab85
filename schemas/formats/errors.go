package formats

import "errors"

var (
	// ErrUnknownFormat is returned for a format name that is not one of [Names].
	ErrUnknownFormat = errors.New("unknown format")
	// ErrUnpaired means the context breaks invariant 1 (a tool call without all its
	// results, or a result without its call): no provider accepts it.
	ErrUnpaired = errors.New("tool calls and results do not pair up")
	// ErrInvalidContext means the context is not one assemble could have built (Seqs
	// not as long as Messages).
	ErrInvalidContext = errors.New("invalid context")
)
