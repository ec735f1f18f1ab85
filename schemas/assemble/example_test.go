package assemble_test

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

func ExampleAssemble() {
	value := &schemas.Result{
		SchemaVersion: 1, Conversation: "c1", Generation: 2, TailStartSeq: 5, PinnedSeqs: []uint64{1},
		Summary: "The user wants the tests fixed; pkg/a is done.",
	}
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "call_1", Type: "function", Function: schemas.FunctionCall{Name: "go_test", Arguments: `{"pkg":"./b"}`}},
	}}
	in := assemble.Input{
		Value:  value,
		Pinned: []schemas.Entry{{Seq: 1, Message: schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")}}},
		Tail: []schemas.Entry{
			{Seq: 5, Message: call},
			// The user spoke while the tool ran: the reader moves this after the round.
			{Seq: 6, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("also run vet")}},
			{Seq: 7, Message: schemas.Message{Role: schemas.RoleTool, ToolCallID: "call_1", Content: schemas.Text("ok")}},
		},
	}
	ctx := assemble.Assemble(in, assemble.Options{})
	for i, m := range ctx.Messages {
		text := m.Content.String()
		if len(text) > 30 {
			text = text[:30] + "..."
		}
		fmt.Printf("%d %-9s %q\n", ctx.Seqs[i], m.Role, text)
	}
	fmt.Println("generation", ctx.Generation, "tokens", ctx.Tokens, "degraded", ctx.Degraded)
	// Output:
	// 1 system    "You are a coding agent."
	// 0 user      "[Summary of the earlier conver..."
	// 5 assistant ""
	// 7 tool      "ok"
	// 6 user      "also run vet"
	// generation 2 tokens 77 degraded false
}
