// Package assemble is the reader algorithm: it turns a compaction value, the pinned
// messages and the verbatim tail into the context a model is sent. It is pure; the
// pipeline package loads the inputs from NATS, and clients in other languages follow the
// same steps (see the README).
package assemble

import (
	"encoding/json"
	"slices"
	"sort"
	"strconv"
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
	// Counter counts tokens for Context.Tokens and MaxTokens (nil: chars/4).
	Counter tokens.Counter
}

// Context is the assembled context.
type Context struct {
	Messages []schemas.Message
	// Seqs holds the CHAT sequence of each message; 0 for the summary.
	Seqs         []uint64
	Generation   uint64
	TailStartSeq uint64
	HasSummary   bool
	// Tokens is the estimate of Messages: producer counts win where given, but never
	// below what the content's bytes imply (tokens.Floor).
	Tokens   int
	Degraded bool
	Skipped  []rounds.Skipped
}

// builder is a Context being assembled, with the tokens of each of its messages.
type builder struct {
	Context
	toks  []int
	count tokens.Counter
}

// SummaryMessage returns the message that carries a summary: SummaryPrefix, the
// summary and, when the value has one, a blank line and its evidence section
// (EvidenceText). A value without evidence_text gives the message it always gave.
func SummaryMessage(v *schemas.Result) schemas.Message {
	text := SummaryPrefix + v.Summary
	if v.EvidenceText != "" {
		text += "\n\n" + v.EvidenceText
	}
	return schemas.Message{Role: v.SummaryRoleOrDefault(), Content: schemas.Text(text)}
}

// Assemble runs steps 2–6 of the reader algorithm.
//
// Pinned entries are ordered by sequence; one that is also in the tail is shown only
// there, and pinned entries go through the same tool-round rules as the tail, so a
// pinned tool call without its pinned results (or the reverse) is skipped and reported.
func Assemble(in Input, opts Options) Context {
	c := builder{count: opts.Counter}
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
	inTail := make(map[uint64]bool, len(in.Tail))
	for _, e := range in.Tail {
		inTail[e.Seq] = true
	}
	pinned := make([]schemas.Entry, 0, len(in.Pinned))
	for _, e := range in.Pinned {
		if !inTail[e.Seq] {
			pinned = append(pinned, e)
		}
	}
	sort.SliceStable(pinned, func(i, j int) bool { return pinned[i].Seq < pinned[j].Seq })
	pinned = slices.CompactFunc(pinned, func(a, b schemas.Entry) bool { return a.Seq == b.Seq })
	keptPinned, skippedPinned := rounds.Normalize(pinned)
	for _, s := range skippedPinned {
		c.Skipped = append(c.Skipped, rounds.Skipped{Seq: s.Seq, Reason: "pinned: " + s.Reason})
	}
	for _, e := range keptPinned {
		c.add(e, overrides, opts.Raw)
	}
	if v := in.Value; v != nil && v.Summary != "" {
		m := SummaryMessage(v)
		c.Messages = append(c.Messages, m)
		c.Seqs = append(c.Seqs, 0)
		c.toks = append(c.toks, tokens.MessageWith(c.count, &m))
		c.HasSummary = true
	}
	kept, skipped := rounds.Normalize(in.Tail)
	c.Skipped = append(c.Skipped, skipped...)
	for _, e := range kept {
		c.add(e, overrides, opts.Raw)
	}
	for _, t := range c.toks {
		c.Tokens += t
	}
	if opts.MaxTokens > 0 && c.Tokens > opts.MaxTokens {
		c.shrink(opts.MaxTokens)
	}
	return c.Context
}

// add appends one entry, counting its tokens before the metadata is stripped so a
// producer's count wins over the estimate (held to tokens.Floor, so a count far below
// the content does not hide it from MaxTokens).
func (c *builder) add(e schemas.Entry, overrides map[uint64]schemas.Override, raw bool) {
	m := e.Message
	if o, ok := overrides[e.Seq]; ok {
		m = ApplyOverride(m, o)
	}
	t := tokens.MessageWith(c.count, &m)
	if !raw {
		m = m.StripMetadata()
	}
	c.Messages = append(c.Messages, m)
	c.Seqs = append(c.Seqs, e.Seq)
	c.toks = append(c.toks, t)
}

// ApplyOverride applies a truncation to a message's text. String content is cut in
// place; array content has its text parts joined and cut into one text part, placed
// where the first text part was, and keeps its non-text parts verbatim.
func ApplyOverride(m schemas.Message, o schemas.Override) schemas.Message {
	return applyOverride(m, m.Content.String(), o)
}

// applyOverride is ApplyOverride given the message's text (m.Content.String()).
func applyOverride(m schemas.Message, text string, o schemas.Override) schemas.Message {
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
	cut := n - head - tail
	marker := "\n[… " + strconv.Itoa(cut) + " characters cut by Compactor"
	if note != "" {
		marker += ": " + note
	}
	marker += " …]\n"
	// Byte offsets of the head's end and the tail's start, found by walking head runes
	// from the front and tail runes from the back: no copy of s as runes.
	h := 0
	for range head {
		_, size := utf8.DecodeRuneInString(s[h:])
		h += size
	}
	t := len(s)
	for range tail {
		_, size := utf8.DecodeLastRuneInString(s[:t])
		t -= size
	}
	var b strings.Builder
	b.Grow(h + len(marker) + len(s) - t)
	b.WriteString(s[:h])
	b.WriteString(marker)
	b.WriteString(s[t:])
	return b.String(), true
}

// minKeep is how many characters of head and tail a read-time cut keeps at the least.
const minKeep = 200

// markerRoom is about the length of the marker a read-time cut inserts.
const markerRoom = 100

// readTimeNote is the note of a read-time cut.
const readTimeNote = "cut at read time to fit the caller's token budget"

// shrink cuts the context deterministically until it fits budget tokens, or until nothing
// more can be cut: first the oldest tool outputs, then the largest messages. Every cut
// starts from the message as it was before shrinking (markers never pile up), and a
// message keeps at least 2×minKeep characters of its text.
func (c *builder) shrink(budget int) {
	c.Degraded = true
	orig := slices.Clone(c.Messages)
	// Each message's text and its length in characters, decoded once: a message may be
	// cut again, and decoding it each time made large contexts slow.
	texts := make([]string, len(orig))
	lens := make([]int, len(orig))
	kept := make([]int, len(orig)) // characters of its text each message still keeps
	for i := range orig {
		texts[i] = orig[i].Content.String()
		lens[i] = utf8.RuneCountInString(texts[i])
		kept[i] = lens[i]
	}
	over := func() int { return c.Tokens - budget }
	// cut shortens message i by about need tokens, keeping head and tail.
	cut := func(i, need int) {
		if kept[i] <= 2*minKeep {
			return
		}
		keep := kept[i] - need*4
		if kept[i] == lens[i] {
			keep -= markerRoom
		}
		keep = max(keep, 2*minKeep)
		kept[i] = keep
		m := applyOverride(orig[i], texts[i], schemas.Override{KeepHead: keep / 2, KeepTail: keep - keep/2, Note: readTimeNote})
		t := tokens.MessageWith(c.count, &m)
		c.Tokens += t - c.toks[i]
		c.Messages[i], c.toks[i] = m, t
	}
	// 1. Oldest tool outputs first, down to head and tail.
	for i := range c.Messages {
		if over() <= 0 {
			return
		}
		if c.Messages[i].Role == schemas.RoleTool {
			cut(i, over())
		}
	}
	// 2. Any message still over budget, largest first (the earliest among equals).
	// Each cut lowers some kept[i], so the loop ends.
	for over() > 0 {
		best := -1
		for i := range c.Messages {
			if kept[i] > 2*minKeep && (best < 0 || c.toks[i] > c.toks[best]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		cut(best, over())
	}
}
