// Code copied from shell.go as it was before the one-pass scanner, every
// package-level name prefixed with ref: the trusted reference the differential tests
// and fuzz targets compare the fast paths with. Do not edit but to fix it.

package evidence

import (
	"path"
	"regexp"
	"strings"
)

// pathRef is a path a command names, and whether the command writes it.
type refPathRef struct {
	path    string
	changed bool
}

// heredocRE finds a here-document's delimiter: << EOF, <<'EOF', <<-"EOF".
var refHeredocRE = regexp.MustCompile(`<<-?\s*['"]?([A-Za-z_][A-Za-z0-9_]*)['"]?`)

// wrappers run the command that follows them.
var refWrappers = map[string]bool{"sudo": true, "time": true, "nohup": true, "env": true, "command": true, "exec": true, "xargs": true, "timeout": true, "nice": true}

// writers change every path argument; movers change their last one and read the rest.
var (
	refWriters = map[string]bool{"touch": true, "mkdir": true, "rm": true, "rmdir": true, "tee": true, "truncate": true, "chmod": true, "chown": true, "unlink": true, "shred": true}
	refMovers  = map[string]bool{"mv": true, "cp": true, "install": true, "ln": true, "rsync": true}
)

// patternFirst are commands whose first operand is a pattern or program, not a path.
var refPatternFirst = map[string]bool{"grep": true, "egrep": true, "fgrep": true, "rg": true, "ag": true, "awk": true, "gawk": true, "sed": true}

// scanCommand returns the paths a shell command names, in order, each once, with
// changed set when the command writes it (a redirection, sed -i, tee, touch, rm, mv, cp
// to it...). Here-document bodies and inline programs (python -c) are not read.
func refScanCommand(cmd string) []refPathRef {
	var out []refPathRef
	idx := map[string]int{}
	cwd := ""
	add := func(tok string, changed bool) {
		p, ok := refNormalizePath(tok, true)
		if !ok {
			return
		}
		if cwd != "" && !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "~") {
			p = path.Join(cwd, p)
		}
		if i, seen := idx[p]; seen {
			out[i].changed = out[i].changed || changed
			return
		}
		idx[p] = len(out)
		out = append(out, refPathRef{p, changed})
	}
	lines := strings.Split(cmd, "\n")
	if len(lines) > refMaxCommandLines {
		lines = lines[:refMaxCommandLines]
	}
	var heredoc []string // delimiters still open
	for _, line := range lines {
		if len(heredoc) > 0 {
			if strings.TrimSpace(line) == heredoc[0] {
				heredoc = heredoc[1:]
			}
			continue
		}
		for _, m := range refHeredocRE.FindAllStringSubmatch(line, -1) {
			heredoc = append(heredoc, m[1])
		}
		for _, simple := range refSplitSimple(refLex(line)) {
			if dir, ok := refScanSimple(simple, add); ok {
				cwd = dir
			}
		}
	}
	return out
}

// token is one word of a command line, or an operator (op set).
type refToken struct {
	text string
	op   bool
}

// lex splits a line into words and operators, with quotes removed from words. A word
// that was quoted keeps its characters; a # outside quotes starts a comment.
func refLex(line string) []refToken {
	var (
		out   []refToken
		b     strings.Builder
		inTok bool
		quote byte
	)
	flush := func() {
		if inTok {
			out = append(out, refToken{text: b.String()})
			b.Reset()
			inTok = false
		}
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		if quote != 0 {
			if ch == quote {
				quote = 0
				continue
			}
			if ch == '\\' && quote == '"' && i+1 < len(line) {
				i++
				ch = line[i]
			}
			b.WriteByte(ch)
			continue
		}
		switch ch {
		case '\'', '"':
			quote, inTok = ch, true
		case '\\':
			if i+1 < len(line) {
				i++
				b.WriteByte(line[i])
				inTok = true
			}
		case ' ', '\t', '\r':
			flush()
		case '#':
			if !inTok {
				return out
			}
			b.WriteByte(ch)
		case ';', '|', '&', '(', ')', '<', '>':

			if (ch == '>' || ch == '<') && inTok && refIsDigits(b.String()) {
				b.Reset()
				inTok = false
			}
			flush()
			op := string(ch)
			for i+1 < len(line) && strings.IndexByte(";|&<>", line[i+1]) >= 0 && len(op) < 3 {
				i++
				op += string(line[i])
			}
			out = append(out, refToken{text: op, op: true})
		default:
			b.WriteByte(ch)
			inTok = true
		}
	}
	flush()
	return out
}

func refIsDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// splitSimple splits tokens into simple commands at ; | & && || ( ), keeping
// redirections (< > >> 2> &>) with their command.
func refSplitSimple(toks []refToken) [][]refToken {
	var out [][]refToken
	var cur []refToken
	for _, t := range toks {
		if t.op && !strings.ContainsAny(t.text, "<>") {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// scanSimple reads one simple command's redirections and operands. For a cd to an
// absolute directory it returns that directory and true: relative paths after it, in the
// same command, are resolved against it.
func refScanSimple(toks []refToken, add func(string, bool)) (cd string, isCD bool) {
	words := refSkipWrappers(refRedirections(toks, add))
	if len(words) == 0 {
		return "", false
	}
	name := path.Base(words[0])
	args := words[1:]
	if name == "cd" {
		if len(args) == 1 {
			if dir, ok := refNormalizePath(args[0], true); ok && strings.HasPrefix(dir, "/") {
				add(dir, false)
				return dir, true
			}
		}
		return "", true
	}
	operands, code := refScanArgs(name, args, add)
	if code {
		return "", false
	}
	refAddOperands(name, operands, refInPlace(name, args), add)
	return "", false
}

// redirections adds the files of a simple command's redirections and returns its words.
func refRedirections(toks []refToken, add func(string, bool)) (words []string) {
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !t.op {
			words = append(words, t.text)
			continue
		}

		if i+1 < len(toks) && !toks[i+1].op && !strings.Contains(t.text, "<<") && !strings.HasSuffix(t.text, "&") {
			add(toks[i+1].text, strings.Contains(t.text, ">"))
			i++
		}
	}
	return words
}

// skipWrappers drops the leading assignments and wrappers (sudo, timeout 30, env X=1): the
// command after them is the one that runs.
func refSkipWrappers(words []string) []string {
	for len(words) > 0 {
		w := words[0]
		switch {
		case strings.Contains(w, "=") && !strings.HasPrefix(w, "-"):
			words = words[1:]
		case refWrappers[path.Base(w)]:
			words = words[1:]
			for len(words) > 0 && (strings.HasPrefix(words[0], "-") || refIsDigits(strings.TrimRight(words[0], "smhd"))) {
				words = words[1:]
			}
		default:
			return words
		}
	}
	return words
}

// inPlace says whether sed or perl edits its files in place.
func refInPlace(name string, args []string) bool {
	in := false
	if name == "sed" || name == "perl" {
		for _, a := range args {
			if a == "-i" || strings.HasPrefix(a, "-i") || a == "--in-place" || strings.HasPrefix(a, "--in-place=") || (name == "perl" && strings.HasPrefix(a, "-pi")) {
				in = true
			}
		}
	}
	return in
}

// scanArgs sorts command name's arguments: an option's =value is added as read, the
// operands are returned (without a grep-like command's pattern), and code says the
// command runs an inline program (-c), whose text is not operands.
func refScanArgs(name string, args []string, add func(string, bool)) (operands []string, code bool) {
	skipNext := false
	explicitProgram := false
	for _, a := range args {
		if skipNext {
			skipNext = false
			continue
		}
		switch {
		case a == "-c" && (strings.HasPrefix(name, "python") || name == "bash" || name == "sh" || name == "node" || name == "ruby"):
			return nil, true
		case a == "-m" && strings.HasPrefix(name, "python"):
			skipNext = true
		case a == "-e" || a == "--expression" || a == "-f" || a == "--regexp":
			explicitProgram = true
			skipNext = a != "-f"
		case strings.HasPrefix(a, "-"):
			if _, v, ok := strings.Cut(a, "="); ok {
				add(v, false)
			}
		default:
			operands = append(operands, a)
		}
	}
	if refPatternFirst[name] && !explicitProgram && len(operands) > 0 {
		operands = operands[1:]
	}
	return operands, false
}

// addOperands adds command name's operands, written or read as the command does: a
// writer writes them, a mover (cp, mv) writes its destination (mv its sources too), a
// tool with subcommands only reads, the others write only when editing in place.
func refAddOperands(name string, operands []string, inPlace bool, add func(string, bool)) {
	switch {
	case name == "git" || name == "go" || name == "npm" || name == "pip" || name == "cargo" || name == "docker" || name == "kubectl":

		for _, a := range operands {
			add(a, false)
		}
	case refWriters[name]:
		for _, a := range operands {
			add(a, true)
		}
	case refMovers[name] && len(operands) >= 2:
		for _, a := range operands[:len(operands)-1] {
			add(a, name == "mv")
		}
		add(operands[len(operands)-1], true)
	default:
		for _, a := range operands {
			add(a, inPlace)
		}
	}
}

// hashRE is an abbreviated or full commit hash.
var refHashRE = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// gitRefCommands are git subcommands whose operands may be commits.
var refGitRefCommands = map[string]bool{"show": true, "checkout": true, "revert": true, "cherry-pick": true, "reset": true,
	"diff": true, "log": true, "rebase": true, "switch": true, "bisect": true, "blame": true, "branch": true, "tag": true}

// commitArgs returns the commit hashes a command's git invocations name.
func refCommitArgs(cmd string) []string {
	if !strings.Contains(cmd, "git") {
		return nil
	}
	var out []string
	lines := strings.Split(cmd, "\n")
	for _, line := range lines[:min(len(lines), refMaxCommandLines)] {
		for _, simple := range refSplitSimple(refLex(line)) {
			var words []string
			for _, t := range simple {
				if !t.op {
					words = append(words, t.text)
				}
			}
			for i := 0; i+1 < len(words); i++ {
				if path.Base(words[i]) != "git" || !refGitRefCommands[words[i+1]] {
					continue
				}
				for _, w := range words[i+2:] {
					w, _, _ = strings.Cut(w, "..")
					if i := strings.IndexAny(w, "^~"); i >= 0 {
						w = w[:i]
					}
					if refIsCommitHash(w) {
						out = append(out, w)
					}
				}
				break
			}
		}
	}
	return out
}

// isCommitHash says s is 7–40 lower-case hex characters with a letter and a digit.
func refIsCommitHash(s string) bool {
	return refHashRE.MatchString(s) && strings.ContainsAny(s, "abcdef") && strings.ContainsAny(s, "0123456789")
}
