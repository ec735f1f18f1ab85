package eval_test

import (
	"fmt"

	"github.com/compactor/compactor/internal/eval"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// Extract reads what the agent touched from the raw history; Survivors says which of
// it a context still holds.
func ExampleExtract() {
	history := []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("Fix the failing parser test.")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "1", Type: "function",
			Function: schemas.FunctionCall{Name: "bash", Arguments: `{"command":"sed -i 's/<=/</' src/parser.py && pytest tests/test_parser.py"}`}}}},
		{Role: schemas.RoleTool, ToolCallID: "1", Content: schemas.Text("1 passed")},
	}
	truth := eval.Extract(history)
	fmt.Println("paths:", truth.Paths)
	fmt.Println("changed:", truth.Changed)
	fmt.Println("commands:", truth.Commands)

	summary := "[Summary] The agent fixed src/parser.py; the tests pass."
	fmt.Println("kept:", eval.Survivors(truth.Paths, summary))
	// Output:
	// paths: [src/parser.py tests/test_parser.py]
	// changed: [src/parser.py]
	// commands: [sed -i 's/<=/</' src/parser.py && pytest tests/test_parser.py]
	// kept: [src/parser.py]
}

// ScoreFiles scores a model's answer to "which files were changed".
func ExampleScoreFiles() {
	recall, precision := eval.ScoreFiles([]string{"src/parser.py", "src/lexer.py"}, "I changed `src/parser.py` and README.md.")
	fmt.Printf("recall %.2f, precision %.2f\n", recall, precision)
	// Output: recall 0.50, precision 0.50
}

// ByConstruction takes the summary's own text out of a context, keeping its prefix and
// the evidence section: what survives whatever the summarizer writes.
func ExampleByConstruction() {
	evidence := "[Evidence:]\nFiles changed: src/parser.py"
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")},
		{Role: schemas.RoleUser, Content: schemas.Text(assemble.SummaryPrefix + "The agent fixed src/parser.py and ran pytest tests/test_parser.py.\n\n" + evidence)},
		{Role: schemas.RoleUser, Content: schemas.Text("Thanks. Now the lexer.")},
	}
	seqs := []uint64{1, 0, 42} // the summary message is the one at sequence 0
	paths := []string{"src/parser.py", "tests/test_parser.py"}
	fmt.Println("with the summary:", eval.Survivors(paths, eval.ContextText(msgs)))
	fmt.Println("by construction:", eval.Survivors(paths, eval.ContextText(eval.ByConstruction(msgs, seqs, evidence))))
	// Output:
	// with the summary: [src/parser.py tests/test_parser.py]
	// by construction: [src/parser.py]
}
