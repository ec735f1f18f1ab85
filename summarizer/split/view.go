package split

import (
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// view is what every strategy reads, computed once per call: the units of the
// conversation, what a tail from each index costs, and the round that must stay.
type view struct {
	es     []schemas.Entry
	pinned []bool
	units  []rounds.Unit
	// suffix[k] is what a tail starting at es[k] costs: the tokens of es[k:], pinned and
	// invalid entries excluded (pinned ones are counted in the budget already). It has
	// len(es)+1 elements and never grows with k.
	suffix []int
	// open is where a round still waiting for results at the end starts (it always stays
	// in the tail, whatever its size), or len(es) when there is none; openUnit is its
	// index in units (len(units) when there is none).
	open, openUnit int
	// budget is what the tail and the kept messages may use together.
	budget int
	// count counts tokens (nil: chars/4).
	count tokens.Counter
}

func newView(es []schemas.Entry, pinned []bool, budget int, count tokens.Counter) *view {
	v := &view{es: es, pinned: pinned, units: rounds.Units(es), suffix: make([]int, len(es)+1), budget: budget, count: count}
	v.open, v.openUnit = len(es), len(v.units)
	if n := len(v.units); n > 0 {
		// The last unit ends at len(es); an incomplete round there still waits for results.
		if u := v.units[n-1]; u.Kind == rounds.Round && !u.Complete {
			v.open, v.openUnit = u.Start, n-1
		}
	}
	for i := len(es) - 1; i >= 0; i-- {
		v.suffix[i] = v.suffix[i+1]
		if es[i].Err == nil && !v.isPinned(i) {
			v.suffix[i] += messageTokens(count, &es[i])
		}
	}
	return v
}

func (v *view) isPinned(i int) bool { return i < len(v.pinned) && v.pinned[i] }

// cost is what entry i adds to the tail or to the kept messages.
func (v *view) cost(i int) int { return v.suffix[i] - v.suffix[i+1] }

// forced is what the round that must stay costs (0 when there is none).
func (v *view) forced() int { return v.suffix[v.open] }

// fit returns the earliest tail start that keeps whole units newest first: the smallest
// start k ≥ lo of a unit accepted by ok, with the tail from k within limit tokens. The
// open round at the end stays whatever limit says, so v.open is the answer when no unit
// fits.
func (v *view) fit(lo, limit int, ok func(rounds.Unit) bool) int {
	best := v.open
	for i := v.openUnit - 1; i >= 0; i-- {
		u := v.units[i]
		if u.Start < lo || v.suffix[u.Start] > limit {
			break
		}
		if ok(u) {
			best = u.Start
		}
	}
	return best
}

// nth returns the start of the n-th newest unit accepted by ok before the open round,
// the oldest one when there are fewer, and v.open when there is none.
func (v *view) nth(n int, ok func(rounds.Unit) bool) int {
	start := v.open
	for i := v.openUnit - 1; i >= 0 && n > 0; i-- {
		if ok(v.units[i]) {
			start = v.units[i].Start
			n--
		}
	}
	return start
}

// anyUnit accepts every unit: any unit start is a valid tail start.
func anyUnit(rounds.Unit) bool { return true }

// isRound accepts a complete tool round or a bare assistant reply.
func (v *view) isRound(u rounds.Unit) bool {
	return (u.Kind == rounds.Round && u.Complete) ||
		(u.Kind == rounds.Single && v.es[u.Start].Message.Role == schemas.RoleAssistant)
}

// startsTurn accepts a user message outside any tool round: where a turn starts.
func (v *view) startsTurn(u rounds.Unit) bool {
	return u.Kind == rounds.Single && v.es[u.Start].Message.Role == schemas.RoleUser
}

// isUserMessage reports whether es[i] is a real user message a strategy may keep: valid,
// role user and not pinned (pinned messages are kept anyway).
func (v *view) isUserMessage(i int) bool {
	return v.es[i].Err == nil && !v.isPinned(i) && v.es[i].Message.Role == schemas.RoleUser
}
