package extractive

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
	"github.com/compactor/compactor/summarizer/summary"
)

// Model is the Output.Model of every extractive summary.
const Model = "extractive"

// DefaultMaxSummaryTokens is the cap used when Input.MaxSummaryTokens is not positive.
const DefaultMaxSummaryTokens = 2048

// HeaderPrefix starts every extractive summary. A previous summary that starts with it
// is read back: its bullets are carried forward one by one, and its header and
// left-out line are replaced by the new ones.
const HeaderPrefix = "Extractive summary, written without an LLM"

// How many characters of each kind of message a line quotes at most.
const (
	userChars      = 400
	assistantChars = 200
	argsChars      = 120
	resultChars    = 120
)

// sinceLabel separates a carried-forward summary this package did not write from the
// bullets.
const sinceLabel = "Messages since then:"

// Summarizer is the extractive summarizer. The zero value is ready to use.
type Summarizer struct{}

var _ summary.Summarizer = (*Summarizer)(nil)

// New returns an extractive summarizer.
func New() *Summarizer { return &Summarizer{} }

// Summarize writes an extractive summary of in.PreviousSummary and in.Messages within
// in.MaxSummaryTokens (DefaultMaxSummaryTokens when not positive). It fails only when
// ctx is already done. in.SystemPrompt and in.Instructions are not used.
func (*Summarizer) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	if err := ctx.Err(); err != nil {
		return summary.Output{}, fmt.Errorf("extractive: %w", err)
	}
	maxTokens := in.MaxSummaryTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxSummaryTokens
	}
	return summary.Output{Summary: summarize(in.PreviousSummary, in.Messages, maxTokens), Model: Model, Fallback: true}, nil
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
	kind    kind
	text    string
	runes   int
	dropped bool
}

// counts is what was left out to fit the cap.
type counts struct {
	dropped    [numKinds]int // bullets left out, by kind
	userCut    int           // user bullets cut short
	foreignCut int           // characters cut from the head of the earlier summary
}

func (c *counts) add(o counts) {
	for k := range c.dropped {
		c.dropped[k] += o.dropped[k]
	}
	c.userCut += o.userCut
	c.foreignCut += o.foreignCut
}

func (c *counts) empty() bool { return *c == counts{} }

// layout is a summary being fitted into limit characters.
type layout struct {
	messages  int // number of messages the bullets are excerpts of
	maxTokens int // the token cap, for the left-out line
	// lines are the bullets carried forward from an earlier extractive summary, then
	// those of the new messages: oldest first.
	lines      []line
	kept       int // runes of the kept lines
	nKept      int // number of kept lines
	foreign    string
	foreignLen int    // characters of foreign
	left       counts // left out by this summary and the earlier ones it counts
	earlier    bool   // left counts what earlier summaries left out
}

func summarize(prevSummary string, msgs []schemas.Message, maxTokens int) string {
	prev := parsePrevious(prevSummary)
	l := &layout{
		messages:  prev.messages + len(msgs),
		maxTokens: maxTokens,
		lines:     append(prev.bullets, bullets(msgs)...),
		foreign:   prev.foreign,
		left:      prev.left,
		earlier:   !prev.left.empty(),
	}
	l.foreignLen = utf8.RuneCountInString(l.foreign)
	for i := range l.lines {
		l.kept += l.lines[i].runes
	}
	l.nKept = len(l.lines)
	limit := 4 * maxTokens // tokens.Text(s) <= maxTokens exactly when s has at most 4*maxTokens characters
	for k := kindToolResult; k < kindUser && l.size() > limit; k++ {
		l.drop(k, limit)
	}
	l.cutForeign(limit)
	l.dropUsers(limit)
	s := l.render()
	if tokens.Text(s) > maxTokens {
		// Last resort: even the header and the left-out line are over the cap.
		s = string([]rune(s)[:limit])
	}
	return s
}

// previous is a previous summary taken apart.
type previous struct {
	messages int    // number of messages its bullets are excerpts of
	foreign  string // a summary this package did not write, or what is left of one
	bullets  []line // oldest first
	left     counts // what its left-out line says
}

// parsePrevious takes a previous summary apart. One that does not start with
// HeaderPrefix is foreign as a whole. One that does is read as render writes it: the
// header, a left-out line, a foreign summary carried forward and sinceLabel, then the
// bullets. Summaries written before bullets were carried one by one (a left-out line
// per generation, sinceLabel between generations) are read too.
func parsePrevious(s string) previous {
	// Summaries written before secrets were redacted are redacted as they are read.
	s = strings.TrimSpace(evidence.Redact(s))
	header, body, _ := strings.Cut(s, "\n")
	if !strings.HasPrefix(header, HeaderPrefix) {
		return previous{foreign: s}
	}
	p := previous{messages: headerCount(header)}
	lines := strings.Split(body, "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], leftOutPrefix) {
		p.left.add(parseLeftOut(lines[0]))
		lines = lines[1:]
	}
	head, rest := lines, []string(nil)
	if i := slices.Index(lines, sinceLabel); i >= 0 {
		head, rest = lines[:i], lines[i+1:]
	}
	if allBullets(head) {
		rest = slices.Concat(head, rest)
	} else {
		p.foreign = strings.TrimSpace(strings.Join(head, "\n"))
	}
	for _, s := range rest {
		if s == "" || s == sinceLabel || strings.HasPrefix(s, leftOutPrefix) {
			continue
		}
		k, ok := bulletKind(s)
		if !ok {
			k = kindUser // not expected after sinceLabel: keep it longest
		}
		p.bullets = append(p.bullets, line{kind: k, text: s, runes: utf8.RuneCountInString(s)})
	}
	return p
}

// headerCount is the number of messages a header says its summary has excerpts of, or
// 0 when it says none or cannot be read.
func headerCount(header string) int {
	rest, ok := strings.CutPrefix(header, HeaderPrefix+": excerpts of ")
	if !ok {
		return 0
	}
	digits, _, _ := strings.Cut(rest, " ")
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// allBullets reports whether every one of lines is a bullet this package wrote.
func allBullets(lines []string) bool {
	for _, s := range lines {
		if _, ok := bulletKind(s); !ok {
			return false
		}
	}
	return true
}

// bulletKind is the kind of a bullet as bullets writes it, and false for any other
// line.
func bulletKind(s string) (kind, bool) {
	switch {
	case strings.HasPrefix(s, "- result of ") && strings.Contains(s, ` characters): "`):
		return kindToolResult, true
	case strings.HasPrefix(s, "- assistant called ") && strings.Contains(s, "("):
		return kindToolCall, true
	case strings.HasPrefix(s, "- assistant:"), strings.HasPrefix(s, "- assistant (") && strings.Contains(s, "):"):
		return kindAssistant, true
	case strings.HasPrefix(s, "- ") && strings.Contains(s, `: "`):
		return kindUser, true
	}
	return 0, false
}

// The left-out line and how its counts are read back.
const (
	leftOutPrefix = "[Left out to fit "
	earlierNote   = ", counting earlier extractive summaries"
)

var (
	leftOutKind    = regexp.MustCompile(`(?:: |, |\()(\d+) (user or system messages?|assistant repl(?:y|ies)|tool calls?|tool results?)\b`)
	leftOutUserCut = regexp.MustCompile(`the end of (\d+) user or system messages?`)
	leftOutChars   = regexp.MustCompile(`the oldest (\d+) characters`)
	kindNames      = [numKinds][2]string{
		kindToolResult: {"tool result", "tool results"},
		kindToolCall:   {"tool call", "tool calls"},
		kindAssistant:  {"assistant reply", "assistant replies"},
		kindUser:       {"user or system message", "user or system messages"},
	}
)

// parseLeftOut reads the counts of a left-out line.
func parseLeftOut(s string) counts {
	var c counts
	for _, m := range leftOutKind.FindAllStringSubmatch(s, -1) {
		for k, names := range kindNames {
			if m[2] == names[0] || m[2] == names[1] {
				c.dropped[k] += atoi(m[1])
			}
		}
	}
	for _, m := range leftOutUserCut.FindAllStringSubmatch(s, -1) {
		c.userCut += atoi(m[1])
	}
	for _, m := range leftOutChars.FindAllStringSubmatch(s, -1) {
		c.foreignCut += atoi(m[1])
	}
	return c
}

// atoi is the value of a run of digits, or 0 when it does not fit an int.
func atoi(digits string) int {
	n, err := strconv.Atoi(digits)
	if err != nil {
		return 0
	}
	return n
}

// drop leaves out lines of kind k, oldest first, until the summary fits limit.
func (l *layout) drop(k kind, limit int) {
	for i := range l.lines {
		if l.size() <= limit {
			return
		}
		if l.lines[i].kind == k && !l.lines[i].dropped {
			l.dropLine(i)
		}
	}
}

func (l *layout) dropLine(i int) {
	ln := &l.lines[i]
	ln.dropped = true
	l.kept -= ln.runes
	l.nKept--
	l.left.dropped[ln.kind]++
}

// dropUsers leaves out user bullets, oldest first, until the summary fits limit. The
// last one is cut short rather than left out when enough of it fits.
func (l *layout) dropUsers(limit int) {
	last := -1
	for i := range l.lines {
		if l.lines[i].kind == kindUser && !l.lines[i].dropped {
			last = i
		}
	}
	for i := 0; i < last && l.size() > limit; i++ {
		if l.lines[i].kind == kindUser && !l.lines[i].dropped {
			l.dropLine(i)
		}
	}
	if last < 0 || l.size() <= limit {
		return
	}
	ln := &l.lines[last]
	// A bullet cut by an earlier summary has lost its closing quote, and was counted.
	fresh := strings.HasSuffix(ln.text, `"`)
	if fresh {
		l.left.userCut++
	}
	room := limit - (l.size() - ln.runes)
	if room >= minCut(ln.text) {
		ln.text = string([]rune(ln.text)[:room-1]) + "…"
		l.kept -= ln.runes - room
		ln.runes = room
		return
	}
	if fresh {
		l.left.userCut--
	}
	l.dropLine(last)
}

// minCut is the fewest characters a user bullet is cut to: its role and opening quote,
// a few characters of the quote and the ellipsis.
func minCut(text string) int {
	head := 2
	if i := strings.Index(text, `: "`); i >= 0 {
		head = utf8.RuneCountInString(text[:i+3])
	}
	return head + 4 + 1
}

// cutForeign cuts the oldest part of the foreign summary, at line starts where it can,
// until the summary fits limit or nothing of it is left.
func (l *layout) cutForeign(limit int) {
	for l.foreign != "" {
		over := l.size() - limit
		if over <= 0 {
			return
		}
		r := []rune(l.foreign)
		if over >= len(r) {
			l.left.foreignCut += len(r)
			l.foreign, l.foreignLen = "", 0
			return
		}
		// Cut at the start of the next line after the first over characters, or mid-line
		// when the rest is one line.
		at := over
		if nl := strings.IndexByte(string(r[over:]), '\n'); nl >= 0 {
			at = over + utf8.RuneCountInString(string(r[over:])[:nl]) + 1
		}
		l.left.foreignCut += at
		l.foreign, l.foreignLen = string(r[at:]), len(r)-at
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
	if l.foreign != "" {
		add(l.foreignLen)
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
	if l.foreign != "" {
		b.WriteString("\n")
		b.WriteString(l.foreign)
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

// leftOut is the one line that says what was left out, or "" when nothing was. Its
// counts include those of the earlier extractive summaries carried forward, and it
// says so when they add anything.
func (l *layout) leftOut() string {
	if l.left.empty() {
		return ""
	}
	var what []string
	for k := numKinds - 1; k >= 0; k-- {
		if n := l.left.dropped[k]; n > 0 {
			what = append(what, fmt.Sprintf("%d %s", n, plural(n, kindNames[k][0], kindNames[k][1])))
		}
	}
	if n := l.left.userCut; n > 0 {
		what = append(what, fmt.Sprintf("the end of %d %s", n, plural(n, kindNames[kindUser][0], kindNames[kindUser][1])))
	}
	if n := l.left.foreignCut; n > 0 {
		what = append(what, fmt.Sprintf("the oldest %d characters of the earlier summary", n))
	}
	note := ""
	if l.earlier {
		note = earlierNote
	}
	return fmt.Sprintf("%s%d tokens%s: %s.]", leftOutPrefix, l.maxTokens, note, strings.Join(what, ", "))
}

// bullets makes the lines of msgs, in order.
func bullets(msgs []schemas.Message) []line {
	var out []line
	add := func(k kind, text string) {
		out = append(out, line{kind: k, text: text, runes: utf8.RuneCountInString(text)})
	}
	callNames := make(map[string]string)
	for i := range msgs {
		m := &msgs[i]
		text, textLen := excerptSource(m)
		text = redacted(text, userChars)
		switch m.Role {
		case schemas.RoleAssistant:
			if text != "" {
				add(kindAssistant, "- assistant"+who(m)+": "+clip(text, assistantChars))
			}
			for _, tc := range m.ToolCalls {
				callNames[tc.ID] = tc.Function.Name
				add(kindToolCall, "- assistant called "+oneLine(tc.Function.Name)+"("+clip(redacted(tc.Function.Arguments, argsChars), argsChars)+")")
			}
		case schemas.RoleTool:
			name := callNames[m.ToolCallID]
			if name == "" {
				name = m.Name
			}
			if name == "" {
				name = m.ToolCallID
			}
			add(kindToolResult, fmt.Sprintf("- result of %s (%d characters): %s",
				oneLine(name), textLen, quote(text, resultChars)))
		default: // user, system, or an unknown role: kept longest
			role := oneLine(string(m.Role))
			if role == "" {
				role = "message"
			}
			add(kindUser, "- "+role+who(m)+": "+quote(text, userChars))
		}
	}
	return out
}

// redacted is the start of s that a line quoting at most n characters of it can show,
// its secrets redacted before it is cut (evidence.RedactPrefix): a secret cut short
// may no longer be recognized. It reads a bounded prefix of s, however long s is.
func redacted(s string, n int) string {
	out, more := evidence.RedactPrefix(s, 8<<10+16*n)
	if more {
		out += " …"
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
