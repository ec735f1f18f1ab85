// Package split chooses where a compaction cuts a conversation: everything before the
// split is summarized (pinned messages excepted), everything from it on stays verbatim.
// Strategies are pure functions over entries; a split never lands inside a tool round.
package split

import (
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
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
func LastN(es []schemas.Entry, p Params) int {
	us := rounds.Units(es)
	k := len(es)
	count, tok := 0, 0
	for i := len(us) - 1; i >= 0; i-- {
		u := us[i]
		size := u.End - u.Start
		t := tokens.Entries(es[u.Start:u.End])
		open := u.Kind == rounds.Round && !u.Complete && u.End == len(es)
		if !open && (count+size > p.KeepLastN || tok+t > p.TailBudget) {
			break
		}
		count += size
		tok += t
		k = u.Start
	}
	return k
}

// Pinned reports whether es[i] stays verbatim forever: the producer pinned it, or it is
// part of the leading system prompt (leading tells whether es starts at the very first
// message of the conversation).
func Pinned(es []schemas.Entry, i int, leading bool) bool {
	e := &es[i]
	if e.Err != nil {
		return false
	}
	if e.Message.Pinned() {
		return true
	}
	if !leading || e.Message.Role != schemas.RoleSystem {
		return false
	}
	for j := 0; j < i; j++ {
		if es[j].Err != nil || es[j].Message.Role != schemas.RoleSystem {
			return false
		}
	}
	return true
}
