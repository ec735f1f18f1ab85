package bench

import (
	"bytes"
	"testing"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/schemas"
)

// Each wire's fake upstream answers with the turn's message as that API would, and the
// wire reads it back as the same message (its canonical form): the proxy stores the
// reply the agent's next history carries, and each message is stored once.
func TestBenchWiresAnswerTheMessage(t *testing.T) {
	all := wires.All()
	replies := []schemas.Message{
		{Role: schemas.RoleAssistant, Content: schemas.Text("just text")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("let me look"), ToolCalls: []schemas.ToolCall{
			{ID: "call_1", Type: "function", Function: schemas.FunctionCall{Name: "run", Arguments: `{"cmd":"ls -la","n":2}`}}}},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			{ID: "call_2", Type: "function", Function: schemas.FunctionCall{Name: "read", Arguments: `{"path":"a.go"}`}},
			{ID: "call_3", Type: "function", Function: schemas.FunctionCall{Name: "read", Arguments: `{"path":"b.go"}`}}}},
	}
	for _, bw := range benchWires {
		w, ok := all[bw.name]
		if !ok {
			t.Fatalf("no wire %s", bw.name)
		}
		for i, m := range replies {
			body, err := bw.answer(m, 100, 40)
			if err != nil {
				t.Fatalf("%s reply %d: %v", bw.name, i, err)
			}
			got, usage, err := w.Reply(body)
			if err != nil {
				t.Fatalf("%s reply %d: %v\n%s", bw.name, i, err, body)
			}
			// Gemini names tool calls by their place: compare what it keeps.
			want := m
			if bw.name == "gemini" {
				for j := range want.ToolCalls {
					want.ToolCalls[j].ID = got.ToolCalls[j].ID
				}
			}
			if !bytes.Equal(proxy.Canonical(&got), proxy.Canonical(&want)) {
				t.Fatalf("%s reply %d read back as %+v; want %+v", bw.name, i, got, want)
			}
			if usage == nil || usage.Input != 100 || usage.CacheRead != 40 {
				t.Fatalf("%s reply %d: usage %+v; want 100 in, 40 cached", bw.name, i, usage)
			}
		}
	}
}
