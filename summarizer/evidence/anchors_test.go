package evidence

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The anchors a rule is skipped without (rule.anchors) are proved here from each
// expression's syntax tree, not trusted: every string the expression can match holds,
// for each group, one of its anchors as scan finds it.

// lit is a string an expression matches: exactly, or (fold) in any case of its letters.
type lit struct {
	s    string
	fold bool
}

// maxExact bounds the strings exact enumerates.
const maxExact = 4096

// exact returns every string re matches, when they are at most maxExact.
func exact(re *syntax.Regexp) ([]lit, bool) {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return []lit{{}}, true
	case syntax.OpLiteral:
		return []lit{{string(re.Rune), re.Flags&syntax.FoldCase != 0}}, true
	case syntax.OpCharClass:
		var out []lit
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(out) == 32 {
					return nil, false
				}
				out = append(out, lit{s: string(r)})
			}
		}
		return out, true
	case syntax.OpCapture:
		return exact(re.Sub[0])
	case syntax.OpQuest:
		e, ok := exact(re.Sub[0])
		return append(e, lit{}), ok
	case syntax.OpConcat:
		return exactRun(re.Sub, false)
	case syntax.OpAlternate:
		var out []lit
		for _, sub := range re.Sub {
			e, ok := exact(sub)
			if !ok || len(out)+len(e) > maxExact {
				return nil, false
			}
			out = append(out, e...)
		}
		return out, true
	}
	return nil, false
}

// exactRun returns every string the concatenation of subs matches, when they are few;
// a repetition of at least once first (or last, when lastRep) counts as its one
// repetition next to the others: every match holds what that gives.
func exactRun(subs []*syntax.Regexp, lastRep bool) ([]lit, bool) {
	out := []lit{{}}
	for i, sub := range subs {
		e, ok := exact(sub)
		if rep, once := atLeastOnce(sub); !ok && (i == 0 || i == len(subs)-1 && lastRep) && once {
			e, ok = exact(rep)
		}
		if !ok || len(out)*len(e) > maxExact {
			return nil, false
		}
		var next []lit
		for _, a := range out {
			for _, b := range e {
				next = append(next, lit{a.s + b.s, a.fold || b.fold})
			}
		}
		out = next
	}
	return out, true
}

// atLeastOnce returns what re repeats when it is a repetition of at least once (in
// captures or not).
func atLeastOnce(re *syntax.Regexp) (*syntax.Regexp, bool) {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	if re.Op == syntax.OpPlus || re.Op == syntax.OpRepeat && re.Min >= 1 {
		return re.Sub[0], true
	}
	return nil, false
}

// covered says every string re matches holds one of anchors, as scan finds them: in
// the lower-case text when fold (the rule is (?i)), else as written. A text that holds
// a foldOnly rune is searched whole by every rule.
func covered(re *syntax.Regexp, anchors []string, fold bool) bool {
	if e, ok := exact(re); ok {
		for _, l := range e {
			if !litCovered(l, anchors, fold) {
				return false
			}
		}
		return true
	}
	switch re.Op {
	case syntax.OpCapture, syntax.OpPlus:
		return covered(re.Sub[0], anchors, fold)
	case syntax.OpRepeat:
		return re.Min >= 1 && covered(re.Sub[0], anchors, fold)
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if !covered(sub, anchors, fold) {
				return false
			}
		}
		return true
	case syntax.OpConcat:
		for i := range re.Sub {
			if covered(re.Sub[i], anchors, fold) {
				return true
			}
			for j := i + 1; j <= len(re.Sub); j++ {
				e, ok := exactRun(re.Sub[i:j], true)
				if !ok {
					break
				}
				if j > i+1 && allCovered(e, anchors, fold) {
					return true
				}
				// and the character that follows the run
				if e, ok = exactRun(re.Sub[i:j], false); !ok {
					continue
				}
				if f, ok := firsts(re.Sub[j:]); ok && allCovered(product(e, f), anchors, fold) {
					return true
				}
			}
		}
	}
	return false
}

func allCovered(e []lit, anchors []string, fold bool) bool {
	return !slices.ContainsFunc(e, func(l lit) bool { return !litCovered(l, anchors, fold) })
}

func product(a, b []lit) []lit {
	var out []lit
	for _, x := range a {
		for _, y := range b {
			out = append(out, lit{x.s + y.s, x.fold || y.fold})
		}
	}
	return out
}

// firsts returns the characters a match of the concatenation of subs can start with;
// false when it may be empty or they are not known.
func firsts(subs []*syntax.Regexp) ([]lit, bool) {
	if len(subs) == 0 {
		return nil, false
	}
	n, rest := subs[0], subs[1:]
	with := func(sub ...*syntax.Regexp) ([]lit, bool) { return firsts(append(slices.Clone(sub), rest...)) }
	switch n.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return firsts(rest)
	case syntax.OpLiteral:
		return []lit{{string(n.Rune[0]), n.Flags&syntax.FoldCase != 0}}, true
	case syntax.OpCharClass:
		return exact(n)
	case syntax.OpCapture, syntax.OpPlus:
		return with(n.Sub[0])
	case syntax.OpConcat:
		return with(n.Sub...)
	case syntax.OpRepeat:
		if n.Min >= 1 {
			return with(n.Sub[0])
		}
	}
	var branches [][]*syntax.Regexp
	switch n.Op {
	case syntax.OpAlternate:
		for _, b := range n.Sub {
			branches = append(branches, []*syntax.Regexp{b})
		}
	case syntax.OpQuest, syntax.OpStar, syntax.OpRepeat:
		branches = [][]*syntax.Regexp{{n.Sub[0]}, nil}
	default:
		return nil, false
	}
	var out []lit
	for _, b := range branches {
		f, ok := with(b...)
		if !ok || len(out) > maxExact {
			return nil, false
		}
		out = append(out, f...)
	}
	return out, true
}

// asciiLower returns s with its ASCII letters in lower case, byte for byte: the text
// a (?i) pattern's anchors are found in.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// litCovered says every text that holds a match of l holds one of anchors as scan
// finds them.
func litCovered(l lit, anchors []string, fold bool) bool {
	for _, a := range anchors {
		switch {
		case fold && strings.Contains(asciiLower(l.s), a):
			return true // a variant of l in ASCII holds a in lower case; one that is not holds a foldOnly rune
		case fold && !l.fold && slices.ContainsFunc(foldOnly, func(r string) bool { return strings.Contains(l.s, r) }):
			return true // the text holds a foldOnly rune: searched whole
		case !fold && strings.Contains(l.s, a) && (!l.fold || !strings.ContainsFunc(a, unicode.IsLetter)):
			return true
		}
	}
	return false
}

// lineLocalProblem says why re may match across a line feed (other than as its first
// byte), or read past a window of a line the way it would not in the whole text; ""
// when it cannot. re must be a concatenation x0 x1 ... xn where x1...xn match no line
// feed and no end of text (\z, $ without m), and x0 matches a line feed only as a
// branch that is one character: then a match that starts at a window's first byte (the
// line feed) starts with that branch, as it does in the whole text, and reads the rest
// of the line as the whole text reads it.
func lineLocalProblem(re *syntax.Regexp) string {
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	for _, x := range subs {
		if has(x, func(n *syntax.Regexp) bool { return n.Op == syntax.OpEndText }) {
			return "reads the end of the text: " + x.String()
		}
	}
	for _, x := range subs[1:] {
		if has(x, matchesLineFeed) {
			return "matches a line feed after its first byte: " + x.String()
		}
	}
	branches := []*syntax.Regexp{subs[0]}
	if subs[0].Op == syntax.OpAlternate {
		branches = subs[0].Sub
	}
	for _, b := range branches {
		if has(b, matchesLineFeed) && !(b.Op == syntax.OpCharClass || b.Op == syntax.OpAnyChar || b.Op == syntax.OpLiteral && len(b.Rune) == 1) {
			return "its first part matches a line feed other than as one character: " + b.String()
		}
	}
	return ""
}

// sepProblem says why re may match a byte of seps, or read what is around a stretch
// between two of them the way it would not in the whole text; "" when it cannot. seps
// must be ASCII and not word characters (\b reads one as it reads the edge of a text),
// and re must not read the start or end of a text or line (a stretch starts or ends
// where the whole text does not).
func sepProblem(re *syntax.Regexp, seps string) string {
	for i := 0; i < len(seps); i++ {
		if c := seps[i]; c >= 0x80 || syntax.IsWordChar(rune(c)) {
			return fmt.Sprintf("sep %q is not an ASCII non-word byte", c)
		}
	}
	if has(re, func(n *syntax.Regexp) bool {
		switch n.Op {
		case syntax.OpBeginText, syntax.OpEndText, syntax.OpBeginLine, syntax.OpEndLine:
			return true
		}
		return false
	}) {
		return "reads the start or end of a text or line"
	}
	for i := 0; i < len(seps); i++ {
		c := rune(seps[i])
		if has(re, func(n *syntax.Regexp) bool { return matchesRune(n, c) }) {
			return fmt.Sprintf("matches sep %q", c)
		}
	}
	return ""
}

// matchesRune says node n (not its subexpressions) may match c, an ASCII non-letter.
func matchesRune(n *syntax.Regexp, c rune) bool {
	switch n.Op {
	case syntax.OpAnyChar:
		return true
	case syntax.OpAnyCharNotNL:
		return c != '\n'
	case syntax.OpLiteral:
		return slices.Contains(n.Rune, c)
	case syntax.OpCharClass:
		for i := 0; i+1 < len(n.Rune); i += 2 {
			if n.Rune[i] <= c && c <= n.Rune[i+1] {
				return true
			}
		}
	}
	return false
}

func matchesLineFeed(n *syntax.Regexp) bool {
	switch n.Op {
	case syntax.OpAnyChar:
		return true
	case syntax.OpLiteral:
		return slices.Contains(n.Rune, '\n')
	case syntax.OpCharClass:
		for i := 0; i+1 < len(n.Rune); i += 2 {
			if n.Rune[i] <= '\n' && '\n' <= n.Rune[i+1] {
				return true
			}
		}
	}
	return false
}

// has says re or a node under it satisfies f.
func has(re *syntax.Regexp, f func(*syntax.Regexp) bool) bool {
	if f(re) {
		return true
	}
	return slices.ContainsFunc(re.Sub, func(s *syntax.Regexp) bool { return has(s, f) })
}

func parse(t *testing.T, expr string) *syntax.Regexp {
	t.Helper()
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// TestPatternAnchors: every match of each pattern's expression (each rule's and the
// extraction's) holds an anchor of each of its groups, so a text (or a line) without
// them is rightly not searched.
func TestPatternAnchors(t *testing.T) {
	if len(patterns) != len(rules)+len(extractPatterns) {
		t.Fatalf("%d patterns for %d rules and %d extraction patterns", len(patterns), len(rules), len(extractPatterns))
	}
	for i, p := range patterns {
		if len(p.anchors) == 0 {
			t.Errorf("pattern %d has no anchors: %s", i, p.re)
		}
		re := parse(t, p.re.String())
		for _, g := range p.anchors {
			if len(g) == 0 || slices.Contains(g, "") {
				t.Errorf("pattern %d: an empty anchor group or an empty anchor: %q", i, g)
			}
			if p.lineLocal && slices.ContainsFunc(g, func(a string) bool { return strings.Contains(a, "\n") }) {
				t.Errorf("pattern %d is line-local and has an anchor with a line feed, which no line holds: %q", i, g)
			}
			if !covered(re, g, p.fold) {
				t.Errorf("pattern %d: a match of %s may hold none of %q (fold %v)", i, p.re, g, p.fold)
			}
		}
	}
}

// TestPatternSeps: the patterns run between their seps match no sep, and their
// anchors hold none.
func TestPatternSeps(t *testing.T) {
	n := 0
	for i, p := range patterns {
		if p.seps == "" {
			continue
		}
		n++
		if p.lineLocal {
			t.Errorf("pattern %d (%s) has seps and is line-local", i, p.re)
		}
		if problem := sepProblem(parse(t, p.re.String()), p.seps); problem != "" {
			t.Errorf("pattern %d (%s) has seps %q but %s", i, p.re, p.seps, problem)
		}
		for _, g := range p.anchors {
			if slices.ContainsFunc(g, func(a string) bool { return strings.ContainsAny(a, p.seps) }) {
				t.Errorf("pattern %d (%s): an anchor holds a sep: %q", i, p.re, g)
			}
		}
	}
	if n == 0 {
		t.Fatal("no pattern with seps: the check proves nothing")
	}
}

// TestPatternLineLocal: the patterns run line by line match within one line.
func TestPatternLineLocal(t *testing.T) {
	n := 0
	for i, p := range patterns {
		if !p.lineLocal {
			continue
		}
		n++
		if problem := lineLocalProblem(parse(t, p.re.String())); problem != "" {
			t.Errorf("pattern %d (%s) is marked line-local but %s", i, p.re, problem)
		}
	}
	if n == 0 {
		t.Fatal("no line-local pattern: the check proves nothing")
	}
}

// TestAnchorProofs: the proofs above reject what they must (so that they can fail).
func TestAnchorProofs(t *testing.T) {
	for _, tc := range []struct {
		expr    string
		anchors []string
		fold    bool
		want    bool
	}{
		{`a*key=`, []string{"key="}, false, true},
		{`(?:api[_-]?key|token)=`, []string{"key=", "token="}, false, true},
		{`p(?:assword|asswd)|pgpassword`, []string{"pass"}, false, true},
		{`[ \t]+:?=`, []string{" =", "\t=", ":="}, false, true},
		{`(?:key)?x`, []string{"key"}, false, false},
		{`ke*y`, []string{"key"}, false, false},
		{`(?i)key`, []string{"key"}, false, false}, // a case-sensitive anchor misses KEY
		{`(?i)key`, []string{"key"}, true, true},
		{`(?i)KEY`, []string{"KEY"}, true, false}, // a (?i) anchor is looked for in lower case
		{`(?i)--`, []string{"--"}, false, true},
		{`[A-Za-z0-9]{40}`, []string{"a"}, false, false},
		{`(?:a|bb)key[ \t]*:`, []string{"key:", "key ", "key\t"}, false, true},
		{`(?:a|bb)key[ \t]*:`, []string{"key:", "key "}, false, false},
		{`key(?:: *int)?(?:=|:=)`, []string{"key:", "key="}, false, true},
		{`key(?:: *int)?(?:=|:=)?`, []string{"key:", "key="}, false, false},
		{`ke+y=`, []string{"ey="}, false, true},
		{`ke+y=`, []string{"key="}, false, false},
		{`#([0-9]{1,7})\b`, []string{"#1", "#2", "#3", "#4", "#5", "#6", "#7", "#8", "#9", "#0"}, false, true},
		{`#([0-9]{1,7})\b`, []string{"#1", "#2", "#3", "#4", "#5", "#6", "#7", "#8", "#9"}, false, false},
	} {
		if got := covered(parse(t, tc.expr), tc.anchors, tc.fold); got != tc.want {
			t.Errorf("covered(%s, %q, fold %v) = %v; want %v", tc.expr, tc.anchors, tc.fold, got, tc.want)
		}
	}
	for _, tc := range []struct {
		expr, seps string
		ok         bool
	}{
		{`\b[0-9]+(?:\.[0-9]+)?\s?ms\b`, `;,"`, true},
		{`\b[0-9]+(?:\.[0-9]+)?\s?ms\b`, `;. `, false}, // it matches . and a blank
		{`(?i)commit:?\s*[0-9a-f]+`, `;_`, false},      // _ is a word character
		{`^[0-9]+`, `;`, false},
		{`[0-9]+$`, `;`, false},
		{`a.b`, `;`, false},
		{`a[^x]b`, `;`, false},
	} {
		if got := sepProblem(parse(t, tc.expr), tc.seps) == ""; got != tc.ok {
			t.Errorf("sepProblem(%s, %q) says fine %v; want %v", tc.expr, tc.seps, got, tc.ok)
		}
	}
	for expr, local := range map[string]bool{
		`(?:^|[^a-z])key=[^\s]+`:    true,
		`(?im)^[ \t]*key:[ \t]+\S+`: true,
		`key\s*=`:                   false,
		`(?s)key=.*`:                false,
		`key=\S+\z`:                 false,
		`(?:\b\s)key`:               false,
	} {
		if got := lineLocalProblem(parse(t, expr)) == ""; got != local {
			t.Errorf("lineLocalProblem(%s) says line-local %v; want %v", expr, got, local)
		}
	}
}

// TestFoldOnlyRunes: the only non-ASCII runes (?i) matches as an ASCII letter are
// foldOnly's.
func TestFoldOnlyRunes(t *testing.T) {
	var got []string
	for c := 'A'; c <= 'z'; c++ {
		if !unicode.IsLetter(c) {
			continue
		}
		for r := unicode.SimpleFold(c); r != c; r = unicode.SimpleFold(r) {
			if r > unicode.MaxASCII && !slices.Contains(got, string(r)) {
				got = append(got, string(r))
			}
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(foldOnly))
	if !slices.Equal(got, want) {
		t.Fatalf("non-ASCII runes folded with ASCII letters: %q; foldOnly %q", got, want)
	}
}

// TestRulesAreTheReferences: the rules are the reference's, in its order, and so are
// the extraction's expressions: only how they are run changed.
func TestRulesAreTheReferences(t *testing.T) {
	if len(rules) != len(refRules) {
		t.Fatalf("%d rules; the reference has %d", len(rules), len(refRules))
	}
	for i := range rules {
		if rules[i].re.String() != refRules[i].re.String() {
			t.Errorf("rule %d is %s; the reference's is %s", i, rules[i].re, refRules[i].re)
		}
	}
	for _, pair := range [][2]*regexp.Regexp{{ticketRE, refTicketRE}, {cveRE, refCveRE}, {issueRE, refIssueRE},
		{commitRE, refCommitRE}, {fullCommitRE, refFullCommitRE}, {httpRE, refHttpRE}, {lintRE, refLintRE}, {numberRE, refNumberRE}} {
		if pair[0].String() != pair[1].String() {
			t.Errorf("extraction expression %s; the reference's is %s", pair[0], pair[1])
		}
	}
}
