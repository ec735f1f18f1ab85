package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// Digest is a link of a conversation's digest chain: the SHA-256 of the previous link
// and the canonical form of one message, cut to 128 bits. Equal links at a position mean
// equal histories up to it.
type Digest [16]byte

// String is the digest in hex, as it is stored in a message's meta.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// parseDigest reads a digest from its hex form; ok is false for anything else.
func parseDigest(s string) (d Digest, ok bool) {
	if len(s) != 2*len(d) {
		return d, false
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, false
	}
	return d, true
}

// Link is the next link of the chain after prev for message m.
func Link(prev Digest, m *schemas.Message) Digest {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(Canonical(m))
	var d Digest
	copy(d[:], h.Sum(nil))
	return d
}

// Chain returns the chain of msgs: out[i] covers msgs[0..i].
func Chain(msgs []schemas.Message) []Digest {
	out := make([]Digest, len(msgs))
	var prev Digest
	for i := range msgs {
		prev = Link(prev, &msgs[i])
		out[i] = prev
	}
	return out
}

// Canonical is the form in which two messages are compared: what the model reads of
// them and nothing else. Role, name, tool_call_id, the content's text (a string, one
// text part or several consecutive text parts are the same text), every other part as
// compact JSON with sorted keys, and the tool calls (id, name, arguments as compact
// JSON with sorted keys when they are JSON). Compactor's metadata, reasoning, extra and
// fields this version does not know are left out: clients send them back differently
// from how the upstream gave them.
func Canonical(m *schemas.Message) []byte {
	var b []byte
	field := func(tag byte, s []byte) {
		b = append(b, tag)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field('r', []byte(m.Role))
	field('n', []byte(m.Name))
	field('i', []byte(m.ToolCallID))
	canonicalContent(m.Content, field)
	for _, tc := range m.ToolCalls {
		field('c', []byte(tc.ID))
		field('f', []byte(tc.Function.Name))
		field('a', wire.CanonicalJSON([]byte(tc.Function.Arguments)))
	}
	return b
}

// canonicalContent gives the content's items to field: runs of text as one 't' item,
// other parts as 'p' items.
func canonicalContent(c schemas.Content, field func(byte, []byte)) {
	if c.IsNull() {
		return
	}
	if !c.IsParts() {
		if s := c.String(); s != "" {
			field('t', []byte(s))
		}
		return
	}
	parts, err := c.Parts()
	if err != nil {
		field('x', wire.CanonicalJSON(c.Raw()))
		return
	}
	var text []byte
	flush := func() {
		if len(text) > 0 {
			field('t', text)
			text = nil
		}
	}
	for _, p := range parts {
		if p.Type == "text" {
			text = append(text, p.Text...)
			continue
		}
		flush()
		field('p', wire.CanonicalJSON(p.Raw))
	}
	flush()
}
