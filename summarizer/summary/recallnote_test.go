package summary_test

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/summarizer/summary"
)

// A summary carries one recall note, at its end, naming the range and the tool, however
// often a summarizer carries the previous one forward.
func TestWithRecallNoteKeepsOneNoteAtTheEnd(t *testing.T) {
	first := summary.WithRecallNote("FACT-1 is the port.", 3, 40)
	if !strings.HasSuffix(first, summary.RecallNote(3, 40)) || strings.Count(first, "[Compactor: the summary above") != 1 {
		t.Fatalf("first summary: %q", first)
	}
	for _, want := range []string{"3 to 40", "recall", "mcp__compactor__recall", "from_seq", "to_seq"} {
		if !strings.Contains(first, want) {
			t.Errorf("the note lacks %q: %q", want, first)
		}
	}
	// The next summarizer copied the old note into the middle of its summary.
	carried := "FACT-1 is the port.\n\n" + summary.RecallNote(3, 40) + "\nFACT-2 is the host."
	next := summary.WithRecallNote(carried, 3, 90)
	if strings.Count(next, "[Compactor: the summary above") != 1 || !strings.HasSuffix(next, summary.RecallNote(3, 90)) ||
		!strings.Contains(next, "FACT-2 is the host.") || strings.Contains(next, "3 to 40") {
		t.Fatalf("next summary: %q", next)
	}
	if got := summary.StripRecallNote(next); got != "FACT-1 is the port.\n\nFACT-2 is the host." {
		t.Fatalf("stripped: %q", got)
	}
	if got := summary.RecallNote(0, 12); !strings.Contains(got, "up to sequence 12") {
		t.Fatalf("no first sequence: %q", got)
	}
}
