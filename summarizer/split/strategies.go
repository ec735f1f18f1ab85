package split

import (
	"slices"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/tokens"
)

// Each strategy below answers for the conversation of its view. They share the rules of
// Apply: the tail starts at a unit boundary, the round still waiting for results at the
// end always stays (v.open), pinned and invalid entries cost nothing and are never kept,
// and the tail plus the kept messages stay within v.budget unless that round alone is
// over it.

// lastN is keep-last-n (FabrCore). Choose it for chat-like conversations where recency
// is all that matters and messages are of similar size. It keeps the last n messages
// that fit the budget, taken newest first in whole units (a tool round with all its
// results, or a single message), and summarizes everything before them.
func (v *view) lastN(n int) int { return v.fit(len(v.es)-n, v.budget, anyUnit) }

// toolRounds is tool-rounds (AgentSmith). Choose it for tool-driven agent loops, where
// the last few actions and their results are what the agent needs verbatim. It keeps
// the last k rounds (a complete tool round with all its results, or a bare assistant
// reply) and everything after the oldest of them; when they do not fit the budget it
// keeps fewer, newest first, never part of one. The tail always starts at a round, so
// what precedes the oldest kept round (the user's request included) is summarized, and
// when not even the newest round fits, everything but the open round is.
func (v *view) toolRounds(k int) int { return v.fit(v.nth(k, v.isRound), v.budget, v.isRound) }

// truncatedNote is the note a user-messages truncation leaves in the message.
const truncatedNote = "user message kept truncated by compaction; the full text is in the history"

// minKeptChars is the least text a truncated user message keeps; with less room left it
// is summarized instead.
const minKeptChars = 100

// userMessages is user-messages (Codex CLI). Choose it when the user's own words (the
// task, corrections, constraints) matter more than the agent's steps, as in coding
// agents. It keeps real user messages (valid, role user, not pinned) newest first up to
// limit tokens, never over the budget; the first one that does not fit is kept with its
// head and tail only (an Override with a note) when at least minKeptChars of it fit,
// and every older one is summarized. Every agent item (assistant, tool, system not
// pinned) is summarized. There is no tail, except the round still waiting for results at
// the end. Readers show the kept messages ahead of the summary.
func (v *view) userMessages(limit int) Split {
	s := Split{TailStart: v.open}
	left := min(limit, v.budget-v.forced())
	for i := v.open - 1; i >= 0 && left > 0; i-- {
		if !v.isUserMessage(i) {
			continue
		}
		if c := v.cost(i); c <= left {
			s.Keep = append(s.Keep, i)
			left -= c
			continue
		}
		if o, ok := truncateToFit(&v.es[i], left, v.count); ok {
			s.Keep = append(s.Keep, i)
			s.Overrides = append(s.Overrides, o)
		}
		break
	}
	slices.Reverse(s.Keep)
	return s
}

// truncateToFit returns the override that keeps the head and tail of e's text so that
// the message, as a reader shows it (assemble.ApplyOverride), takes at most left tokens;
// false when fewer than minKeptChars characters of text would remain.
func truncateToFit(e *schemas.Entry, left int, count tokens.Counter) (schemas.Override, bool) {
	o := schemas.Override{Seq: e.Seq, Note: truncatedNote}
	stub := assemble.ApplyOverride(e.Message, o) // the marker alone, nothing kept
	keep := 4 * (left - tokens.MessageWith(count, &stub))
	keep = min(keep, utf8.RuneCountInString(e.Message.Content.String())-1)
	if keep < minKeptChars {
		return o, false
	}
	o.KeepHead, o.KeepTail = keep/2, keep-keep/2
	cut := assemble.ApplyOverride(e.Message, o)
	return o, tokens.MessageWith(count, &cut) <= left
}

// tokenFraction is token-fraction (Gemini CLI). Choose it for long conversations of
// many user turns, when the tail should scale with the history: it keeps about the
// newest fraction f of the tokens (of the entries neither pinned nor invalid), split
// only just before a user message: the tail starts at the user message with the largest
// suffix within both f of the tokens and the budget. When no user message starts such
// a suffix (one turn larger than the fraction, or no user message at all), it falls back
// to the unit boundary with the largest suffix that fits.
func (v *view) tokenFraction(f float64) int {
	limit := min(int(f*float64(v.suffix[0])), v.budget)
	if k := v.fit(0, limit, v.startsTurn); k != v.open {
		return k
	}
	return v.fit(0, limit, anyUnit)
}

// recentTurns is recent-turns (OpenCode). Choose it for interactive sessions where the
// last exchanges with the user matter as a whole. It keeps the last n turns (a turn is a
// user message and everything after it up to the next user message; fewer when the
// conversation has fewer, none when it has no user message) within limit tokens (see
// recentTurnsLimit); a turn that does not fit entirely is cut at a unit boundary inside
// it, keeping its newest units, and older turns are summarized.
func (v *view) recentTurns(n, limit int) int {
	return v.fit(v.nth(n, v.startsTurn), limit, anyUnit)
}

// recentTurnsLimit is what recent-turns may keep: RecentTurnsShare of the usable
// context, clamped to [RecentTurnsMin, RecentTurnsMax] and never over the tail budget.
// The usable context is W − SummaryCap: OpenCode takes the window minus the room it
// reserves for the model's output, and the output of a compaction is the summary.
func recentTurnsLimit(b budget.Budget, k Knobs, tailBudget int) int {
	usable := b.ContextWindow - b.SummaryCap()
	share := int(k.RecentTurnsShare * float64(usable))
	return min(max(share, k.RecentTurnsMin), k.RecentTurnsMax, tailBudget)
}

// all is all (Crabtalk). Choose it when the summary should carry the whole history,
// as at the end of a task or before a hand-off: everything is summarized, except the
// round still waiting for results at the end.
func (v *view) all() int { return v.open }
