package recall_test

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

func ExampleSelect() {
	text := func(seq uint64, role schemas.Role, s string) schemas.Entry {
		return schemas.Entry{Seq: seq, Message: schemas.Message{Role: role, Content: schemas.Text(s)}}
	}
	es := []schemas.Entry{
		text(3, schemas.RoleUser, "Open db.yaml"),
		{Seq: 7, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "read_file", Arguments: `{"path":"db.yaml"}`}}}}},
		{Seq: 9, Message: schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text("port: 6432")}},
		text(12, schemas.RoleAssistant, "The port is 6432."),
	}
	r := recall.Select(es, recall.Options{Query: "PORT: 6432"})
	for _, m := range r.Messages {
		fmt.Println(m.Seq, m.Message.Role)
	}
	fmt.Println("matched", r.Matched, "cut", r.CutByBudget)
	// Output:
	// 7 assistant
	// 9 tool
	// matched 2 cut false
}
