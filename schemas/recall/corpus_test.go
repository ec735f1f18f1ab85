package recall_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

// units splits a recall's messages into its units: sequences grow inside a unit and
// fall from one unit to the next (older) one.
func units(ms []schemas.RecalledMessage) [][]schemas.RecalledMessage {
	var out [][]schemas.RecalledMessage
	for i, m := range ms {
		if i == 0 || m.Seq < ms[i-1].Seq {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], m)
	}
	return out
}

// On every real transcript, with queries taken from its own tool calls and results and
// budgets small and large: every unit is a whole tool round or a message outside one,
// units come newest first within the budget, each holds a match, and reading in windows
// (Carry) answers what one selection answers.
func TestCorpusRecall(t *testing.T) {
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			es := c.Entries
			queries := []string{""}
			for i := len(es) / 2; i < len(es) && len(queries) < 3; i++ {
				m := &es[i].Message
				if m.HasToolCalls() {
					queries = append(queries, m.ToolCalls[0].Function.Name)
				}
				if s := m.Content.String(); m.Role == schemas.RoleTool && len(s) >= 12 && len(queries) < 3 {
					queries = append(queries, strings.ToUpper(s[:12]))
				}
			}
			for _, q := range queries {
				for _, budget := range []int{300, 5000, 1_000_000} {
					o := recall.Options{Query: q, MaxTokens: budget}
					got := recall.Select(es, o)
					if got.Tokens > budget {
						t.Fatalf("query %q: %d tokens over the budget %d", q, got.Tokens, budget)
					}
					checkUnits(t, q, got)
					s := recall.NewSelector(o)
					var carry []schemas.Entry
					const window = 97
					for hi := len(es); hi > 0; hi -= window {
						chunk := append(append([]schemas.Entry{}, es[max(0, hi-window):hi]...), carry...)
						k := 0
						if hi > window {
							k = recall.Carry(chunk)
						}
						carry = chunk[:k]
						s.Add(chunk[k:])
					}
					if w := s.Result(); !reflect.DeepEqual(seqs(w), seqs(got)) || w.Matched != got.Matched {
						t.Fatalf("query %q budget %d: windows recalled %d messages (matched %d); one selection %d (%d)",
							q, budget, w.Returned, w.Matched, got.Returned, got.Matched)
					}
				}
			}
		})
	}
}

func checkUnits(t *testing.T, q string, r schemas.RecallResponse) {
	t.Helper()
	prev := ^uint64(0)
	for _, u := range units(r.Messages) {
		if u[0].Seq >= prev {
			t.Fatalf("query %q: unit at %d after the unit at %d; want newest first", q, u[0].Seq, prev)
		}
		prev = u[0].Seq
		calls := map[string]bool{}
		if first := u[0].Message; first.HasToolCalls() {
			for _, tc := range first.ToolCalls {
				calls[tc.ID] = true
			}
		}
		match := false
		for _, m := range u {
			match = match || recall.Matches(&m.Message, q)
			if m.Message.Role == schemas.RoleTool {
				if !calls[m.Message.ToolCallID] {
					t.Fatalf("query %q: tool result %d (%q) without its call in its unit", q, m.Seq, m.Message.ToolCallID)
				}
				delete(calls, m.Message.ToolCallID)
			}
		}
		if len(calls) > 0 {
			t.Fatalf("query %q: the round at %d misses results for %v", q, u[0].Seq, calls)
		}
		if !match {
			t.Fatalf("query %q: the unit at %d holds no match", q, u[0].Seq)
		}
	}
}
