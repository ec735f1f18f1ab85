package split

import (
	"errors"
	"reflect"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/rounds"
)

// fuzzSplitInput turns a conversation and the bits of shape into a strategy's input:
// the leading system prompt pinned or not (bit 0), a window of 1,000 to 132,071 tokens
// (bits 1–17), a summary cap (bits 18–25, 0: scaled with the window), knobs (bits
// 26–55) and a carried count (bits 56–61, snapped to a unit boundary before the open
// round unless bit 62 says to take it as it is).
func fuzzSplitInput(es []schemas.Entry, shape uint64) Input {
	bits := func(from, n int) int { return int(shape >> from & (1<<n - 1)) }
	k := Knobs{
		KeepLastN:         1 + bits(26, 5),
		ToolRounds:        1 + bits(31, 2),
		UserMessageTokens: bits(33, 6) * 64,
		TokenFraction:     float64(1+bits(39, 6)) / 66,
		RecentTurns:       1 + bits(45, 2),
		RecentTurnsShare:  float64(1+bits(47, 3)) / 8,
		RecentTurnsMin:    bits(50, 3) * 256,
	}
	k.RecentTurnsMax = k.RecentTurnsMin + bits(53, 3)*512
	in := Input{Entries: es, Pinned: Pinned(es, bits(0, 1) == 1), Knobs: k,
		Budget: budget.Budget{ContextWindow: 1000 + bits(1, 17), Threshold: 0.75, Target: 0.5, HardLimit: 0.95,
			MaxSummaryTokens: bits(18, 8) * 8}}
	in.Carried = bits(56, 6) % (len(es) + 1)
	if bits(62, 1) == 0 {
		in.Carried = min(rounds.SnapBack(es, in.Carried), openRound(es))
	}
	return in
}

// openRound is where a round still waiting for results at the end starts, len(es)
// when there is none.
func openRound(es []schemas.Entry) int {
	if len(rounds.Pending(es)) > 0 {
		us := rounds.Units(es)
		return us[len(us)-1].Start
	}
	return len(es)
}

// FuzzApply runs every strategy on fuzzed conversations, budgets and knobs. Oracles
// (verify, the checks of the strategy and corpus tests): the tail starts at a unit
// boundary, never after the round waiting for results and never among the carried
// entries; every entry is exactly one of pinned, kept, tail or summarized, kept ones
// valid, unpinned and in order, each override for a kept message; the tail and kept
// messages fit the tail budget unless the open round alone is over it; the context a
// reader assembles from the split has whole tool pairs and loses no user message.
// Apply is deterministic, leaves its input alone, never panics, and refuses a carried
// count that ends inside a round or after the open round with ErrInvalidInput. Pinned
// pins a tool round whole.
func FuzzApply(f *testing.F) {
	f.Add([]byte{2, 9, 0, 40, 3, 1, 4, 0, 30, 4, 1, 20, 1, 9, 0, 60, 3, 2, 4, 1, 10, 4, 0, 10}, []byte(nil), uint64(1)|uint64(3000)<<1)
	f.Add([]byte{0, 200, 1, 100, 0, 250, 3, 5, 4, 1, 90, 0, 8, 1, 7}, []byte(nil), uint64(200)<<1|uint64(2)<<56)
	f.Add([]byte{5, 5, 5, 5, 5, 5}, []byte(`{"role":"system","content":"be brief"}
{"role":"user","content":"fix it"}
{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"ls","arguments":"{}"}}]}
{"role":"user","content":"hurry"}
{"role":"tool","tool_call_id":"t1","content":"a.go b.go"}
{"role":"assistant","content":"done"}`), uint64(1)|uint64(1000)<<1|uint64(1)<<26)
	f.Fuzz(func(t *testing.T, ops, jsonl []byte, shape uint64) {
		in := fuzzSplitInput(corpustest.FuzzEntries(ops, jsonl), shape)
		es := in.Entries
		for _, u := range rounds.Units(es) {
			for i := u.Start; u.Kind == rounds.Round && i < u.End; i++ {
				if in.Pinned[i] != in.Pinned[u.Start] {
					t.Fatalf("Pinned %v pins part of the round %d-%d", in.Pinned, u.Start, u.End)
				}
			}
		}
		open := openRound(es)
		carriedOK := in.Carried <= open && rounds.IsBoundary(es, in.Carried)
		for _, strategy := range Strategies {
			got, err := Apply(strategy, in)
			if !carriedOK {
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("%s: carried %d of %d entries (open round at %d): error %v; want ErrInvalidInput", strategy, in.Carried, len(es), open, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", strategy, err)
			}
			if got.TailStart < in.Carried || got.TailStart > open {
				t.Fatalf("%s: tail start %d outside [carried %d, open round %d]", strategy, got.TailStart, in.Carried, open)
			}
			if err := verify(in, got); err != nil {
				t.Fatalf("%s, W=%d, tail budget %d, %d entries, carried %d: split at %d keeping %v: %v",
					strategy, in.Budget.ContextWindow, in.TailBudget(), len(es), in.Carried, got.TailStart, got.Keep, err)
			}
			if again, _ := Apply(strategy, in); !reflect.DeepEqual(again, got) {
				t.Fatalf("%s: got %+v, then %+v; want the same split twice", strategy, got, again)
			}
		}
		if again := fuzzSplitInput(corpustest.FuzzEntries(ops, jsonl), shape); !reflect.DeepEqual(again, in) {
			t.Fatalf("Apply changed its input")
		}
	})
}
