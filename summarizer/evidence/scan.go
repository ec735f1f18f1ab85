package evidence

import (
	"regexp"
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
type anchorBits [8]uint64

func (b *anchorBits) add(id int) {
	if id >= maxAnchors {
		panic("evidence: more than maxAnchors anchors")
	}
	b[id/64] |= 1 << (id % 64)
}

func (b *anchorBits) union(o *anchorBits) {
	for i := range b {
		b[i] |= o[i]
	}
}

func (b *anchorBits) meets(o *anchorBits) bool {
	for i := range b {
		if b[i]&o[i] != 0 {
			return true
		}
	}
	return false
}

// maxAnchors bounds the distinct anchors of all rules, foldOnly's included.
const maxAnchors = len(anchorBits{}) * 64

// A pattern is an expression with its anchors, looked for in one pass over a text for
// every pattern at once: each of rules, and the extraction's expressions.
type pattern struct {
	re *regexp.Regexp
	// anchors are what every match holds: for each group, one of its strings. A text
	// without them is not searched. In a (?i) expression they are written in lower case
	// and found whatever the case of their ASCII letters; otherwise as written.
	// TestPatternAnchors proves them from each expression's syntax tree.
	anchors [][]string
	// lineLocal says no match holds a line feed but as its first byte: the expression is
	// run only on the lines that hold the anchors (each with the line feed before it).
	// TestPatternLineLocal proves it from the syntax tree.
	lineLocal bool
	// seps are bytes no match holds (ASCII, not word characters): the expression is run
	// only on the stretches between them that hold the anchors. TestPatternSeps proves
	// it from the syntax tree.
	seps string
	// fold says the expression is (?i); groups are the anchor groups as sets of
	// numbered anchors; finders find each group's anchors in a line (set by init).
	fold    bool
	groups  []anchorBits
	finders []*automaton
	isSep   [256]bool
}

// patterns are every pattern: rulePatterns (one for each rule, in order), then the
// extraction's.
var (
	rulePatterns = make([]*pattern, len(rules))
	patterns     []*pattern
)

// The anchors of every pattern, numbered (anchorIDs: "f" for one found in any case,
// else "e", then the anchor); foldOnlyBits is the set of the foldOnly runes;
// foldAnchors and exactAnchors find them in a text.
var (
	anchorIDs    = map[string]int{}
	foldOnlyBits anchorBits
	foldAnchors  *automaton
	exactAnchors *automaton
)

func init() {
	for i, r := range rules {
		rulePatterns[i] = &pattern{re: r.re, anchors: r.anchors, lineLocal: r.lineLocal}
	}
	patterns = append(slices.Clone(rulePatterns), extractPatterns...)
	ids := anchorIDs
	number := func(key string) int {
		if _, ok := ids[key]; !ok {
			ids[key] = len(ids)
		}
		return ids[key]
	}
	for _, p := range patterns {
		p.fold = strings.HasPrefix(p.re.String(), "(?i")
		kind := map[bool]string{true: "f", false: "e"}[p.fold]
		for _, g := range p.anchors {
			var set anchorBits
			own := map[string]int{}
			for _, a := range g {
				set.add(number(kind + a))
				own[a] = len(own)
			}
			p.groups = append(p.groups, set)
			if p.lineLocal || p.seps != "" {
				p.finders = append(p.finders, newAutomaton(own, p.fold))
			}
		}
	}
	for _, p := range patterns {
		for i := 0; i < len(p.seps); i++ {
			p.isSep[p.seps[i]] = true
		}
	}
	for _, r := range foldOnly {
		foldOnlyBits.add(number("e" + r))
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
	// found are the anchors s holds.
	found anchorBits
	// unsure says s holds a foldOnly rune: every rule runs on the whole text.
	unsure bool
}

func newScan(s string) scan {
	var t scan
	t.reset(s)
	return t
}

// reset makes s the text, after a rule changed it.
func (t *scan) reset(s string) {
	t.s, t.found = s, anchorBits{}
	foldAnchors.find(s, &t.found)
	exactAnchors.find(s, &t.found)
	t.unsure = t.found.meets(&foldOnlyBits)
}

// mayMatch says p's expression may match in s: every group of its anchors has one
// there, or the text is unsure.
func (t *scan) mayMatch(p *pattern) bool {
	if t.unsure {
		return true
	}
	for g := range p.groups {
		if !t.found.meets(&p.groups[g]) {
			return false
		}
	}
	return true
}

// matches returns what p.re.FindAllStringSubmatchIndex(s, n) returns, without running
// the expression on a text that lacks its anchors, nor, for a line-local pattern, on
// a line that does.
func (t *scan) matches(p *pattern, n int) [][]int {
	switch {
	case !t.mayMatch(p):
		return nil
	case t.unsure || !p.lineLocal && p.seps == "":
		return p.re.FindAllStringSubmatchIndex(t.s, n)
	case p.seps != "":
		return t.windowMatches(p, n, func(end int) (int, int) {
			from, to := end-1, end
			for from > 0 && !p.isSep[t.s[from-1]] {
				from--
			}
			for to < len(t.s) && !p.isSep[t.s[to]] {
				to++
			}
			return from, to
		})
	}
	return t.windowMatches(p, n, func(end int) (int, int) {
		from, to := strings.LastIndexByte(t.s[:end], '\n'), strings.IndexByte(t.s[end:], '\n')
		if to < 0 {
			return max(from, 0), len(t.s)
		}
		return max(from, 0), end + to
	})
}

// windowMatches returns the first n (all when n < 0) matches of p in s, in order:
// those of its expression on each window that holds its anchors. window gives the
// window around an anchor that ends at end: for a line-local pattern its line (from
// the line feed before it, so that the expression reads the line as it reads it in
// s), else the stretch between two of its seps.
func (t *scan) windowMatches(p *pattern, n int, window func(end int) (from, to int)) [][]int {
	var out [][]int
	for at := 0; at < len(t.s) && len(out) != n; {
		end := p.finders[0].index(t.s[at:])
		if end < 0 {
			break
		}
		from, to := window(at + end) // an anchor ends at at+end; it holds no line feed, nor sep
		at = to
		if slices.ContainsFunc(p.finders[1:], func(a *automaton) bool { return a.index(t.s[from:to]) < 0 }) {
			continue
		}
		for _, m := range p.re.FindAllStringSubmatchIndex(t.s[from:to], n-len(out)) {
			for i := range m {
				if m[i] >= 0 {
					m[i] += from
				}
			}
			out = append(out, m)
		}
	}
	return out
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

// index returns where the first of the strings that s holds ends in it, or -1.
func (a *automaton) index(s string) int {
	st := int32(0)
	for i := 0; i < len(s); i++ {
		st = a.next[int(st)*a.nclass+int(a.class[s[i]])]
		if a.ends[st] {
			return i + 1
		}
	}
	return -1
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
