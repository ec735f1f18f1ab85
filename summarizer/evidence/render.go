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
// covers and how a model gets them back: the recall tool, by the names the clients'
// tool definition (schemas.RecallToolName) and compactor mcp (registered as the MCP
// server "compactor", as Claude Code names an MCP server's tools) give it. %d is the
// newest covered CHAT sequence.
const Header = "[Messages through sequence %d are summarized above; the recall tool (recall, or mcp__compactor__recall), where offered, returns any of them verbatim by sequence range (from_seq, to_seq) or text (query). Verbatim evidence:]"

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
// says how many were left out. A file only read is not listed when a command shown
// names it (as a whole word): the command already holds it, and the room goes to
// other items. Every item is whole: none is cut to fit. The output depends only on its
// input: byte-identical for identical input. It is "" when budget is 0 or below, or too
// small for the header and, when items are left out, the line that says so.
func Render(ev *schemas.Evidence, coveredThrough uint64, budget int, count tokens.Counter) string {
	if budget <= 0 {
		return ""
	}
	if count == nil {
		count = tokens.Chars4{}
	}
	header := fmt.Sprintf(Header, coveredThrough)
	var items []schemas.EvidenceItem
	if ev != nil {
		items = slices.Clone(ev.Items)
	}
	slices.SortFunc(items, Rank)
	chosen := choose(items, header, budget, count)
	for {
		text := layout(header, items, chosen)
		over := count.Count(text) - budget
		if over <= 0 {
			return text
		}
		// A tokenizer's count of a text is close to, not exactly, the sum of its parts:
		// the lowest-ranked items leave until it fits (an item costs a few tokens: drop
		// about what is over).
		if !dropLowest(chosen, max(1, over/8)) {
			return ""
		}
	}
}

// choose picks the items to show, greedily by rank (items are in Rank order), with
// each item's cost counted alone; a file only read costs nothing when a command
// already chosen names it. A file charged before a command that names it was chosen is
// refunded, and the items left out get a second pass with what was refunded.
func choose(items []schemas.EvidenceItem, header string, budget int, count tokens.Counter) []bool {
	used := count.Count(header) + count.Count(leftOut(len(items)))
	for _, g := range groups {
		used += count.Count("\n" + g.label)
	}
	chosen := make([]bool, len(items))
	cost := make([]int, len(items))
	var cmds []string
	for pass := 0; pass < 2; pass++ {
		for i, it := range items {
			if chosen[i] {
				continue
			}
			c := count.Count(", "+it.Value) + 1
			if readFile(it) && namedIn(it.Value, cmds) {
				c = 0
			}
			if used+c > budget {
				continue
			}
			used += c
			chosen[i], cost[i] = true, c
			if it.Kind == schemas.EvidenceCommand {
				cmds = append(cmds, it.Value)
			}
		}
		for i, it := range items { // refunds
			if chosen[i] && cost[i] > 0 && readFile(it) && namedIn(it.Value, cmds) {
				used -= cost[i]
				cost[i] = 0
			}
		}
	}
	return chosen
}

// dropLowest unchooses the n lowest-ranked chosen items; false when none was chosen.
func dropLowest(chosen []bool, n int) bool {
	dropped := false
	for i := len(chosen) - 1; i >= 0 && n > 0; i-- {
		if chosen[i] {
			chosen[i] = false
			dropped = true
			n--
		}
	}
	return dropped
}

// readFile says an item is a file only read.
func readFile(it schemas.EvidenceItem) bool { return it.Kind == schemas.EvidenceFile && !it.Changed }

// namedIn says one of cmds names path p as a whole word: not inside a longer name
// (a.py is not named by "cat ba.py" nor by "cat a.py.orig").
func namedIn(p string, cmds []string) bool {
	for _, c := range cmds {
		for at := 0; ; {
			i := strings.Index(c[at:], p)
			if i < 0 {
				break
			}
			i += at
			end := i + len(p)
			if (i == 0 || !pathByte(c[i-1])) && (end == len(c) || !pathByte(c[end]) || c[end] == '.' && (end+1 == len(c) || !pathByte(c[end+1]))) {
				return true
			}
			at = i + 1
		}
	}
	return false
}

// pathByte says b can be part of a path word.
func pathByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("_-./~@+", b) >= 0
}

// layout writes the section of the chosen items, grouped by kind and, in each group,
// oldest reference first (then by value), so that it reads in the order things happened.
// A read file a shown command names is not listed.
func layout(header string, items []schemas.EvidenceItem, chosen []bool) string {
	var shown []schemas.EvidenceItem
	var cmds []string
	for i, it := range items {
		if chosen[i] && it.Kind == schemas.EvidenceCommand {
			cmds = append(cmds, it.Value)
		}
	}
	omitted := 0
	for i, it := range items {
		switch {
		case !chosen[i]:
			omitted++
		case readFile(it) && namedIn(it.Value, cmds):
		default:
			shown = append(shown, it)
		}
	}
	slices.SortFunc(shown, func(a, b schemas.EvidenceItem) int {
		return cmp.Or(cmp.Compare(a.LastSeq, b.LastSeq), canonical(a, b))
	})
	var b strings.Builder
	b.WriteString(header)
	for _, g := range groups {
		first := true
		for _, it := range shown {
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
