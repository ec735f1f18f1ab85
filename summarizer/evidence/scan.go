package evidence

import (
	"slices"
	"strings"
)

// Redaction reads a text once per anchor rather than once per expression: most texts
// hold none of a rule's anchors (see rule.anchors), and the expression, which costs
// far more a byte than a search for a few fixed strings, is not run on them. A
// line-local rule's expression runs only on the lines that hold its anchors.
//
// (?i) matches an ASCII letter in two non-ASCII forms as well: the Kelvin sign K
// (U+212A) as k, the long s ſ (U+017F) as s. A text that holds either is searched by
// every expression, whole, as before the anchors.

// foldOnly are the non-ASCII runes that (?i) matches as an ASCII letter
// (TestFoldOnlyRunes checks the list against the unicode tables).
var foldOnly = []string{"\u212a", "\u017f"}

// maxAnchors bounds the distinct anchors of all rules.
const maxAnchors = 128

// anchorGroups are each rule's anchor groups with every distinct anchor of the rules
// numbered, for scan to remember what it found; ruleFold says a rule is (?i): its
// anchors are found whatever the case of their letters.
var anchorGroups, ruleFold = numberAnchors()

type anchorKey struct {
	s    string
	fold bool
}

func numberAnchors() ([][][]int, []bool) {
	ids := map[anchorKey]int{}
	groups := make([][][]int, len(rules))
	folds := make([]bool, len(rules))
	for i := range rules {
		fold := strings.HasPrefix(rules[i].re.String(), "(?i")
		folds[i] = fold
		for _, g := range rules[i].anchors {
			var nums []int
			for _, a := range g {
				k := anchorKey{a, fold}
				if _, ok := ids[k]; !ok {
					ids[k] = len(ids)
				}
				nums = append(nums, ids[k])
			}
			groups[i] = append(groups[i], nums)
		}
	}
	if len(ids) > maxAnchors {
		panic("evidence: more than maxAnchors anchors")
	}
	return groups, folds
}

// scan is the text Redact works on and what it has found in it.
type scan struct {
	s string
	// lower is s with its ASCII letters in lower case (byte for byte), made on first use.
	lower string
	// unsure says s holds a foldOnly rune: every rule runs on the whole text.
	unsure bool
	// found[id] is 0 while anchor id was not looked for in the whole of s, 1 when s
	// holds it, 2 when not.
	found [maxAnchors]uint8
}

func newScan(s string) *scan {
	t := &scan{}
	t.reset(s)
	return t
}

// reset makes s the text, after a rule changed it.
func (t *scan) reset(s string) {
	t.s, t.lower, t.found = s, "", [maxAnchors]uint8{}
	t.unsure = false
	for _, r := range foldOnly {
		t.unsure = t.unsure || strings.Contains(s, r)
	}
}

// hay is the text anchors of a rule are looked for in: s, or its lower-case form for a
// (?i) rule.
func (t *scan) hay(fold bool) string {
	if !fold {
		return t.s
	}
	if t.lower == "" && t.s != "" {
		t.lower = asciiLower(t.s)
	}
	return t.lower
}

// asciiLower returns s with its ASCII letters in lower case, byte for byte.
func asciiLower(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' })
	if i < 0 {
		return s
	}
	b := []byte(s)
	for j := i; j < len(b); j++ {
		if c := b[j]; c >= 'A' && c <= 'Z' {
			b[j] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// mayMatch says rule ri's expression may match in s[from:to]: every group of its
// anchors has one there, or the text is unsure.
func (t *scan) mayMatch(ri, from, to int) bool {
	if t.unsure {
		return true
	}
	r := &rules[ri]
	hay := t.hay(ruleFold[ri])[from:to]
	whole := from == 0 && to == len(t.s)
	for g, group := range r.anchors {
		ok := false
		for a, anchor := range group {
			id := anchorGroups[ri][g][a]
			if whole && t.found[id] != 0 {
				ok = t.found[id] == 1
			} else {
				ok = strings.Contains(hay, anchor)
				if whole {
					t.found[id] = 2
					if ok {
						t.found[id] = 1
					}
				}
			}
			if ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// lineMatches returns the matches of line-local rule r in s, in order: those of its
// expression on each line that holds its anchors (from the line feed before it, so
// that the expression reads the line as it reads it in s).
func (t *scan) lineMatches(ri int) [][]int {
	r := &rules[ri]
	hay := t.hay(ruleFold[ri])
	type window struct{ from, to int }
	var lines []window
	for _, a := range r.anchors[0] {
		for at := 0; at < len(hay); {
			i := strings.Index(hay[at:], a)
			if i < 0 {
				break
			}
			i += at
			w := window{strings.LastIndexByte(hay[:i], '\n'), strings.IndexByte(hay[i:], '\n')}
			w.from = max(w.from, 0)
			if w.to < 0 {
				w.to = len(hay)
			} else {
				w.to += i
			}
			lines = append(lines, w)
			at = w.to
		}
	}
	slices.SortFunc(lines, func(a, b window) int { return a.from - b.from })
	lines = slices.Compact(lines)
	var out [][]int
	for _, w := range lines {
		if len(r.anchors) > 1 && !t.mayMatch(ri, w.from, w.to) {
			continue
		}
		for _, m := range r.re.FindAllStringSubmatchIndex(t.s[w.from:w.to], -1) {
			for i := range m {
				if m[i] >= 0 {
					m[i] += w.from
				}
			}
			out = append(out, m)
		}
	}
	return out
}
