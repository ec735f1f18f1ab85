package evidence

import (
	"slices"
	"strings"
)

// Redaction reads a text once for the anchors of every rule (rule.anchors), with one
// automaton for the (?i) rules' anchors, found in any case, and one for the others'.
// Most texts hold none of a rule's anchors, and its expression, which costs far more a
// byte than that one pass, is not run on them. A line-local rule's expression runs
// only on the lines that hold its anchors.
//
// (?i) matches an ASCII letter in two non-ASCII forms as well: the Kelvin sign K
// (U+212A) as k, the long s ſ (U+017F) as s. A text that holds either is searched by
// every expression, whole, as before the anchors.

// foldOnly are the non-ASCII runes that (?i) matches as an ASCII letter
// (TestFoldOnlyRunes checks the list against the unicode tables).
var foldOnly = []string{"\u212a", "\u017f"}

// anchorBits is a set of anchors, by number.
type anchorBits [4]uint64

func (b *anchorBits) add(id int) { b[id/64] |= 1 << (id % 64) }
func (b *anchorBits) union(o *anchorBits) {
	b[0], b[1], b[2], b[3] = b[0]|o[0], b[1]|o[1], b[2]|o[2], b[3]|o[3]
}
func (b *anchorBits) meets(o *anchorBits) bool {
	return b[0]&o[0]|b[1]&o[1]|b[2]&o[2]|b[3]&o[3] != 0
}

// maxAnchors bounds the distinct anchors of all rules, foldOnly's included.
const maxAnchors = len(anchorBits{}) * 64

// The anchors of every rule, numbered (anchorIDs: "f" for one found in any case, else
// "e", then the anchor): ruleGroups[i][g] is the set of group g of rule i; ruleFold[i]
// says rule i is (?i), its anchors found in any case; foldOnlyBits is the set of the
// foldOnly runes; foldAnchors and exactAnchors find them in a text.
var (
	anchorIDs    = map[string]int{}
	ruleGroups   [][]anchorBits
	ruleFold     []bool
	foldOnlyBits anchorBits
	foldAnchors  *automaton
	exactAnchors *automaton
)

func init() {
	ids := anchorIDs
	number := func(key string) int {
		if _, ok := ids[key]; !ok {
			ids[key] = len(ids)
		}
		return ids[key]
	}
	ruleGroups = make([][]anchorBits, len(rules))
	ruleFold = make([]bool, len(rules))
	for i := range rules {
		ruleFold[i] = strings.HasPrefix(rules[i].re.String(), "(?i")
		kind := map[bool]string{true: "f", false: "e"}[ruleFold[i]]
		for _, g := range rules[i].anchors {
			var set anchorBits
			for _, a := range g {
				set.add(number(kind + a))
			}
			ruleGroups[i] = append(ruleGroups[i], set)
		}
	}
	for _, r := range foldOnly {
		foldOnlyBits.add(number("e" + r))
	}
	if len(ids) > maxAnchors {
		panic("evidence: more than maxAnchors anchors")
	}
	fold, exact := map[string]int{}, map[string]int{}
	for k, id := range ids {
		if k[0] == 'f' {
			fold[k[1:]] = id
		} else {
			exact[k[1:]] = id
		}
	}
	foldAnchors, exactAnchors = newAutomaton(fold, true), newAutomaton(exact, false)
}

// scan is the text Redact works on and what it has found in it.
type scan struct {
	s string
	// lower is s with its ASCII letters in lower case (byte for byte), made on first use.
	lower string
	// found are the anchors s holds.
	found anchorBits
	// unsure says s holds a foldOnly rune: every rule runs on the whole text.
	unsure bool
}

func newScan(s string) *scan {
	t := &scan{}
	t.reset(s)
	return t
}

// reset makes s the text, after a rule changed it.
func (t *scan) reset(s string) {
	t.s, t.lower, t.found = s, "", anchorBits{}
	foldAnchors.find(s, &t.found)
	exactAnchors.find(s, &t.found)
	t.unsure = t.found.meets(&foldOnlyBits)
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

// mayMatch says rule ri's expression may match in s: every group of its anchors has
// one there, or the text is unsure.
func (t *scan) mayMatch(ri int) bool {
	if t.unsure {
		return true
	}
	for g := range ruleGroups[ri] {
		if !t.found.meets(&ruleGroups[ri][g]) {
			return false
		}
	}
	return true
}

// lineMatches returns the matches of line-local rule ri in s, in order: those of its
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
		if !holdsAll(hay[w.from:w.to], r.anchors[1:]) {
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

// holdsAll says s holds an anchor of every group.
func holdsAll(s string, groups [][]string) bool {
	for _, g := range groups {
		if !slices.ContainsFunc(g, func(a string) bool { return strings.Contains(s, a) }) {
			return false
		}
	}
	return true
}

// automaton finds which of a set of strings a text holds, in one pass (Aho-Corasick,
// as a table of transitions over the classes of bytes the strings use).
type automaton struct {
	// class numbers the bytes: 0 for a byte in no string; with fold, an upper-case
	// letter has its lower case's.
	class  [256]uint8
	nclass int
	// next is the state after a byte: next[state*nclass+class].
	next []int32
	// out are the strings that end at a state (with those of its suffixes).
	out []anchorBits
	// ends says a state has some out.
	ends []bool
}

// newAutomaton builds the automaton of strings (their numbers by string); with fold
// they are lower case and found in any case of their ASCII letters.
func newAutomaton(strs map[string]int, fold bool) *automaton {
	a := &automaton{nclass: 1}
	for s := range strs {
		for i := 0; i < len(s); i++ {
			if a.class[s[i]] == 0 {
				a.class[s[i]] = uint8(a.nclass)
				a.nclass++
			}
		}
	}
	if fold {
		for c := 'A'; c <= 'Z'; c++ {
			a.class[c] = a.class[c+'a'-'A']
		}
	}
	goTo, fail := a.trie(strs)
	a.link(goTo, fail)
	return a
}

// trie adds the states of the strings' trie (goTo[state][class], -1 for none) and
// their outs.
func (a *automaton) trie(strs map[string]int) (goTo [][]int32, fail []int32) {
	newState := func() int32 {
		row := make([]int32, a.nclass)
		for i := range row {
			row[i] = -1
		}
		goTo = append(goTo, row)
		a.out = append(a.out, anchorBits{})
		return int32(len(goTo) - 1)
	}
	newState()
	for s, id := range strs {
		st := int32(0)
		for i := 0; i < len(s); i++ {
			c := a.class[s[i]]
			if goTo[st][c] < 0 {
				n := newState()
				goTo[st][c] = n
			}
			st = goTo[st][c]
		}
		a.out[st].add(id)
	}
	return goTo, make([]int32, len(goTo))
}

// link fills the transitions in breadth-first order: a missing one follows the
// state's failure link (its longest proper suffix that is a state), and a state's
// outs take those of its failure link.
func (a *automaton) link(goTo [][]int32, fail []int32) {
	n := len(goTo)
	a.next = make([]int32, n*a.nclass)
	a.ends = make([]bool, n)
	queue := []int32{0}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		a.out[st].union(&a.out[fail[st]])
		a.ends[st] = a.out[st] != anchorBits{}
		for c := 0; c < a.nclass; c++ {
			t := goTo[st][c]
			switch {
			case t >= 0 && c != 0:
				if st != 0 {
					fail[t] = a.next[int(fail[st])*a.nclass+c]
				}
				a.next[int(st)*a.nclass+c] = t
				queue = append(queue, t)
			case st != 0:
				a.next[int(st)*a.nclass+c] = a.next[int(fail[st])*a.nclass+c]
			}
		}
	}
}

// find adds the strings s holds to found.
func (a *automaton) find(s string, found *anchorBits) {
	st := int32(0)
	for i := 0; i < len(s); i++ {
		st = a.next[int(st)*a.nclass+int(a.class[s[i]])]
		if a.ends[st] {
			found.union(&a.out[st])
		}
	}
}
