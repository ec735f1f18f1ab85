package proxy

import (
	"bytes"
	"slices"
	"sync"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// The client resends its whole history every turn, and the chain of its digests is
// what places it: hashing it all again (and estimating its tokens) is, after parsing the
// request, the larger part of a turn's own work. The chain memo keeps each
// conversation's last history as the proxy saw it (the messages, their links and token
// estimates); a new turn's messages that are the same as the memo's, field for field of
// what Canonical (and the estimate) reads, have the same links (and estimates), and only
// the rest is hashed. The memo is an optimisation only: a message that differs in any
// byte Canonical reads is hashed, so the chain is always Chain(msgs), and the estimates
// always tokens.Message's.

// maxChainBytes bounds the memory the chain memo of one process keeps (message bytes):
// past it, conversations are dropped from it.
const maxChainBytes = 128 << 20

type chainMemo struct {
	mu    sync.Mutex
	convs map[string]*memoHistory
	bytes int
	max   int
}

// memoHistory is a client history, its chain and each message's token estimate.
type memoHistory struct {
	msgs   []schemas.Message
	chain  []Digest
	tokens []int
	bytes  int
}

// clientView is what a turn computes of the client's whole history: its chain, and each
// message's token estimate (tokens.Message).
type clientView struct {
	chain  []Digest
	tokens []int
}

// total is the estimate of the whole history.
func (v clientView) total() int {
	n := 0
	for _, t := range v.tokens {
		n += t
	}
	return n
}

// extend is the view of full, the messages v covers and more after them.
func (v clientView) extend(full []schemas.Message) clientView {
	if len(v.chain) > len(full) || len(v.tokens) != len(v.chain) {
		return viewOf(nil, full)
	}
	out := clientView{chain: append(make([]Digest, 0, len(full)), v.chain...), tokens: append(make([]int, 0, len(full)), v.tokens...)}
	prev := prevLink(v.chain, len(v.chain))
	for i := len(v.chain); i < len(full); i++ {
		prev = Link(prev, &full[i])
		out.chain = append(out.chain, prev)
		out.tokens = append(out.tokens, tokens.Message(&full[i]))
	}
	return out
}

func newChainMemo(maxBytes int) *chainMemo {
	return &chainMemo{convs: map[string]*memoHistory{}, max: maxBytes}
}

// view is msgs' view (Chain(msgs), and each message's tokens.Message), reusing what
// conv's last history has of the messages that are the same.
func (c *chainMemo) view(conv string, msgs []schemas.Message) clientView {
	c.mu.Lock()
	h := c.convs[conv]
	c.mu.Unlock()
	return viewOf(h, msgs)
}

// viewOf is msgs' view, from h's where its messages are the same (h nil: none).
func viewOf(h *memoHistory, msgs []schemas.Message) clientView {
	out := clientView{chain: make([]Digest, len(msgs)), tokens: make([]int, len(msgs))}
	var prev Digest
	i := 0
	if h != nil {
		for i < len(msgs) && i < len(h.msgs) && sameCanonical(&msgs[i], &h.msgs[i]) {
			out.chain[i] = h.chain[i]
			if sameEstimate(&msgs[i], &h.msgs[i]) {
				out.tokens[i] = h.tokens[i]
			} else {
				out.tokens[i] = tokens.Message(&msgs[i])
			}
			i++
		}
		if i > 0 {
			prev = out.chain[i-1]
		}
	}
	for ; i < len(msgs); i++ {
		prev = Link(prev, &msgs[i])
		out.chain[i] = prev
		out.tokens[i] = tokens.Message(&msgs[i])
	}
	return out
}

// remember keeps msgs (a copy of the slice: the messages' contents are shared, and
// never changed once parsed) and their view as conv's last history.
func (c *chainMemo) remember(conv string, msgs []schemas.Message, v clientView) {
	if len(v.chain) != len(msgs) || len(v.tokens) != len(msgs) {
		return
	}
	h := &memoHistory{msgs: slices.Clone(msgs), chain: v.chain, tokens: v.tokens}
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

// sameEstimate says a and b, the same in what Canonical reads, also are in what the
// token estimate reads besides (tokens.Message): so their estimates are the same.
func sameEstimate(a, b *schemas.Message) bool {
	return a.Tokens == b.Tokens && a.Reasoning == b.Reasoning && a.ContentRef == nil && b.ContentRef == nil
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
