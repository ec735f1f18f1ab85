package mask

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/recall"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// Input is what Outputs masks.
type Input struct {
	// Conversation is the conversation's id, named in the recall of each note.
	Conversation string
	// Entries are the messages that may hold outputs to mask, in stream order, with
	// their content (stubs resolved): a round's call and its results are read
	// together, so a result is masked only when its whole round is here.
	Entries []schemas.Entry
	// Old says which entries' tool outputs are old enough to be masked (by sequence).
	Old func(seq uint64) bool
	// Keep lists the sequences left as they are: those that have an override already.
	Keep map[uint64]bool
	// Counter counts tokens (nil: chars/4).
	Counter tokens.Counter
}

// maxLabel bounds the tool names and call ids a note repeats.
const maxLabel = 64

// Outputs returns one override for each tool output it masks, in stream order: the
// results of complete rounds (a call with all its results) whose sequence is Old and
// not in Keep, when the placeholder is smaller than the output. A result of a round
// still open, one without its call, or an invalid entry is never masked.
func Outputs(in Input) []schemas.Override {
	count := in.Counter
	if count == nil {
		count = tokens.Chars4{}
	}
	var out []schemas.Override
	es := in.Entries
	for _, u := range rounds.Units(es) {
		if u.Kind != rounds.Round || !u.Complete {
			continue
		}
		call := &es[u.Start]
		first, last := call.Seq, es[u.End-1].Seq
		names := make(map[string]string, len(call.Message.ToolCalls))
		for _, tc := range call.Message.ToolCalls {
			names[tc.ID] = tc.Function.Name
		}
		// What a recall of the round weighs: its budget, as the reader counts it.
		weight := 0
		for k := u.Start; k < u.End; k++ {
			if es[k].Err == nil {
				weight += max(recall.Weigh(count, &es[k].Message), recall.Weigh(tokens.Chars4{}, &es[k].Message))
			}
		}
		budget := min(weight+weight/10+16, schemas.MaxRecallMaxTokens)
		for k := u.Start + 1; k < u.End; k++ {
			e := &es[k]
			name, isResult := names[e.Message.ToolCallID]
			if e.Err != nil || e.Message.Role != schemas.RoleTool || !isResult || in.Keep[e.Seq] || (in.Old != nil && !in.Old(e.Seq)) {
				continue
			}
			o := schemas.Override{Seq: e.Seq, Note: Note(in.Conversation, e.Message.ToolCallID, name, first, last, budget)}
			masked := assemble.ApplyOverride(e.Message, o)
			if tokens.MessageWith(count, &masked) >= tokens.MessageWith(count, &e.Message) {
				continue // a short output: its placeholder would be no smaller
			}
			out = append(out, o)
		}
	}
	return out
}

// Note is the note of a masked tool output: what it was (the tool's name and the
// call's id, when they are short and plain) and the recall that returns its round,
// from the call's sequence first through its last result's, last, within maxTokens.
func Note(conv, callID, tool string, first, last uint64, maxTokens int) string {
	what := "tool output"
	if label(tool) {
		what += " of " + tool
	}
	if label(callID) {
		what += " (call " + callID + ")"
	}
	return fmt.Sprintf("%s masked; recall it with compactor recall %s --from-seq %d --to-seq %d --max-tokens %d, "+
		"or %s (the recall tool) with from_seq %d, to_seq %d, max_tokens %d",
		what, conv, first, last, maxTokens, schemas.RecallSubject, first, last, maxTokens)
}

// label reports whether s may be repeated in a note: short, and only letters, digits
// and _ . : - (a name or id with anything else is left out, never quoted).
func label(s string) bool {
	if s == "" || len(s) > maxLabel {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == ':' || r == '-') {
			return false
		}
	}
	return true
}
