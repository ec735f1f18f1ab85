// Package corpustest loads the development corpus of real agent transcripts (a
// directory of *.jsonl files, one OpenAI chat message a line, named by the
// AGENT_CORPUS_DIR variable) for tests and benchmarks; examples/transcripts holds a few
// of them. A test that uses it skips when the corpus is absent, and fails
// instead in CI (CI=true), so CI never passes by skipping the corpus replays.
// FuzzEntries builds the conversations the fuzz targets of the reader and the split
// strategies share.
package corpustest

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// Conversation is one corpus file.
type Conversation struct {
	// Name is the file name; Source the repository it came from (the name up to "__").
	Name, Source string
	// Entries are its messages with Seq = line number.
	Entries []schemas.Entry
	// Bytes is the file's size.
	Bytes int
}

// Messages returns the conversation's messages.
func (c Conversation) Messages() []schemas.Message {
	out := make([]schemas.Message, len(c.Entries))
	for i := range c.Entries {
		out[i] = c.Entries[i].Message
	}
	return out
}

// EnvVar names the variable that holds the corpus directory. CI sets it; a developer
// who has the corpus sets it too, and without it the tests that replay the corpus skip
// (and fail in CI).
const EnvVar = "AGENT_CORPUS_DIR"

// Dir returns the corpus directory, or "" when there is none: the directory EnvVar
// names. A relative path is taken from the module root (the first folder up from the
// working directory with a go.mod), since go test runs each package in its own folder.
func Dir() string {
	c := os.Getenv(EnvVar)
	if c == "" {
		return ""
	}
	if !filepath.IsAbs(c) {
		root, ok := moduleRoot()
		if !ok {
			return ""
		}
		c = filepath.Join(root, c)
	}
	if st, err := os.Stat(c); err == nil && st.IsDir() {
		return c
	}
	return ""
}

// moduleRoot is the first folder up from the working directory with a go.mod.
func moduleRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// Load decodes every conversation of the corpus, sorted by name; a line that does not
// decode and validate fails tb. It skips tb when the corpus is absent, or fails it in CI.
func Load(tb testing.TB) []Conversation {
	tb.Helper()
	dir := Dir()
	if dir == "" {
		absent(tb, "no corpus: "+EnvVar+" is unset or names no directory (a relative path is taken from the module root)")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		absent(tb, "no *.jsonl in "+dir)
	}
	slices.Sort(files)
	out := make([]Conversation, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		name := filepath.Base(f)
		source, _, _ := strings.Cut(name, "__")
		c := Conversation{Name: name, Source: source, Bytes: len(b)}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, len(b)+1)
		for line := 1; sc.Scan(); line++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			m, err := schemas.DecodeMessage(sc.Bytes())
			if err != nil {
				tb.Fatalf("%s:%d: %v", name, line, err)
			}
			c.Entries = append(c.Entries, schemas.Entry{Seq: uint64(line), Message: m})
		}
		if err := sc.Err(); err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		out = append(out, c)
	}
	return out
}

// absent skips tb, or fails it when the environment says CI=true.
func absent(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(why + " (CI=true: a test that needs the corpus fails instead of skipping)")
	}
	tb.Skip(why)
}

// Largest returns the n largest conversations by bytes, largest first.
func Largest(tb testing.TB, n int) []Conversation {
	tb.Helper()
	all := Load(tb)
	slices.SortStableFunc(all, func(a, b Conversation) int { return b.Bytes - a.Bytes })
	return all[:min(n, len(all))]
}
