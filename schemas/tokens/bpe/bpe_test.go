package bpe_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/schemas/tokens/bpe"
)

func newCounter(t testing.TB, encoding string) *bpe.Counter {
	t.Helper()
	c, err := bpe.New(encoding)
	if err != nil {
		t.Fatalf("New(%q): %v", encoding, err)
	}
	return c
}

func TestNew(t *testing.T) {
	for _, enc := range bpe.Encodings() {
		t.Run(enc, func(t *testing.T) {
			if got := newCounter(t, enc).Encoding(); got != enc {
				t.Fatalf("Encoding() got %q; want %q", got, enc)
			}
		})
	}
}

func TestNewUnknown(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "empty", give: ""},
		{name: "chars4 is not an encoding", give: "chars4"},
		{name: "older encoding", give: "p50k_base"},
		{name: "case matters", give: "CL100K_BASE"},
		{name: "model name", give: "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := bpe.New(tt.give)
			if c != nil || !errors.Is(err, bpe.ErrUnknownEncoding) {
				t.Fatalf("New(%q) got %v, %v; want nil, ErrUnknownEncoding", tt.give, c, err)
			}
			for _, want := range append(bpe.Encodings(), fmt.Sprintf("%q", tt.give)) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
		})
	}
}

func TestCount(t *testing.T) {
	// The counts are tiktoken's encode_ordinary: github.com/pkoukk/tiktoken-go agrees on
	// every one of them, and on every text of the corpus.
	tests := []struct {
		name       string
		give       string
		wantCl100k int
		wantO200k  int
	}{
		{name: "empty", give: "", wantCl100k: 0, wantO200k: 0},
		{name: "hello world", give: "hello world", wantCl100k: 2, wantO200k: 2},
		{name: "long word", give: "supercalifragilistic", wantCl100k: 7, wantO200k: 6},
		{name: "sentence", give: "We know what we are, but know not what we may be.", wantCl100k: 14, wantO200k: 14},
		{name: "non-ascii", give: "Grüße aus Köln – 東京へようこそ!", wantCl100k: 17, wantO200k: 12},
		{name: "json arguments", give: `{"path": "/etc/hosts", "limit": 200}`, wantCl100k: 14, wantO200k: 14},
		{name: "code", give: "func main() {\n\tfmt.Println(\"hi\")\n}\n", wantCl100k: 10, wantO200k: 10},
		// Whitespace with newlines is one piece; tokenizer v0.8.1 to v0.10.0 split it.
		{name: "blank line with a space", give: "\n \n", wantCl100k: 1, wantO200k: 1},
		{name: "spaces and newlines", give: " \n \n \n \n", wantCl100k: 2, wantO200k: 2},
		{name: "indented blank lines", give: "  \n  \n  \nx", wantCl100k: 3, wantO200k: 3},
		{name: "special token is plain text", give: "<|endoftext|>", wantCl100k: 7, wantO200k: 7},
	}
	cl100k, o200k := newCounter(t, bpe.Cl100kBase), newCounter(t, bpe.O200kBase)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cl100k.Count(tt.give); got != tt.wantCl100k {
				t.Errorf("cl100k_base Count(%q) got %d; want %d", tt.give, got, tt.wantCl100k)
			}
			if got := o200k.Count(tt.give); got != tt.wantO200k {
				t.Errorf("o200k_base Count(%q) got %d; want %d", tt.give, got, tt.wantO200k)
			}
		})
	}
}

func TestEstimateWith(t *testing.T) {
	c := newCounter(t, bpe.Cl100kBase)
	m := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("hello world"),
		ToolCalls: []schemas.ToolCall{{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "read_file", Arguments: `{"path": "/etc/hosts", "limit": 200}`}}}}
	want := tokens.PerMessage + 2 + tokens.PerToolCall + c.Count("read_file") + 14
	if got := tokens.EstimateWith(c, &m); got != want {
		t.Fatalf("EstimateWith got %d; want %d", got, want)
	}
}

func TestCountConcurrent(t *testing.T) {
	texts := []string{
		"hello world",
		"Grüße aus Köln – 東京へようこそ!",
		strings.Repeat("func main() {\n\tfmt.Println(\"hi\")\n}\n", 50),
		strings.Repeat("x", 3*bpe.MaxRun),
		" \n \n \n \n",
	}
	for _, enc := range bpe.Encodings() {
		t.Run(enc, func(t *testing.T) {
			c := newCounter(t, enc)
			want := make([]int, len(texts))
			for i, s := range texts {
				want[i] = c.Count(s)
			}
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					for i := range 50 {
						j := (g + i) % len(texts)
						if got := c.Count(texts[j]); got != want[j] {
							t.Errorf("Count(texts[%d]) got %d; want %d", j, got, want[j])
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func ExampleNew() {
	c, err := bpe.New(bpe.O200kBase)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello world")}
	fmt.Println(c.Count("hello world"), tokens.EstimateWith(c, &m))

	_, err = bpe.New("gpt-4o")
	fmt.Println(err)
	// Output:
	// 2 6
	// unknown encoding "gpt-4o"; supported: cl100k_base, o200k_base
}

// BenchmarkCountLongRuns tokenizes 1 MiB texts made of one long run each: the inputs
// whose cost MaxRun bounds.
func BenchmarkCountLongRuns(b *testing.B) {
	const size = 1 << 20
	inputs := []struct{ name, unit string }{
		{name: "letters", unit: "ACGT"},
		{name: "spaces and newlines", unit: " \r\n"},
		{name: "punctuation", unit: "="},
		{name: "prose", unit: "We know what we are, but know not what we may be.\n"},
	}
	for _, enc := range bpe.Encodings() {
		c := newCounter(b, enc)
		for _, in := range inputs {
			text := strings.Repeat(in.unit, size/len(in.unit))
			b.Run(enc+"/"+in.name, func(b *testing.B) {
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					c.Count(text)
				}
			})
		}
	}
}
