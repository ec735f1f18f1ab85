// Package rounds finds tool-round boundaries in a conversation.
//
// A tool round is an assistant message that calls tools plus the tool messages that
// answer those calls. Rounds are never split: compaction may only cut a conversation at
// the start of a unit, and readers never show a tool call without all its results or a
// result without its call.
package rounds

import (
	"fmt"
	"slices"

	"github.com/compactor/compactor/schemas"
)

// Kind says what a unit is.
type Kind int

const (
	// Single is one message outside any tool round.
	Single Kind = iota
	// Round is an assistant message with tool calls, its results and any message that
	// landed between them.
	Round
	// Orphan is a tool message that answers no open call.
	Orphan
	// Invalid is an entry that failed to decode or validate.
	Invalid
)

func (k Kind) String() string {
	switch k {
	case Single:
		return "single"
	case Round:
		return "round"
	case Orphan:
		return "orphan"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Unit is the half-open span es[Start:End] of entries that move together.
type Unit struct {
	Start, End int
	Kind       Kind
	// Complete is false for a round some of whose calls have no result (yet). A round
	// is closed early, incomplete, when another assistant message arrives before all
	// its results did.
	Complete bool
	// Pending lists the call ids still unanswered in an incomplete round.
	Pending []string
}

// Units splits es into units, in order. Every entry belongs to exactly one unit.
func Units(es []schemas.Entry) []Unit {
	var out []Unit
	for i := 0; i < len(es); {
		e := &es[i]
		switch {
		case e.Err != nil:
			out = append(out, Unit{Start: i, End: i + 1, Kind: Invalid, Complete: true})
			i++
		case e.Message.Role == schemas.RoleTool:
			out = append(out, Unit{Start: i, End: i + 1, Kind: Orphan, Complete: true})
			i++
		case e.Message.HasToolCalls():
			u := scanRound(es, i)
			out = append(out, u)
			i = u.End
		default:
			out = append(out, Unit{Start: i, End: i + 1, Kind: Single, Complete: true})
			i++
		}
	}
	return out
}

// scanRound reads the round that starts at es[start].
func scanRound(es []schemas.Entry, start int) Unit {
	pending := make(map[string]bool, len(es[start].Message.ToolCalls))
	for _, tc := range es[start].Message.ToolCalls {
		pending[tc.ID] = true
	}
	j := start + 1
	for ; j < len(es) && len(pending) > 0; j++ {
		e := &es[j]
		if e.Err != nil {
			continue
		}
		m := &e.Message
		if m.Role == schemas.RoleAssistant {
			break // the agent moved on: the round stays incomplete
		}
		if m.Role == schemas.RoleTool && pending[m.ToolCallID] {
			delete(pending, m.ToolCallID)
		}
	}
	u := Unit{Start: start, End: j, Kind: Round, Complete: len(pending) == 0}
	if !u.Complete {
		// Keep the calls' order for a stable report.
		for _, tc := range es[start].Message.ToolCalls {
			if pending[tc.ID] {
				u.Pending = append(u.Pending, tc.ID)
			}
		}
	}
	return u
}

// Pending returns the unanswered call ids of the newest round when the conversation
// ends inside it: while they are open, nothing may be queued for compaction.
func Pending(es []schemas.Entry) []string {
	us := Units(es)
	if len(us) == 0 {
		return nil
	}
	last := us[len(us)-1]
	if last.Kind == Round && !last.Complete && last.End == len(es) {
		return last.Pending
	}
	return nil
}

// IsBoundary reports whether a split at index k (the tail starts at es[k]) lands
// between units. 0 and len(es) are always boundaries.
func IsBoundary(es []schemas.Entry, k int) bool {
	if k <= 0 || k >= len(es) {
		return true
	}
	for _, u := range Units(es) {
		if u.Start == k {
			return true
		}
		if u.Start > k {
			return false
		}
	}
	return false
}

// SnapForward returns the smallest unit boundary ≥ k: the split moves later (the tail
// gets shorter), never into a round.
func SnapForward(es []schemas.Entry, k int) int {
	if k <= 0 {
		return 0
	}
	for _, u := range Units(es) {
		if u.Start >= k {
			return u.Start
		}
	}
	return len(es)
}

// SnapBack returns the largest unit boundary ≤ k: the split moves earlier (the tail
// gets longer), never into a round.
func SnapBack(es []schemas.Entry, k int) int {
	if k >= len(es) {
		return len(es)
	}
	best := 0
	for _, u := range Units(es) {
		if u.Start > k {
			break
		}
		best = u.Start
	}
	return best
}

// Skipped names an entry a reader left out and why.
type Skipped struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// Normalize returns the entries a model may be sent, in order: invalid entries, orphan
// tool results and incomplete rounds are left out and reported; a message that landed
// between an assistant's tool calls and their results is moved to just after the round.
func Normalize(es []schemas.Entry) (kept []schemas.Entry, skipped []Skipped) {
	kept = make([]schemas.Entry, 0, len(es))
	for _, u := range Units(es) {
		switch u.Kind {
		case Invalid:
			skipped = append(skipped, Skipped{Seq: es[u.Start].Seq, Reason: "invalid message: " + es[u.Start].Err.Error()})
		case Orphan:
			skipped = append(skipped, Skipped{Seq: es[u.Start].Seq,
				Reason: fmt.Sprintf("tool result %q answers no open tool call", es[u.Start].Message.ToolCallID)})
		case Single:
			kept = append(kept, es[u.Start])
		case Round:
			if !u.Complete {
				for k := u.Start; k < u.End; k++ {
					e := &es[k]
					if k == u.Start {
						skipped = append(skipped, Skipped{Seq: e.Seq,
							Reason: fmt.Sprintf("tool round incomplete: no result yet for %v", u.Pending)})
						continue
					}
					if e.Err == nil && e.Message.Role != schemas.RoleTool {
						kept = append(kept, *e) // an interleaved message stays
						continue
					}
					reason := "part of an incomplete tool round"
					if e.Err != nil {
						reason = "invalid message: " + e.Err.Error()
					}
					skipped = append(skipped, Skipped{Seq: e.Seq, Reason: reason})
				}
				continue
			}
			calls := map[string]bool{}
			for _, tc := range es[u.Start].Message.ToolCalls {
				calls[tc.ID] = true
			}
			kept = append(kept, es[u.Start])
			var after []schemas.Entry
			for k := u.Start + 1; k < u.End; k++ {
				e := &es[k]
				switch {
				case e.Err != nil:
					skipped = append(skipped, Skipped{Seq: e.Seq, Reason: "invalid message: " + e.Err.Error()})
				case e.Message.Role == schemas.RoleTool && calls[e.Message.ToolCallID]:
					delete(calls, e.Message.ToolCallID)
					kept = append(kept, *e)
				case e.Message.Role == schemas.RoleTool:
					skipped = append(skipped, Skipped{Seq: e.Seq,
						Reason: fmt.Sprintf("tool result %q answers no open tool call", e.Message.ToolCallID)})
				default:
					after = append(after, *e)
				}
			}
			kept = append(kept, after...)
		}
	}
	return kept, skipped
}

// CheckPairs checks invariant 1 on a context about to be sent to a model: every tool
// message follows the assistant message that called it, every call has its result, and
// a round's results come right after its calls (parallel calls together).
func CheckPairs(msgs []schemas.Message) error {
	open := map[string]bool{}
	var openAt int
	for i := range msgs {
		m := &msgs[i]
		if len(open) > 0 {
			if m.Role != schemas.RoleTool || !open[m.ToolCallID] {
				return fmt.Errorf("message %d (%s %q) comes before the results of %v called at %d", i, m.Role, m.ToolCallID, keys(open), openAt)
			}
			delete(open, m.ToolCallID)
			continue
		}
		switch {
		case m.Role == schemas.RoleTool:
			return fmt.Errorf("message %d: tool result %q without its call", i, m.ToolCallID)
		case len(m.ToolCalls) > 0 && m.Role != schemas.RoleAssistant:
			return fmt.Errorf("message %d: %s message with tool calls", i, m.Role)
		case m.HasToolCalls():
			for _, tc := range m.ToolCalls {
				open[tc.ID] = true
			}
			openAt = i
		}
	}
	if len(open) > 0 {
		return fmt.Errorf("calls %v at message %d have no result", keys(open), openAt)
	}
	return nil
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
