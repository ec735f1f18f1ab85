package eval

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// ContextText is the text a model reads in messages: every content, and every tool
// call's name, arguments, and the string values of its arguments decoded (a command
// with quotes or several lines is escaped inside the arguments' JSON).
func ContextText(msgs []schemas.Message) string {
	var b strings.Builder
	for i := range msgs {
		b.WriteString(msgs[i].Content.String())
		b.WriteByte('\n')
		for _, tc := range msgs[i].ToolCalls {
			b.WriteString(tc.Function.Name)
			b.WriteByte(' ')
			b.WriteString(tc.Function.Arguments)
			b.WriteByte('\n')
			var args any
			if len(tc.Function.Arguments) <= maxScanBytes && json.Unmarshal([]byte(tc.Function.Arguments), &args) == nil {
				writeStrings(&b, args, 0)
			}
		}
	}
	return b.String()
}

// writeStrings writes every string inside v, one a line (nesting bounded).
func writeStrings(b *strings.Builder, v any, depth int) {
	if depth > 16 {
		return
	}
	switch v := v.(type) {
	case string:
		b.WriteString(v)
		b.WriteByte('\n')
	case []any:
		for _, e := range v {
			writeStrings(b, e, depth+1)
		}
	case map[string]any:
		for _, e := range v {
			writeStrings(b, e, depth+1)
		}
	}
}

// Survivors returns the items that appear verbatim in text.
func Survivors(items []string, text string) []string {
	var out []string
	for _, it := range items {
		if it != "" && strings.Contains(text, it) {
			out = append(out, it)
		}
	}
	return out
}

// SurvivorsFold is Survivors ignoring case (for facts the user typed).
func SurvivorsFold(items []string, text string) []string {
	lower := strings.ToLower(text)
	var out []string
	for _, it := range items {
		if it != "" && strings.Contains(lower, strings.ToLower(it)) {
			out = append(out, it)
		}
	}
	return out
}

// BrokenToolPairs counts the breaks of invariant 1 in a context: a tool message that
// answers no call of the assistant message before its run of tool messages, and a call
// of that message no tool message answers.
func BrokenToolPairs(msgs []schemas.Message) int {
	broken := 0
	var open []string // calls of the newest assistant tool-call message not answered yet
	for i := range msgs {
		m := &msgs[i]
		if m.Role == schemas.RoleTool {
			if j := slices.Index(open, m.ToolCallID); j >= 0 {
				open = slices.Delete(open, j, j+1)
			} else {
				broken++
			}
			continue
		}
		broken += len(open)
		open = open[:0]
		for _, tc := range m.ToolCalls {
			if m.Role == schemas.RoleAssistant {
				open = append(open, tc.ID)
			}
		}
	}
	return broken + len(open)
}

// MissingPinned counts the pinned sequences a context does not hold.
func MissingPinned(seqs []uint64, pinned []uint64) int {
	n := 0
	for _, p := range pinned {
		if !slices.Contains(seqs, p) {
			n++
		}
	}
	return n
}

// WithoutEvidence returns msgs with the evidence section taken out of the summary
// message (the message at the index whose sequence is 0): the same context as if the
// result had no evidence_text.
func WithoutEvidence(msgs []schemas.Message, seqs []uint64, evidence string) []schemas.Message {
	if evidence == "" {
		return msgs
	}
	out := slices.Clone(msgs)
	for i := range out {
		if i < len(seqs) && seqs[i] == 0 {
			text := out[i].Content.String()
			if cut, ok := strings.CutSuffix(text, "\n\n"+evidence); ok {
				out[i].Content = schemas.Text(cut)
			} else if cut, ok := strings.CutSuffix(text, evidence); ok {
				out[i].Content = schemas.Text(cut)
			}
		}
	}
	return out
}

// ByConstruction returns msgs with the summary's own text taken out of the summary
// message (the message whose sequence is 0): it keeps assemble.SummaryPrefix and the
// evidence section (when the message ends with it); pinned and tail messages are
// unchanged. What survives in it survives whatever the summarizer writes: the lower
// bound the evidence section guarantees.
func ByConstruction(msgs []schemas.Message, seqs []uint64, evidence string) []schemas.Message {
	out := slices.Clone(msgs)
	for i := range out {
		if i < len(seqs) && seqs[i] == 0 {
			kept := assemble.SummaryPrefix
			if evidence != "" && strings.HasSuffix(out[i].Content.String(), evidence) {
				kept += evidence
			}
			out[i].Content = schemas.Text(kept)
		}
	}
	return out
}
