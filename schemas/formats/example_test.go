package formats_test

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

func ExampleRender() {
	in := assemble.Input{
		Value: &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1, TailStartSeq: 9,
			PinnedSeqs: []uint64{1}, Summary: "Tests fixed in pkg/a."},
		Pinned: []schemas.Entry{{Seq: 1, Message: schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")}}},
		Tail: []schemas.Entry{
			{Seq: 9, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
				{ID: "call_1", Type: "function", Function: schemas.FunctionCall{Name: "go_test", Arguments: `{"pkg":"./b"}`}}}}},
			{Seq: 10, Message: schemas.Message{Role: schemas.RoleTool, ToolCallID: "call_1", Content: schemas.Text("ok")}},
		},
	}
	cx := assemble.Assemble(in, assemble.Options{})
	req, err := formats.Render(&cx, formats.Anthropic)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(req.JSON))
	// The prefix (system prompt + summary) stays byte-identical until the next compaction.
	fmt.Println(req.Prefix > 0, len(req.JSON) > req.Prefix)
	// Output:
	// {"system":[{"type":"text","text":"You are a coding agent."}],"messages":[{"role":"user","content":[{"type":"text","text":"[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\nTests fixed in pkg/a.","cache_control":{"type":"ephemeral"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"go_test","input":{"pkg":"./b"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"ok"}]}]}
	// true true
}
