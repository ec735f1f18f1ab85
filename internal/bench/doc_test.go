package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// docCommand is the command that regenerates docs/benchmarks.md, as the doc states it.
const docCommand = "go run ./cmd/compactor bench --charts docs --doc docs/benchmarks.md --calibrate 5 --corpus DIR"

// The committed docs/benchmarks.md is what WriteMarkdown writes: its text before the
// run's own figures is the generator's, word for word, so regenerating it loses no
// edit and a hand edit of the doc shows up here.
func TestCommittedDocIsTheGeneratorsText(t *testing.T) {
	committed, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	const cut = "## This run"
	head, _, ok := strings.Cut(string(committed), cut)
	if !ok {
		t.Fatalf("docs/benchmarks.md has no %q section", cut)
	}
	rep := &Report{Command: docCommand}
	var doc bytes.Buffer
	if err := rep.WriteMarkdown(&doc); err != nil {
		t.Fatal(err)
	}
	gen, _, _ := strings.Cut(doc.String(), cut)
	if gen != head {
		t.Errorf("docs/benchmarks.md's text before %q differs from what compactor bench writes:\n--- generator\n%s\n--- committed\n%s", cut, gen, head)
	}
}
