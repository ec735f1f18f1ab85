package pretrim

import (
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// MinKeep is how many characters of head, and as many of tail, TotalBudget keeps of a
// tool output at the least.
const MinKeep = 200

// Note is the note the cut marker carries, after the number of characters cut.
const Note = "tool output pre-trimmed before summarizing"

// markerRoom is the room, in characters, kept for the cut marker when a cut must fit a
// budget.
const markerRoom = 96

// ToolOutputs returns a copy of msgs in which the text of every tool message estimated
// over capTokens tokens is cut to its first and last characters, capTokens*4 characters
// in all (half head, half tail), with a marker between them that states how many
// characters were cut. The marker itself is a few tokens on top of the cap. Non-text
// parts of an array content are kept. Other messages are returned as they are, and
// capTokens <= 0 means no cap.
//
// The returned slice is new and msgs is not changed; messages that were not cut share
// their tool calls, extra and meta with the input.
func ToolOutputs(msgs []schemas.Message, capTokens int) []schemas.Message {
	out := clone(msgs)
	if capTokens <= 0 {
		return out
	}
	for i := range out {
		m := &out[i]
		if m.Role != schemas.RoleTool {
			continue
		}
		if tokens.Text(m.Content.String()) <= capTokens {
			continue
		}
		*m = cut(*m, capTokens*4)
	}
	return out
}

// TotalBudget returns a copy of msgs in which tool outputs use at most budgetTokens
// tokens in all. It walks from the newest message to the oldest: outputs are kept whole
// while they fit, the first one that does not fit is cut to what is left, and older ones
// are cut further, down to MinKeep characters of head and MinKeep of tail (outputs no
// longer than that are never cut). Each output keeps room for that minimum of every
// older one, so the budget holds whenever it can: only when the minimums and markers
// alone are over it, and then by no more than they are. User, system and assistant
// messages are never touched; budgetTokens <= 0 means no budget.
//
// The returned slice is new and msgs is not changed.
func TotalBudget(msgs []schemas.Message, budgetTokens int) []schemas.Message {
	out := clone(msgs)
	if budgetTokens <= 0 {
		return out
	}
	// older[i] is what the tool outputs before index i cost at the least.
	older := make([]int, len(out)+1)
	for i := range out {
		older[i+1] = older[i]
		if out[i].Role == schemas.RoleTool {
			older[i+1] += tokens.Text(cut(out[i], 2*MinKeep).Content.String())
		}
	}
	left := budgetTokens
	for i := len(out) - 1; i >= 0; i-- {
		m := &out[i]
		if m.Role != schemas.RoleTool {
			continue
		}
		room := left - older[i]
		if t := tokens.Text(m.Content.String()); t <= room {
			left -= t
			continue
		}
		keep := room*4 - markerRoom
		if keep < 2*MinKeep {
			keep = 2 * MinKeep
		}
		*m = cut(*m, keep)
		left -= tokens.Text(m.Content.String())
	}
	return out
}

// cut keeps keep characters of m's text, half head and half tail. It leaves m as it is
// when its text is no longer than keep.
func cut(m schemas.Message, keep int) schemas.Message {
	if utf8.RuneCountInString(m.Content.String()) <= keep {
		return m
	}
	head := keep / 2
	return assemble.ApplyOverride(m, schemas.Override{KeepHead: head, KeepTail: keep - head, Note: Note})
}

func clone(msgs []schemas.Message) []schemas.Message {
	if msgs == nil {
		return nil
	}
	return append([]schemas.Message(nil), msgs...)
}
