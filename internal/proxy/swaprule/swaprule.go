// Package swaprule is the proxy's cache-aware rule for swapping a newer compaction into
// what a conversation is sent (docs/proxy.md, "Cache-aware"), as pure functions of what
// a turn knows: the proxy applies it to live traffic, and compactor eval to its replays,
// so that what eval reports of cache writes is what the proxy does.
//
// A conversation is sent with the value it was last sent with while the provider likely
// caches that prefix (its last turn within the cache's TTL: Warm), and with the newest
// value otherwise, or as soon as the context read with the earlier one outgrows the
// stale bound (Reread). After the turn, the value it was sent with is remembered (Keep).
package swaprule

import (
	"time"

	"github.com/compactor/compactor/schemas"
)

// Warm reports whether the provider likely still caches what a conversation was sent
// with at its last turn, since elapsed: within ttl (a ttl of 0 or less caches nothing).
func Warm(elapsed, ttl time.Duration) bool { return ttl > 0 && elapsed <= ttl }

// Reread reports whether a context of tokens (with the client's new messages), read
// with earlier and found of generation gen, must be read again with the newest value:
// it is over stale (the compaction threshold, at most the hard limit) and really was
// read with earlier (not with a newer value the read fell back to).
func Reread(tokens, stale int, earlier *schemas.Result, gen uint64) bool {
	return tokens > stale && earlier != nil && gen == earlier.Generation
}

// Keep is the value to remember as the one a conversation was sent with, its context
// being of generation gen: earlier when it is earlier's, else live (the live value the
// read saw) when it is live's, else none (a newer value landed meanwhile: the next turn
// takes the newest). Generation 0 remembers none.
func Keep(gen uint64, earlier, live *schemas.Result) *schemas.Result {
	switch {
	case gen == 0:
		return nil
	case earlier != nil && earlier.Generation == gen:
		return earlier
	case live != nil && live.Generation == gen:
		return live
	}
	return nil
}
