package bpe

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/tiktoken-go/tokenizer"

	"github.com/compactor/compactor/schemas/tokens"
)

// The supported encodings.
const (
	// Cl100kBase is the encoding of GPT-4 and GPT-3.5.
	Cl100kBase = "cl100k_base"
	// O200kBase is the encoding of GPT-4o, GPT-4.1, GPT-5 and the o-series.
	O200kBase = "o200k_base"
)

// MaxRun is the longest run of letters, of whitespace or of punctuation, in bytes,
// that Count tokenizes exactly. The tokenizer's cost grows with the square of a run's
// length, so Count cuts a longer run every MaxRun bytes and counts the cuts apart,
// which can move the count by a token or two per cut. Numbers are never cut. Text
// without such runs, which is nearly all text (none in the corpus), is counted exactly.
const MaxRun = 512

// Encodings returns the names New accepts, sorted.
func Encodings() []string { return []string{Cl100kBase, O200kBase} }

// Counter counts the tokens of a text in one encoding. It is safe for concurrent use.
type Counter struct {
	name  string
	codec tokenizer.Codec
}

var _ tokens.Counter = (*Counter)(nil)

// New returns a Counter for encoding, one of Encodings. The first call for an encoding
// builds its vocabulary; later calls share it.
func New(encoding string) (*Counter, error) {
	switch encoding {
	case Cl100kBase, O200kBase:
	default:
		return nil, fmt.Errorf("%w %q; supported: %s", ErrUnknownEncoding, encoding, strings.Join(Encodings(), ", "))
	}
	codec, err := tokenizer.Get(tokenizer.Encoding(encoding))
	if err != nil {
		return nil, fmt.Errorf("encoding %q: %w", encoding, err)
	}
	return &Counter{name: encoding, codec: codec}, nil
}

// Encoding returns the name of the Counter's encoding.
func (c *Counter) Encoding() string { return c.name }

// Count returns the number of tokens of text, special-token strings counted as plain
// text. A run longer than MaxRun is cut (see MaxRun).
func (c *Counter) Count(text string) int {
	n, start := 0, 0
	run, runStart := class(-1), 0
	for i, r := range text {
		k := classOf(r)
		if k != run {
			run, runStart = k, i
			continue
		}
		if k != number && i-runStart >= MaxRun {
			n += c.count(text[start:i])
			start, runStart = i, i
		}
	}
	return n + c.count(text[start:])
}

// count tokenizes text in one go. The tokenizer fails only on a regular-expression
// timeout, which its split pattern does not set; should it fail, chars/4 stands in.
func (c *Counter) count(text string) int {
	if text == "" {
		return 0
	}
	n, err := c.codec.Count(text)
	if err != nil {
		return tokens.Text(text)
	}
	return n
}

// class is a kind of character the split pattern of both encodings keeps together.
type class int

const (
	space class = iota
	letter
	number
	other
)

func classOf(r rune) class {
	switch {
	case unicode.IsSpace(r):
		return space
	case unicode.IsLetter(r), unicode.IsMark(r):
		return letter
	case unicode.IsNumber(r):
		return number
	}
	return other
}
