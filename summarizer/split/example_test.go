package split_test

import (
	"fmt"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/summarizer/split"
)

func ExampleApply() {
	es := []schemas.Entry{
		{Seq: 1, Message: schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")}},
		{Seq: 2, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Fix the failing test.")}},
		{Seq: 3, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "run_tests", Arguments: "{}"}}}}},
		{Seq: 4, Message: schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text("1 failed")}},
		{Seq: 5, Message: schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("Fixed.")}},
		{Seq: 6, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Thanks, now add a test.")}},
	}
	in := split.Input{Entries: es, Pinned: split.Pinned(es, true), Budget: budget.Default(), Knobs: split.DefaultKnobs()}
	for _, strategy := range split.Strategies {
		s, err := split.Apply(strategy, in)
		if err != nil {
			fmt.Println(err)
			continue
		}
		var keep []uint64
		for _, i := range s.Keep {
			keep = append(keep, es[i].Seq)
		}
		tail := "none"
		if s.TailStart < len(es) {
			tail = fmt.Sprint(es[s.TailStart].Seq)
		}
		fmt.Printf("%-14s tail from seq %s, kept seqs %v\n", strategy, tail, keep)
	}
	// Output:
	// keep-last-n    tail from seq 1, kept seqs []
	// tool-rounds    tail from seq 3, kept seqs []
	// user-messages  tail from seq none, kept seqs [2 6]
	// token-fraction tail from seq 6, kept seqs []
	// recent-turns   tail from seq 2, kept seqs []
	// all            tail from seq none, kept seqs []
}
