package proxy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// The memo's chain is always Chain(msgs): the same history again, one that goes on,
// and histories changed anywhere in any field Canonical reads (content, a text block
// for a string, a tool call's arguments, a role) or cut short.
func TestChainMemoIsTheChain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	msg := func(i int) schemas.Message {
		switch i % 3 {
		case 0:
			return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("question %d", i))}
		case 1:
			return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: fmt.Sprintf("c%d", i), Type: "function",
				Function: schemas.FunctionCall{Name: "run", Arguments: fmt.Sprintf(`{"n":%d}`, i)}}}}
		}
		return schemas.Message{Role: schemas.RoleTool, ToolCallID: fmt.Sprintf("c%d", i-1), Content: schemas.Text(fmt.Sprintf("output %d", i))}
	}
	edits := []func(m *schemas.Message){
		func(m *schemas.Message) { m.Content = schemas.Text(m.Content.String() + "!") },
		func(m *schemas.Message) {
			m.Content = schemas.Parts([]byte(`{"type":"text","text":"` + m.Content.String() + `"}`)) // the same canonical form
		},
		func(m *schemas.Message) {
			if len(m.ToolCalls) > 0 {
				m.ToolCalls = slices.Clone(m.ToolCalls)
				m.ToolCalls[0].Function.Arguments = `{"n": -1}`
			}
		},
		func(m *schemas.Message) { m.Name = "someone" },
		func(m *schemas.Message) { m.Reasoning = "not canonical, but estimated" },
		func(m *schemas.Message) { m.Tokens = 5000 },
	}
	memo := newChainMemo(1 << 20)
	var h []schemas.Message
	for turn := range 200 {
		h = append(slices.Clone(h), msg(len(h)), msg(len(h)+1))
		next := slices.Clone(h)
		switch rng.IntN(4) {
		case 0:
			edits[rng.IntN(len(edits))](&next[rng.IntN(len(next))])
		case 1:
			next = next[:rng.IntN(len(next))+1]
		}
		got, want := memo.view("c", next), Chain(next)
		if !slices.Equal(got.chain, want) {
			t.Fatalf("turn %d: the memo's chain differs from Chain", turn)
		}
		if got.total() != tokens.Messages(next) {
			t.Fatalf("turn %d: the memo's estimate is %d; tokens.Messages says %d", turn, got.total(), tokens.Messages(next))
		}
		if ext := got.extend(append(next, msg(len(next)))); !slices.Equal(ext.chain, Chain(append(next, msg(len(next))))) {
			t.Fatalf("turn %d: the extended chain differs from Chain", turn)
		}
		memo.remember("c", next, got)
		if convs, bytes := memo.size(); convs != 1 || bytes > 1<<20 {
			t.Fatalf("turn %d: the memo holds %d conversations, %d bytes", turn, convs, bytes)
		}
	}
	// Bounded: a history over the limit is not kept, others are dropped to make room.
	small := newChainMemo(2000)
	for c := range 50 {
		conv := fmt.Sprintf("c%d", c)
		small.remember(conv, h[:10], viewOf(nil, h[:10]))
		if _, bytes := small.size(); bytes > 2000 {
			t.Fatalf("the memo holds %d bytes over its limit of 2000", bytes)
		}
	}
	small.remember("big", h, viewOf(nil, h))
	if convs, _ := small.size(); convs == 0 || convs >= 50 {
		t.Fatalf("the bounded memo holds %d conversations", convs)
	}
}
