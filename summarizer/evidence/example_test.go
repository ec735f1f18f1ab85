package evidence_test

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// Extract the evidence of a few messages, carry it into a value and render its section.
func Example() {
	entries := []schemas.Entry{
		{Seq: 1, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Fix PROJ-42: parsing takes 30s.")}},
		{Seq: 2, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "a", Type: "function",
			Function: schemas.FunctionCall{Name: "bash", Arguments: `{"command": "cd /repo && sed -i 's/a/b/' parser.go && go test ./..."}`}}}}},
	}
	ev := evidence.Merge(nil, entries, 2)
	fmt.Println(evidence.Render(ev, 2, 200, nil))
	// Output:
	// [Messages through sequence 2 are summarized above; the recall tool (recall, or mcp__compactor__recall), where offered, returns any of them verbatim by sequence range (from_seq, to_seq) or text (query). Verbatim evidence:]
	// Files changed: /repo/parser.go
	// Commands run:
	// $ cd /repo && sed -i 's/a/b/' parser.go && go test ./...
	// Identifiers: PROJ-42
	// Numbers the user gave: 30s
}
