package main

import (
	"os"
	"strings"
	"testing"
)

// TestKeepHandSections: a regeneration of the benchmarks document keeps its hand-kept
// sections, before "## Past one machine" (else at the end), and only whole ones.
func TestKeepHandSections(t *testing.T) {
	gen := "# Benchmarks\n\n## This run\n\nfigures\n\n## Past one machine\n\ntext\n"
	sec := "<!-- hand-kept: rungs -->\n## Rungs\n\n| a | b |\n<!-- /hand-kept: rungs -->\n"
	for _, tc := range []struct{ name, old, gen, want string }{
		{"no old document", "", gen, gen},
		{"kept before the heading", "# old\n\n" + sec + "\n## Past one machine\n", gen,
			"# Benchmarks\n\n## This run\n\nfigures\n\n" + sec + "\n## Past one machine\n\ntext\n"},
		{"no heading: at the end", sec, "# Benchmarks\n", "# Benchmarks\n\n" + sec + "\n"},
		{"markers that do not match", "<!-- hand-kept: a -->\nx\n<!-- /hand-kept: b -->\n", gen, gen},
		{"an end marker missing", "<!-- hand-kept: a -->\nx\n", gen, gen},
	} {
		if got := string(keepHandSections([]byte(tc.old), []byte(tc.gen))); got != tc.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.name, got, tc.want)
		}
	}
	// The committed document's hand-kept section survives a regeneration of itself.
	doc, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	m := handKept.Find(doc)
	if m == nil {
		t.Fatal("docs/benchmarks.md has no hand-kept section")
	}
	again := keepHandSections(doc, []byte(gen))
	if !strings.Contains(string(again), string(m)) {
		t.Errorf("a regeneration lost the hand-kept section %.80q", m)
	}
	// The generator writes the document without it: regenerated, the document is the same.
	generated := strings.Replace(string(doc), string(m)+"\n", "", 1)
	if got := string(keepHandSections(doc, []byte(generated))); got != string(doc) {
		t.Errorf("regenerating docs/benchmarks.md changes it: the hand-kept section moved")
	}
}
