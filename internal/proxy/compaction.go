package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// Agents compact on their own: when the usage they are told of grows, they send their
// model their history and a prompt asking for a summary of it, then go on from that
// summary. The proxy recognises such a request and, when Compactor's summary covers the
// conversation, answers it from that summary without calling the model: the agent gets
// its summary at once and for nothing, and the conversation is not summarized twice.

// Answer formats: the shape of the summary an agent expects.
const (
	// FormatAnalysisSummary is <analysis>…</analysis> then <summary>…</summary>
	// (Claude Code reads the summary element).
	FormatAnalysisSummary = "analysis-summary"
	// FormatStateSnapshot is a <state_snapshot> element (Gemini CLI).
	FormatStateSnapshot = "state-snapshot"
	// FormatPlain is the summary as text (Codex, OpenCode, any other).
	FormatPlain = "plain"
)

// CompactionPrompt recognises one agent's request to summarize its own conversation:
// by a header holding a value, or by text in the request's last user message.
type CompactionPrompt struct {
	// Agent names the agent, for logs.
	Agent string
	// Header and HeaderHas: the request's header Header holds HeaderHas.
	Header, HeaderHas string
	// Text: the last user message holds Text.
	Text string
	// System: a system message holds System (an agent whose compaction request
	// carries its own system prompt and its history flattened into one message).
	System string
	// Format is how the answer is shaped (FormatPlain when empty).
	Format string
	// Side: the agent runs its compaction as a side task and goes on from a history
	// that keeps its newest messages (Gemini CLI keeps its newest turns after its
	// snapshot): the request and its answer are not stored, as a side request's.
	// Otherwise they are stored as a turn, since the agent's next history holds the
	// answer in place of the messages it summarizes.
	Side bool
}

// DefaultCompactionPrompts are the compaction requests of the agents people run, as
// they were seen sent (Claude Code 2.1, Codex 0.17x, Gemini CLI 0.6x, OpenCode 1.18).
// COMPACTOR_PROXY_COMPACTION_PROMPTS adds texts of the operator's own.
var DefaultCompactionPrompts = []CompactionPrompt{
	{Agent: "codex", Header: "X-Codex-Turn-Metadata", HeaderHas: `"request_kind":"compaction"`},
	{Agent: "codex", Text: "You are performing a CONTEXT CHECKPOINT COMPACTION"},
	{Agent: "claude-code", Text: "Your task is to create a detailed summary of the conversation so far", Format: FormatAnalysisSummary},
	{Agent: "gemini-cli", Text: "Generate a new <state_snapshot>", Format: FormatStateSnapshot, Side: true},
	{Agent: "gemini-cli", Text: "Critically evaluate the <state_snapshot>", Format: FormatStateSnapshot, Side: true},
	{Agent: "opencode", System: "You are a context summarization agent"},
	{Agent: "opencode", Text: "Create a new anchored summary from the conversation history"},
}

// DefaultSidePrompts are texts whose presence in a request's system message make it a
// side task of the agent's on its session (OpenCode's title generator), answered with
// the compacted context but not stored.
var DefaultSidePrompts = []string{"You are a title generator"}

// systemHolds says one of msgs' system messages holds text.
func systemHolds(msgs []schemas.Message, text string) bool {
	for i := range msgs {
		if msgs[i].Role == schemas.RoleSystem && strings.Contains(msgs[i].Content.String(), text) {
			return true
		}
	}
	return false
}

// compactionPrompt is the prompt among prompts that r with msgs is, if any.
func compactionPrompt(prompts []CompactionPrompt, h http.Header, msgs []schemas.Message) (CompactionPrompt, bool) {
	last := ""
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == schemas.RoleUser {
			last = msgs[i].Content.String()
			break
		}
		if msgs[i].Role != schemas.RoleTool && msgs[i].Role != schemas.RoleSystem {
			break // the newest message is the model's: the request asks nothing new
		}
	}
	for _, p := range prompts {
		switch {
		case p.Header != "" && strings.Contains(strings.ReplaceAll(h.Get(p.Header), " ", ""), p.HeaderHas):
			return p, true
		case p.Text != "" && last != "" && strings.Contains(last, p.Text):
			return p, true
		case p.System != "" && systemHolds(msgs, p.System):
			return p, true
		}
	}
	return CompactionPrompt{}, false
}

// maxAnswerBytes bounds an answer: the summary and the messages since it, each cut to
// maxAnswerMessage. A conversation whose answer would be larger is left to the model.
const (
	maxAnswerBytes   = 256 << 10
	maxAnswerMessage = 8 << 10
)

// compactionAnswer is the text of the answer to a compaction request of turn t:
// Compactor's summary (and its evidence) of the conversation the turn continues, then
// the messages after it verbatim as the client has them (each cut to its head and tail
// past maxAnswerMessage; what the agent masked stays masked), but the request's own
// prompt, shaped as format says. A flattened request's messages are not the
// conversation's: its answer quotes the stored messages after the summary. ok is false
// when the conversation holds no summary, or the answer would be over maxAnswerBytes.
func compactionAnswer(t *Turn, format string) (string, bool) {
	if t.Flattened {
		return compactionAnswerOf(t.Stored, format, false)
	}
	return compactionAnswerOf(t.Context, format, true)
}

// compactionAnswerOf is the answer read from cx; prompt says cx's last user message is
// the compaction prompt (left out, with what follows it), not a message of the
// conversation.
func compactionAnswerOf(cx *assemble.Context, format string, prompt bool) (string, bool) {
	if cx == nil || !cx.HasSummary {
		return "", false
	}
	var summary strings.Builder
	var after []schemas.Message
	seen := false
	for i := range cx.Messages {
		switch m := &cx.Messages[i]; {
		case cx.Seqs[i] == 0:
			seen = true
			summary.WriteString(strings.TrimSpace(m.Content.String()))
			summary.WriteString("\n\n")
		case seen && m.Role != schemas.RoleSystem:
			after = append(after, *m)
		}
	}
	if n := lastUser(after); n >= 0 && prompt {
		after = after[:n] // the compaction prompt itself
	}
	var b strings.Builder
	switch format {
	case FormatAnalysisSummary:
		b.WriteString("<analysis>\nAnswered by Compactor from its summary of this conversation, without calling the model.\n</analysis>\n\n<summary>\n")
	case FormatStateSnapshot:
		b.WriteString("<state_snapshot>\n<summary>\n")
	}
	b.WriteString(quoteTags(strings.TrimSpace(summary.String())))
	if len(after) > 0 {
		b.WriteString("\n\nThe messages since, verbatim:\n")
	}
	for i := range after {
		b.WriteString(quoteTags(transcriptLine(&after[i])))
		if b.Len() > maxAnswerBytes {
			return "", false
		}
	}
	switch format {
	case FormatAnalysisSummary:
		b.WriteString("\n</summary>")
	case FormatStateSnapshot:
		b.WriteString("\n</summary>\n</state_snapshot>")
	}
	if b.Len() > maxAnswerBytes {
		return "", false
	}
	return b.String(), true
}

// answerTags are the closing tags an answer's shape ends with: the text inside an
// answer never holds one (a client that reads up to the first would lose the rest).
var answerTags = strings.NewReplacer("</summary>", "</ summary>", "</state_snapshot>", "</ state_snapshot>", "</analysis>", "</ analysis>")

// quoteTags is s with answerTags broken apart.
func quoteTags(s string) string { return answerTags.Replace(s) }

// cut is s, or when it is over n bytes its head and tail, n/2 bytes each at most, cut
// at character boundaries, with the bytes left out said between them.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head, tail := n/2, len(s)-n/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + fmt.Sprintf("\n[… %d bytes left out …]\n", tail-head) + s[tail:]
}

// transcriptLine is one message of an answer's transcript: its role, its text (its
// head and tail past maxAnswerMessage), its tool calls.
func transcriptLine(m *schemas.Message) string {
	var b strings.Builder
	role := string(m.Role)
	if m.Role == schemas.RoleTool {
		role = "tool result " + m.ToolCallID
	}
	if text := cut(m.Content.String(), maxAnswerMessage); text != "" {
		fmt.Fprintf(&b, "[%s] %s\n", role, text)
	}
	for _, c := range m.ToolCalls {
		fmt.Fprintf(&b, "[%s calls %s %s] %s\n", role, c.Function.Name, c.ID, cut(c.Function.Arguments, maxAnswerMessage))
	}
	return b.String()
}

// answerUsage is the usage an answer reports: the compacted context as its input, the
// answer as its output.
func answerUsage(cx *assemble.Context, text string) Usage {
	return Usage{Input: cx.Tokens, Output: tokens.Text(text)}
}
