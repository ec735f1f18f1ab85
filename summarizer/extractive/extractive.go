package extractive

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer"
)

// Model is the Output.Model of every extractive summary.
const Model = "extractive"

// DefaultMaxSummaryTokens is the cap used when Input.MaxSummaryTokens is not positive.
const DefaultMaxSummaryTokens = 2048

// HeaderPrefix starts every extractive summary. A previous summary that starts with
// it has its header line removed when it is carried forward.
const HeaderPrefix = "Extractive summary, written without an LLM"

// How many characters of each kind of message a line quotes at most.
const (
	userChars      = 400
	assistantChars = 200
	argsChars      = 120
	resultChars    = 120
)

// sinceLabel separates the carried-forward summary from the new lines.
const sinceLabel = "Messages since then:"

// Summarizer is the extractive summarizer. The zero value is ready to use.
type Summarizer struct{}

var _ summarizer.Summarizer = (*Summarizer)(nil)

// New returns an extractive summarizer.
func New() *Summarizer { return &Summarizer{} }

// Summarize writes an extractive summary of in.PreviousSummary and in.Messages within
// in.MaxSummaryTokens (DefaultMaxSummaryTokens when not positive). It fails only when
// ctx is already done. in.SystemPrompt and in.Instructions are not used.
func (*Summarizer) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	if err := ctx.Err(); err != nil {
		return summarizer.Output{}, fmt.Errorf("extractive: %w", err)
	}
	maxTokens := in.MaxSummaryTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxSummaryTokens
	}
	return summarizer.Output{Summary: summarize(in.PreviousSummary, in.Messages, maxTokens), Model: Model, Fallback: true}, nil
}

// kind orders what is left out first: lower kinds go first.
type kind int

const (
	kindToolResult kind = iota
	kindToolCall
	kindAssistant
	kindUser // user and system messages
	numKinds
)

// line is one bullet of the summary.
type line struct {
	msg     int // index of the message it comes from
	kind    kind
	text    string
	runes   int
	dropped bool
}

// layout is a summary being fitted into limit characters.
type layout struct {
	messages  int // number of messages covered
	maxTokens int // the token cap, for the left-out line
	lines     []line
	kept      int // runes of the kept lines
	nKept     int // number of kept lines
	prev      string
	prevLen   int // characters of prev
	prevCut   int // characters cut from the head of the previous summary
	dropped   [numKinds]int
	// hit[i] is true when a line of message i was left out; hits counts them.
	hit  []bool
	hits int
}

func summarize(prev string, msgs []schemas.Message, maxTokens int) string {
	l := &layout{messages: len(msgs), maxTokens: maxTokens, prev: carried(prev), lines: bullets(msgs), hit: make([]bool, len(msgs))}
	l.prevLen = utf8.RuneCountInString(l.prev)
	for i := range l.lines {
		l.kept += l.lines[i].runes
	}
	l.nKept = len(l.lines)
	limit := 4 * maxTokens // tokens.Text(s) <= maxTokens exactly when s has at most 4*maxTokens characters
	for k := kindToolResult; k < kindUser && l.size() > limit; k++ {
		l.drop(k, limit)
	}
	l.cutPrev(limit)
	l.drop(kindUser, limit)
	s := l.render()
	if tokens.Text(s) > maxTokens {
		// Last resort: even the header and the left-out line are over the cap.
		s = string([]rune(s)[:limit])
	}
	return s
}

// carried is the previous summary as it is carried forward: without the header line
// of an extractive summary, trimmed.
func carried(prev string) string {
	prev = strings.TrimSpace(prev)
	if strings.HasPrefix(prev, HeaderPrefix) {
		_, rest, _ := strings.Cut(prev, "\n")
		prev = strings.TrimSpace(rest)
	}
	return prev
}

// drop leaves out lines of kind k, oldest first, until the summary fits limit.
func (l *layout) drop(k kind, limit int) {
	for i := range l.lines {
		if l.size() <= limit {
			return
		}
		ln := &l.lines[i]
		if ln.kind != k || ln.dropped {
			continue
		}
		ln.dropped = true
		l.kept -= ln.runes
		l.nKept--
		l.dropped[k]++
		if !l.hit[ln.msg] {
			l.hit[ln.msg] = true
			l.hits++
		}
	}
}

// cutPrev cuts the oldest part of the previous summary, at line starts where it can,
// until the summary fits limit or nothing of it is left.
func (l *layout) cutPrev(limit int) {
	for l.prev != "" {
		over := l.size() - limit
		if over <= 0 {
			return
		}
		r := []rune(l.prev)
		if over >= len(r) {
			l.prevCut += len(r)
			l.prev, l.prevLen = "", 0
			return
		}
		// Cut at the start of the next line after the first over characters, or mid-line
		// when the rest is one line.
		at := over
		if nl := strings.IndexByte(string(r[over:]), '\n'); nl >= 0 {
			at = over + utf8.RuneCountInString(string(r[over:])[:nl]) + 1
		}
		l.prevCut += at
		l.prev, l.prevLen = string(r[at:]), len(r)-at
	}
}

// size is the number of characters render would write.
func (l *layout) size() int {
	n, count := 0, 0
	add := func(runes int) {
		n += runes
		count++
	}
	add(utf8.RuneCountInString(l.header()))
	if lo := l.leftOut(); lo != "" {
		add(utf8.RuneCountInString(lo))
	}
	if l.prev != "" {
		add(l.prevLen)
		if l.nKept > 0 {
			add(utf8.RuneCountInString(sinceLabel))
		}
	}
	n += l.kept
	count += l.nKept
	return n + count - 1 // newlines between lines
}

func (l *layout) render() string {
	var b strings.Builder
	b.WriteString(l.header())
	if lo := l.leftOut(); lo != "" {
		b.WriteString("\n")
		b.WriteString(lo)
	}
	if l.prev != "" {
		b.WriteString("\n")
		b.WriteString(l.prev)
		if l.nKept > 0 {
			b.WriteString("\n" + sinceLabel)
		}
	}
	for _, ln := range l.lines {
		if !ln.dropped {
			b.WriteString("\n")
			b.WriteString(ln.text)
		}
	}
	return b.String()
}

func (l *layout) header() string {
	if l.messages == 0 {
		return HeaderPrefix + ": no new messages."
	}
	return fmt.Sprintf("%s: excerpts of %d %s in order.", HeaderPrefix, l.messages, plural(l.messages, "message", "messages"))
}

// leftOut is the one line that says what was left out, or "" when nothing was.
func (l *layout) leftOut() string {
	var what []string
	names := [numKinds][2]string{
		kindToolResult: {"tool result", "tool results"},
		kindToolCall:   {"tool call", "tool calls"},
		kindAssistant:  {"assistant reply", "assistant replies"},
		kindUser:       {"user or system message", "user or system messages"},
	}
	for k := numKinds - 1; k >= 0; k-- {
		if n := l.dropped[k]; n > 0 {
			what = append(what, fmt.Sprintf("%d %s", n, plural(n, names[k][0], names[k][1])))
		}
	}
	var parts []string
	if l.hits > 0 {
		parts = append(parts, fmt.Sprintf("parts of %d of the %d messages (%s)", l.hits, l.messages, strings.Join(what, ", ")))
	}
	if l.prevCut > 0 {
		parts = append(parts, fmt.Sprintf("the oldest %d characters of the earlier summary", l.prevCut))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("[Left out to fit %d tokens: %s.]", l.maxTokens, strings.Join(parts, " and "))
}

// bullets makes the lines of msgs, in order.
func bullets(msgs []schemas.Message) []line {
	var out []line
	add := func(i int, k kind, text string) {
		out = append(out, line{msg: i, kind: k, text: text, runes: utf8.RuneCountInString(text)})
	}
	callNames := make(map[string]string)
	for i := range msgs {
		m := &msgs[i]
		text, textLen := excerptSource(m)
		switch m.Role {
		case schemas.RoleAssistant:
			if text != "" {
				add(i, kindAssistant, "- assistant"+who(m)+": "+clip(text, assistantChars))
			}
			for _, tc := range m.ToolCalls {
				callNames[tc.ID] = tc.Function.Name
				add(i, kindToolCall, "- assistant called "+oneLine(tc.Function.Name)+"("+clip(tc.Function.Arguments, argsChars)+")")
			}
		case schemas.RoleTool:
			name := callNames[m.ToolCallID]
			if name == "" {
				name = m.Name
			}
			if name == "" {
				name = m.ToolCallID
			}
			add(i, kindToolResult, fmt.Sprintf("- result of %s (%d characters): %s",
				oneLine(name), textLen, quote(text, resultChars)))
		default: // user, system, or an unknown role: kept longest
			role := oneLine(string(m.Role))
			if role == "" {
				role = "message"
			}
			add(i, kindUser, "- "+role+who(m)+": "+quote(text, userChars))
		}
	}
	return out
}

// excerptSource is a message's text with its non-text parts as placeholders, and the
// number of characters of its text alone.
func excerptSource(m *schemas.Message) (string, int) {
	if !m.Content.IsParts() {
		s := m.Content.String()
		return s, utf8.RuneCountInString(s)
	}
	parts, err := m.Content.Parts()
	if err != nil {
		return "", 0
	}
	var b strings.Builder
	n := 0
	for _, p := range parts {
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		if p.Type == "text" {
			b.WriteString(p.Text)
			n += utf8.RuneCountInString(p.Text)
		} else {
			b.WriteString(p.Placeholder())
		}
	}
	return b.String(), n
}

func who(m *schemas.Message) string {
	if m.Name == "" {
		return ""
	}
	return " (" + oneLine(m.Name) + ")"
}

// quote is clip in double quotes.
func quote(s string, n int) string { return `"` + clip(s, n) + `"` }

// clip is s on one line (see oneLine), cut to n characters with an ellipsis when
// longer. It reads no more of s than it needs.
func clip(s string, n int) string {
	var b strings.Builder
	count, space := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = count > 0
			continue
		}
		if space {
			if count == n {
				return b.String() + "…"
			}
			b.WriteByte(' ')
			count++
			space = false
		}
		if count == n {
			return b.String() + "…"
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

// oneLine collapses every run of white space, newlines included, to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
