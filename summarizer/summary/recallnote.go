package summary

import (
	"fmt"
	"strings"
)

// recallNotePrefix starts the line a stored summary ends with (RecallNote).
const recallNotePrefix = "[Compactor: the summary above replaces this conversation's messages "

// RecallNote is the line a stored summary ends with, so that a model which needs a
// detail the summary dropped asks for it instead of guessing: which of the
// conversation's messages (CHAT sequences first through through; first 0: unknown) the
// summary replaces, and the recall tool that returns them word for word, by its two
// names: recall (the tool definition of the clients, schemas.RecallToolJSON) and
// mcp__compactor__recall (compactor mcp, registered as the MCP server "compactor", as
// Claude Code names an MCP server's tools).
func RecallNote(first, through uint64) string {
	span := fmt.Sprintf("up to sequence %d", through)
	if first > 0 && first <= through {
		span = fmt.Sprintf("%d to %d (sequences)", first, through)
	}
	return recallNotePrefix + span + ". To read any of them word for word, call the recall tool " +
		"(recall, or mcp__compactor__recall through Compactor's MCP server) with a query, or with from_seq and to_seq.]"
}

// WithRecallNote is summary with the lines a RecallNote starts taken out (a previous
// summary's note, which a summarizer may carry forward) and a fresh note at its end.
func WithRecallNote(summary string, first, through uint64) string {
	return StripRecallNote(summary) + "\n\n" + RecallNote(first, through)
}

// StripRecallNote is s without its recall notes: every line that starts like one, and
// the blank lines left at its end.
func StripRecallNote(s string) string {
	if !strings.Contains(s, recallNotePrefix) {
		return s
	}
	lines := strings.Split(s, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), recallNotePrefix) {
			kept = append(kept, l)
		}
	}
	return strings.TrimRight(strings.Join(kept, "\n"), "\n")
}
