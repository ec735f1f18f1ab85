package evidence

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// Header is the first line of a rendered section: it states which messages the summary
// covers and that they can be recalled. %d is the newest covered CHAT sequence.
const Header = "[Earlier messages through sequence %d that are not shown are summarized above; a recall tool, where offered, returns any of them verbatim by sequence range (from_seq, to_seq) or text (query). Evidence taken verbatim from them:]"

// group is one line (or block) of the section.
type group struct {
	label string
	match func(schemas.EvidenceItem) bool
	block bool // one item per line, as "$ command"
}

var groups = []group{
	{label: "Files changed: ", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceFile && it.Changed }},
	{label: "Files read: ", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceFile && !it.Changed }},
	{label: "Commands run:", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceCommand }, block: true},
	{label: "URLs: ", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceURL }},
	{label: "Identifiers: ", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceID }},
	{label: "Numbers the user gave: ", match: func(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceNumber }},
}

// Render writes the evidence section of a value whose summary covers the messages
// through coveredThrough, within budget tokens as count counts them (nil: chars/4).
// When everything does not fit, the items Rank puts first are kept and a last line
// says how many were left out. The output depends only on its input: byte-identical
// for identical input. It is "" when budget is 0 or below, or too small for the header.
func Render(ev *schemas.Evidence, coveredThrough uint64, budget int, count tokens.Counter) string {
	if budget <= 0 {
		return ""
	}
	if count == nil {
		count = tokens.Chars4{}
	}
	header := fmt.Sprintf(Header, coveredThrough)
	if count.Count(header) > budget {
		return ""
	}
	var items []schemas.EvidenceItem
	if ev != nil {
		items = slices.Clone(ev.Items)
	}
	slices.SortFunc(items, Rank)
	// Greedy by rank, with each item's cost counted alone; the whole text is counted at
	// the end and the lowest-ranked items leave until it fits (a tokenizer's count of a
	// text is close to, not exactly, the sum of its parts).
	used := count.Count(header) + count.Count(leftOut(len(items)))
	for _, g := range groups {
		used += count.Count("\n" + g.label)
	}
	n := 0
	for _, it := range items {
		c := count.Count(", "+it.Value) + 1
		if used+c > budget {
			break
		}
		used += c
		n++
	}
	for {
		text := layout(header, items[:n], len(items)-n)
		over := count.Count(text) - budget
		switch {
		case over <= 0:
			return text
		case n == 0:
			return header
		}
		n -= max(1, min(n, over/8)) // an item costs a few tokens: drop about what is over
	}
}

// layout writes the section of the chosen items, grouped by kind and, in each group,
// oldest reference first (then by value), so that it reads in the order things happened.
func layout(header string, chosen []schemas.EvidenceItem, omitted int) string {
	chosen = slices.Clone(chosen)
	slices.SortFunc(chosen, func(a, b schemas.EvidenceItem) int {
		return cmp.Or(cmp.Compare(a.LastSeq, b.LastSeq), canonical(a, b))
	})
	var b strings.Builder
	b.WriteString(header)
	for _, g := range groups {
		first := true
		for _, it := range chosen {
			if !g.match(it) {
				continue
			}
			switch {
			case first:
				b.WriteString("\n" + g.label)
				if g.block {
					b.WriteString("\n$ ")
				}
			case g.block:
				b.WriteString("\n$ ")
			default:
				b.WriteString(", ")
			}
			first = false
			b.WriteString(it.Value)
		}
	}
	if omitted > 0 {
		b.WriteString("\n" + leftOut(omitted))
	}
	return b.String()
}

// leftOut is the last line of a section that had to leave items out.
func leftOut(n int) string {
	return fmt.Sprintf("(%d older or less referenced items left out to fit; recall finds them in the messages)", n)
}
