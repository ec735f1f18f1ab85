package proxy

import (
	"bytes"
	"slices"
	"sync"

	"github.com/compactor/compactor/schemas"
)

// The client resends its whole history every turn, and the chain of its digests is
// what places it: hashing it all again is, after parsing the request, the larger part
// of a turn's own work. The chain memo keeps each conversation's last history as the
// proxy saw it (the messages and their links); a new turn's messages that are the same
// as the memo's, field for field of what Canonical reads, have the same links, and
// only the rest is hashed. The memo is an optimisation only: a message that differs in
// any byte Canonical reads is hashed, so the chain is always Chain(msgs).

// maxChainBytes bounds the memory the chain memo of one process keeps (message bytes):
// past it, conversations are dropped from it.
const maxChainBytes = 256 << 20

type chainMemo struct {
	mu    sync.Mutex
	convs map[string]*memoHistory
	bytes int
	max   int
}

// memoHistory is a client history and its chain.
type memoHistory struct {
	msgs  []schemas.Message
	chain []Digest
	bytes int
}

func newChainMemo(maxBytes int) *chainMemo {
	return &chainMemo{convs: map[string]*memoHistory{}, max: maxBytes}
}

// chain is Chain(msgs), reusing the links of conv's last history where its messages
// are the same.
func (c *chainMemo) chain(conv string, msgs []schemas.Message) []Digest {
	c.mu.Lock()
	h := c.convs[conv]
	c.mu.Unlock()
	out := make([]Digest, len(msgs))
	var prev Digest
	i := 0
	if h != nil {
		for i < len(msgs) && i < len(h.msgs) && sameCanonical(&msgs[i], &h.msgs[i]) {
			out[i] = h.chain[i]
			i++
		}
		if i > 0 {
			prev = out[i-1]
		}
	}
	for ; i < len(msgs); i++ {
		prev = Link(prev, &msgs[i])
		out[i] = prev
	}
	return out
}

// remember keeps msgs (a copy of the slice: the messages' contents are shared, and
// never changed once parsed) and their chain as conv's last history.
func (c *chainMemo) remember(conv string, msgs []schemas.Message, chain []Digest) {
	if len(chain) != len(msgs) {
		return
	}
	h := &memoHistory{msgs: slices.Clone(msgs), chain: chain}
	for i := range msgs {
		h.bytes += messageBytes(&msgs[i])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.convs[conv]; ok {
		c.bytes -= old.bytes
		delete(c.convs, conv)
	}
	if h.bytes > c.max {
		return
	}
	for k, old := range c.convs {
		if c.bytes+h.bytes <= c.max && len(c.convs) < maxRemembered {
			break
		}
		c.bytes -= old.bytes
		delete(c.convs, k)
	}
	c.convs[conv] = h
	c.bytes += h.bytes
}

// size is how many conversations and bytes the memo holds.
func (c *chainMemo) size() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.convs), c.bytes
}

// messageBytes is the estimated memory of m's fields Canonical reads.
func messageBytes(m *schemas.Message) int {
	n := 96 + len(m.Content.Raw()) + len(m.Name) + len(m.ToolCallID)
	for _, tc := range m.ToolCalls {
		n += 48 + len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}

// sameCanonical says a and b are the same in every field Canonical reads, so their
// canonical forms (and links after the same digest) are the same.
func sameCanonical(a, b *schemas.Message) bool {
	if a.Role != b.Role || a.Name != b.Name || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) ||
		!bytes.Equal(a.Content.Raw(), b.Content.Raw()) {
		return false
	}
	for i := range a.ToolCalls {
		x, y := &a.ToolCalls[i], &b.ToolCalls[i]
		if x.ID != y.ID || x.Function.Name != y.Function.Name || x.Function.Arguments != y.Function.Arguments {
			return false
		}
	}
	return true
}
