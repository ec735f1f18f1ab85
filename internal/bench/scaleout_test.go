package bench

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// workloadTokens is the estimate of a workload's messages.
func workloadTokens(w []CorpusMessage) int {
	n := 0
	for i := range w {
		n += tokens.Message(&w[i].Message)
	}
	return n
}

// Every scale-out workload, whichever corpus file it starts at, is at least twice its
// policy's target and over the threshold: the worker always has something to compact.
func TestScaleWorkloadsAreOverTarget(t *testing.T) {
	c, _ := corpus(t)
	b := settings(scaleWindow).Budget()
	for k := range 2 * len(c.Files) {
		w := c.scaleWorkload(k)
		n := workloadTokens(w)
		if n < 2*b.TargetTokens() || n < b.ThresholdTokens() || len(w) < scaleMinMessages {
			t.Errorf("workload %d: %d messages, %d tokens; want at least %d messages and %d tokens (target %d, threshold %d)",
				k, len(w), n, scaleMinMessages, 2*b.TargetTokens(), b.TargetTokens(), b.ThresholdTokens())
		}
	}
}

// A workload the worker rightly declines (under its target) is counted in the row,
// and the run goes on: the throughput counts the completed ones.
func TestScaleRunReportsADecline(t *testing.T) {
	c, _ := corpus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := startServer(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	short := []CorpusMessage{{Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("run the build")}},
		{Message: schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("the build passed")}}}
	work := [][]CorpusMessage{c.scaleWorkload(0), short, c.scaleWorkload(1)}
	row, err := scaleRun(ctx, srv.URL, "", work, 2, 1)
	if err != nil {
		t.Fatalf("scaleRun with a workload under target: %v; want the decline reported, not an error", err)
	}
	if row.Declined != 1 || row.Jobs != 3 || !(row.PerSec > 0) {
		t.Errorf("row %+v; want 3 jobs, 1 declined, a positive rate of the 2 completed", row)
	}
}

// The cost measurement's histories differ only in length: each is the same block of
// corpus messages repeated, the block closing every tool call it opens, and the new
// messages after it are the same at every length.
func TestCostHistoriesHoldContentEqual(t *testing.T) {
	c, _ := corpus(t)
	block := closedPrefix(c.history(100))
	if len(block) == 0 || len(block) > 100 {
		t.Fatalf("block of %d messages; want 1 to 100", len(block))
	}
	open := map[string]bool{}
	for _, m := range block {
		for _, tc := range m.Message.ToolCalls {
			open[tc.ID] = true
		}
		if m.Message.Role == schemas.RoleTool {
			delete(open, m.Message.ToolCallID)
		}
	}
	if len(open) != 0 {
		t.Errorf("the block leaves calls %v open", open)
	}
	small, large := repeatBlock(block, 100), repeatBlock(block, 10000)
	if len(large)%len(block) != 0 || len(small)%len(block) != 0 || len(large) < 9900 {
		t.Fatalf("histories of %d and %d messages; want whole blocks of %d, about 100 and 10,000", len(small), len(large), len(block))
	}
	perMessage := func(h []CorpusMessage) float64 { return float64(workloadTokens(h)) / float64(len(h)) }
	if a, b := perMessage(small), perMessage(large); a != b {
		t.Errorf("tokens per message %v at %d messages, %v at %d; want the same mix", a, len(small), b, len(large))
	}
}
