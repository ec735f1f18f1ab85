// Package split chooses where a compaction cuts a conversation: everything before the
// split is summarized (pinned messages, and messages a strategy keeps ahead of the
// summary, excepted), everything from it on stays verbatim. Strategies (Apply) are pure
// functions over entries; a split never lands inside a tool round.
package split

import (
	"slices"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// Strategy names.
const (
	KeepLastN = "keep-last-n"
)

// Params are a strategy's knobs.
type Params struct {
	// KeepLastN is how many messages keep-last-n keeps at most.
	KeepLastN int
	// TailBudget is how many tokens the tail may use at most.
	TailBudget int
}

// LastN returns the index where the verbatim tail starts: the last n messages that fit
// the tail budget, taken in whole units (a tool round with all its results, or a single
// message), newest first. A round still waiting for results at the end always stays in
// the tail, whatever its size: its results would otherwise arrive without their call.
// Pinned entries count like any other here; Apply(StrategyKeepLastN) leaves them out of
// the tail's tokens, as TailBudget has counted them already.
func LastN(es []schemas.Entry, p Params) int {
	return newView(es, nil, p.TailBudget, nil).lastN(p.KeepLastN)
}

// Pinned marks the entries that stay verbatim forever: those the producer pinned
// (meta.pin = "true") and the leading system prompt (the system messages es starts
// with, when leading says es starts at the conversation's first message). A pin on any
// message of a tool round pins the whole round, so the round can be shown whole.
func Pinned(es []schemas.Entry, leading bool) []bool {
	return PinnedWith(es, leading, nil)
}

// PinnedWith is Pinned with the messages pinned after they were published too: those
// whose sequence is in seqs (the conversation's pins policy key), their tool round
// with them, as a meta.pin on the message would.
func PinnedWith(es []schemas.Entry, leading bool, seqs []uint64) []bool {
	pinned := make([]bool, len(es))
	for i := 0; leading && i < len(es); i++ {
		if es[i].Err != nil || es[i].Message.Role != schemas.RoleSystem {
			break
		}
		pinned[i] = true
	}
	for _, u := range rounds.Units(es) {
		any := false
		for i := u.Start; i < u.End; i++ {
			any = any || (es[i].Err == nil && (es[i].Message.Pinned() || slices.Contains(seqs, es[i].Seq)))
		}
		if !any {
			continue
		}
		if u.Kind != rounds.Round {
			pinned[u.Start] = true
			continue
		}
		for i := u.Start; i < u.End; i++ {
			pinned[i] = true
		}
	}
	return pinned
}
