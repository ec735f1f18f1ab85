package bpe_test

import (
	"errors"
	"fmt"
	"github.com/compactor/compactor/internal/corpustest"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/schemas/tokens/bpe"
)

// fixedOnly counts no text, so EstimateWith(fixedOnly{}, m) is m's fixed costs alone.
type fixedOnly struct{}

func (fixedOnly) Count(string) int { return 0 }

// textTokens is the text part of tokens.EstimateWith: the same texts (content, name,
// reasoning, tool call names and arguments) without the fixed costs.
func textTokens(c tokens.Counter, m *schemas.Message) int {
	return tokens.EstimateWith(c, m) - tokens.EstimateWith(fixedOnly{}, m)
}

// tally sums one group of conversations.
type tally struct {
	conversations, messages int
	chars4                  int
	exact                   [2]int // o200k_base, cl100k_base
	off10, off25            [2]int // conversations where chars/4 is more than 10% or 25% off
	lowest, highest         float64
}

func (a *tally) add(chars4 int, exact [2]int, messages int) {
	a.conversations++
	a.messages += messages
	a.chars4 += chars4
	for i, e := range exact {
		a.exact[i] += e
		if e == 0 {
			continue
		}
		r := float64(chars4) / float64(e)
		if math.Abs(r-1) > 0.10 {
			a.off10[i]++
		}
		if math.Abs(r-1) > 0.25 {
			a.off25[i]++
		}
		if i == 0 {
			if a.conversations == 1 || r < a.lowest {
				a.lowest = r
			}
			if a.conversations == 1 || r > a.highest {
				a.highest = r
			}
		}
	}
}

func (a *tally) ratio(i int) float64 { return float64(a.chars4) / float64(a.exact[i]) }

func (a *tally) row(name string) string {
	pct := func(n int) string { return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(a.conversations)) }
	return fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %.3f | %.3f | %.2f–%.2f | %s / %s | %s / %s |",
		name, a.conversations, a.messages, a.exact[0], a.exact[1], a.chars4, a.ratio(0), a.ratio(1),
		a.lowest, a.highest, pct(a.off10[0]), pct(a.off10[1]), pct(a.off25[0]), pct(a.off25[1]))
}

// TestCorpus measures how far chars/4 is from the exact token counts on the corpus of
// real agent conversations, and logs the table with -v. It fails if the tokenizer
// stops producing sane counts.
func TestCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("tokenizes the whole corpus twice")
	}
	convs := corpustest.Load(t)
	o200k, cl100k := newCounter(t, bpe.O200kBase), newCounter(t, bpe.Cl100kBase)
	bySource := map[string]*tally{}
	var all tally
	for _, c := range convs {
		chars4, exact := 0, [2]int{}
		for i := range c.Messages() {
			m := &c.Messages()[i]
			chars4 += textTokens(tokens.Chars4{}, m)
			exact[0] += textTokens(o200k, m)
			exact[1] += textTokens(cl100k, m)
		}
		if bySource[c.Source] == nil {
			bySource[c.Source] = &tally{}
		}
		bySource[c.Source].add(chars4, exact, len(c.Messages()))
		all.add(chars4, exact, len(c.Messages()))
	}

	var b strings.Builder
	b.WriteString("\n| source | conversations | messages | o200k_base tokens | cl100k_base tokens | chars/4 | chars/4 ÷ o200k | chars/4 ÷ cl100k | per conversation ÷ o200k | conversations >10% off (o200k / cl100k) | >25% off (o200k / cl100k) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	sources := make([]string, 0, len(bySource))
	for s := range bySource {
		sources = append(sources, s)
	}
	slices.Sort(sources)
	for _, s := range sources {
		b.WriteString(bySource[s].row(s) + "\n")
	}
	b.WriteString(all.row("**all**") + "\n")
	t.Log(b.String())

	var errs []error
	for _, s := range sources {
		for i, enc := range []string{bpe.O200kBase, bpe.Cl100kBase} {
			if bySource[s].exact[i] <= 0 {
				errs = append(errs, fmt.Errorf("%s: %s counted %d tokens", s, enc, bySource[s].exact[i]))
			}
		}
	}
	for i, enc := range []string{bpe.O200kBase, bpe.Cl100kBase} {
		if r := all.ratio(i); !(r >= 0.5 && r <= 2) {
			errs = append(errs, fmt.Errorf("chars/4 ÷ %s is %.3f; want it within 0.5–2.0", enc, r))
		}
	}
	if r := float64(all.exact[0]) / float64(all.exact[1]); !(r >= 0.8 && r <= 1.2) {
		errs = append(errs, fmt.Errorf("o200k_base ÷ cl100k_base is %.3f; want it within 0.8–1.2", r))
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCount tokenizes every text of the corpus once per iteration.
func BenchmarkCount(b *testing.B) {
	convs := corpustest.Load(b)
	var texts []string
	size := 0
	for _, c := range convs {
		for _, m := range c.Messages() {
			for _, s := range append([]string{m.Content.String()}, toolTexts(m)...) {
				texts = append(texts, s)
				size += len(s)
			}
		}
	}
	for _, enc := range bpe.Encodings() {
		b.Run(enc, func(b *testing.B) {
			c := newCounter(b, enc)
			b.SetBytes(int64(size))
			for b.Loop() {
				for _, s := range texts {
					c.Count(s)
				}
			}
		})
	}
	b.Run("chars4", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			for _, s := range texts {
				tokens.Text(s)
			}
		}
	})
}

func toolTexts(m schemas.Message) []string {
	var out []string
	for _, tc := range m.ToolCalls {
		out = append(out, tc.Function.Name, tc.Function.Arguments)
	}
	return out
}
