// Package assemble is the reader algorithm: it turns a compaction value, the pinned
// messages and the verbatim tail into the context a model is sent. It is pure; the
// pipeline package loads the inputs from NATS, and clients in other languages follow the
// same steps (see the README).
package assemble

import (
	"encoding/json"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// SummaryPrefix starts the summary message, so the model knows what it is reading.
const SummaryPrefix = "[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\n"

// Input is what a reader loaded.
type Input struct {
	// Value is the KV value of the conversation; nil when it was never compacted.
	Value *schemas.Result
	// Pinned are the entries at Value.PinnedSeqs (covered by the summary but kept verbatim).
	Pinned []schemas.Entry
	// Tail is every entry from Value.TailStartSeq on (the whole history when Value is nil).
	Tail []schemas.Entry
}

// Options shape the output.
type Options struct {
	// Raw keeps Compactor's metadata (tokens, usage, context_generation, meta).
	Raw bool
	// MaxTokens, when > 0, cuts the context at read time to fit: oldest tool outputs
	// first, then head and tail of any message still over budget. The result is flagged
	// Degraded.
	MaxTokens int
}

// Context is the assembled context.
type Context struct {
	Messages []schemas.Message
	// Seqs holds the CHAT sequence of each message; 0 for the summary.
	Seqs         []uint64
	Generation   uint64
	TailStartSeq uint64
	HasSummary   bool
	// Tokens is the estimate of Messages (producer counts win where given).
	Tokens   int
	Degraded bool
	Skipped  []rounds.Skipped
}

// SummaryMessage returns the message that carries a summary.
func SummaryMessage(v *schemas.Result) schemas.Message {
	return schemas.Message{Role: v.SummaryRoleOrDefault(), Content: schemas.Text(SummaryPrefix + v.Summary)}
}

// Assemble runs steps 2–6 of the reader algorithm.
func Assemble(in Input, opts Options) Context {
	var c Context
	var overrides map[uint64]schemas.Override
	if v := in.Value; v != nil {
		c.Generation = v.Generation
		c.TailStartSeq = v.TailStartSeq
		if len(v.Overrides) > 0 {
			overrides = make(map[uint64]schemas.Override, len(v.Overrides))
			for _, o := range v.Overrides {
				overrides[o.Seq] = o
			}
		}
	}
	pinned := append([]schemas.Entry(nil), in.Pinned...)
	sort.SliceStable(pinned, func(i, j int) bool { return pinned[i].Seq < pinned[j].Seq })
	for _, e := range pinned {
		if e.Err != nil {
			c.Skipped = append(c.Skipped, rounds.Skipped{Seq: e.Seq, Reason: "invalid pinned message: " + e.Err.Error()})
			continue
		}
		c.add(e, overrides, opts.Raw)
	}
	if v := in.Value; v != nil && v.Summary != "" {
		c.Messages = append(c.Messages, SummaryMessage(v))
		c.Seqs = append(c.Seqs, 0)
		c.HasSummary = true
	}
	kept, skipped := rounds.Normalize(in.Tail)
	c.Skipped = append(c.Skipped, skipped...)
	for _, e := range kept {
		c.add(e, overrides, opts.Raw)
	}
	c.Tokens = tokens.Messages(c.Messages)
	if opts.MaxTokens > 0 && c.Tokens > opts.MaxTokens {
		c.shrink(opts.MaxTokens)
	}
	return c
}

func (c *Context) add(e schemas.Entry, overrides map[uint64]schemas.Override, raw bool) {
	m := e.Message
	if o, ok := overrides[e.Seq]; ok {
		m = ApplyOverride(m, o)
	}
	if !raw {
		m = m.StripMetadata()
	}
	c.Messages = append(c.Messages, m)
	c.Seqs = append(c.Seqs, e.Seq)
}

// ApplyOverride applies a truncation to a message's text. String content is cut in
// place; array content has its text parts joined and cut into one text part, placed
// where the first text part was, and keeps its non-text parts verbatim.
func ApplyOverride(m schemas.Message, o schemas.Override) schemas.Message {
	text := m.Content.String()
	cut, changed := Truncate(text, o.KeepHead, o.KeepTail, o.Note)
	if !changed {
		return m
	}
	m.Tokens = 0 // the producer's count no longer applies
	if !m.Content.IsParts() {
		m.Content = schemas.Text(cut)
		return m
	}
	parts, err := m.Content.Parts()
	if err != nil {
		m.Content = schemas.Text(cut)
		return m
	}
	textPart, _ := json.Marshal(map[string]string{"type": "text", "text": cut})
	var raws []json.RawMessage
	placed := false
	for _, p := range parts {
		if p.Type != "text" {
			raws = append(raws, p.Raw)
			continue
		}
		if !placed {
			raws = append(raws, textPart)
			placed = true
		}
	}
	m.Content = schemas.Parts(raws...)
	return m
}

// Truncate keeps the first head and last tail characters of s with a marker between
// them that says how much was cut. It reports false when s is short enough already.
func Truncate(s string, head, tail int, note string) (string, bool) {
	n := utf8.RuneCountInString(s)
	if head < 0 {
		head = 0
	}
	if tail < 0 {
		tail = 0
	}
	if n <= head+tail {
		return s, false
	}
	r := []rune(s)
	cut := n - head - tail
	marker := "\n[… " + itoa(cut) + " characters cut by Compactor"
	if note != "" {
		marker += ": " + note
	}
	marker += " …]\n"
	var b strings.Builder
	b.WriteString(string(r[:head]))
	b.WriteString(marker)
	b.WriteString(string(r[n-tail:]))
	return b.String(), true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}

// minKeep is how many characters of head and tail a read-time cut keeps at the least.
const minKeep = 200

// shrink cuts the context deterministically until it fits max tokens, or until nothing
// more can be cut: first the oldest tool outputs, then the largest messages.
func (c *Context) shrink(max int) {
	c.Degraded = true
	over := func() int { return c.Tokens - max }
	// 1. Oldest tool outputs first, down to head and tail.
	for i := range c.Messages {
		if over() <= 0 {
			return
		}
		if c.Messages[i].Role == schemas.RoleTool {
			c.cut(i, over())
		}
	}
	// 2. Any message still over budget, largest first.
	for over() > 0 {
		best, bestTok := -1, 0
		for i := range c.Messages {
			if t := tokens.Message(&c.Messages[i]); t > bestTok && utf8.RuneCountInString(c.Messages[i].Content.String()) > 2*minKeep+1 {
				best, bestTok = i, t
			}
		}
		if best < 0 {
			return
		}
		c.cut(best, over())
	}
}

// cut shortens message i by about need tokens, keeping head and tail.
func (c *Context) cut(i, need int) {
	m := c.Messages[i]
	text := m.Content.String()
	n := utf8.RuneCountInString(text)
	keep := n - need*4 - 64 // room for the marker
	if keep < 2*minKeep {
		keep = 2 * minKeep
	}
	if keep >= n {
		return
	}
	before := tokens.Message(&m)
	c.Messages[i] = ApplyOverride(m, schemas.Override{KeepHead: keep / 2, KeepTail: keep - keep/2,
		Note: "cut at read time to fit the caller's token budget"})
	c.Tokens += tokens.Message(&c.Messages[i]) - before
}
