package eval

import (
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/compactor/compactor/schemas"
)

// Truth is what the raw history says happened, found without the evidence extractor:
// the ground truth the final context is scored against.
type Truth struct {
	// Paths are the distinct file paths the agent touched: path-like arguments of its
	// tool calls and path-like tokens of the shell commands it ran.
	Paths []string
	// Commands are the keys of the distinct shell commands it ran: each command's first
	// non-empty line, trimmed.
	Commands []string
	// Changed are the paths it wrote: an editor call that creates, replaces or inserts,
	// a write tool, or a shell redirection, tee, sed -i, touch, mkdir, cp or mv target.
	Changed []string
	// UserTerms are the key terms of the user's messages (see keyTerms).
	UserTerms []string
	// FinalTerms are the key terms of the agent's last words: its last assistant text,
	// or the message of its last finish-like call.
	FinalTerms []string
}

// minCommandKey is the shortest command key counted: shorter ones (ls, pwd, cd ..)
// appear in almost any text, so their "survival" would say nothing.
const minCommandKey = 8

// maxScanBytes bounds the text of one message the extractors read.
const maxScanBytes = 256 << 10

// pathKeys are tool-call argument names whose string value is a path.
var pathKeys = []string{"path", "file_path", "filepath", "file", "filename", "file_name", "dir", "directory",
	"target_file", "old_path", "new_path", "notebook_path"}

// commandKeys are tool-call argument names whose string value is a shell command,
// unless the call also names a path (then it is an editor's sub-command: view, create).
var commandKeys = []string{"command", "cmd", "script"}

// writeSubcommands are an editor's sub-commands that change the file at path.
var writeSubcommands = []string{"create", "str_replace", "insert", "write", "edit", "append", "undo_edit", "apply_patch"}

// writeTools are tool names whose path argument is written.
var writeTools = []string{"write", "edit", "multiedit", "create", "insert", "create_file", "write_file", "edit_file", "apply_patch", "notebookedit"}

// finishTools are tool names whose message argument is the agent's final word.
var finishTools = []string{"finish", "submit", "attempt_completion", "task_complete", "done"}

// Extract reads the ground truth of a conversation.
func Extract(msgs []schemas.Message) Truth {
	var t Truth
	paths, commands, changed := newSet(), newSet(), newSet()
	var userText strings.Builder
	final := ""
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case schemas.RoleUser:
			if userText.Len() < maxScanBytes {
				userText.WriteString(capText(m.Content.String()))
				userText.WriteByte('\n')
			}
		case schemas.RoleAssistant:
			text := capText(m.Content.String())
			if strings.TrimSpace(text) != "" {
				final = text
			}
			for _, block := range fencedShell(text) {
				shellCommand(block, commands, paths, changed)
			}
			for _, tc := range m.ToolCalls {
				if msg := toolCall(tc, commands, paths, changed); msg != "" {
					final = msg
				}
			}
		}
	}
	t.Paths, t.Commands, t.Changed = paths.list, commands.list, changed.list
	t.UserTerms = keyTerms(userText.String(), 20)
	t.FinalTerms = keyTerms(final, 12)
	return t
}

// capText bounds one message's text.
func capText(s string) string {
	if len(s) > maxScanBytes {
		return s[:maxScanBytes]
	}
	return s
}

// toolCall adds what one call touched; it returns the message of a finish-like call.
func toolCall(tc schemas.ToolCall, commands, paths, changed *set) string {
	args := tc.Function.Arguments
	if len(args) > maxScanBytes {
		return ""
	}
	var a map[string]any
	if json.Unmarshal([]byte(args), &a) != nil {
		return ""
	}
	name := strings.ToLower(tc.Function.Name)
	hasPath := false
	for _, k := range pathKeys {
		if p, ok := a[k].(string); ok {
			if p = cleanPath(p); p != "" {
				hasPath = true
				paths.add(p)
				if slices.Contains(writeTools, name) {
					changed.add(p)
				}
			}
		}
	}
	for _, k := range commandKeys {
		c, ok := a[k].(string)
		if !ok {
			continue
		}
		if hasPath {
			if slices.Contains(writeSubcommands, strings.ToLower(c)) {
				for _, pk := range pathKeys {
					if p, ok := a[pk].(string); ok && cleanPath(p) != "" {
						changed.add(cleanPath(p))
					}
				}
			}
			continue
		}
		shellCommand(c, commands, paths, changed)
	}
	if slices.Contains(finishTools, name) {
		for _, k := range []string{"message", "result", "summary", "answer"} {
			if s, ok := a[k].(string); ok && strings.TrimSpace(s) != "" {
				return s
			}
		}
	}
	return ""
}

// fenceRE finds fenced shell blocks (mini-swe-agent writes its commands so).
var fenceRE = regexp.MustCompile("(?s)```(?:bash|sh|shell|console)[ \t]*\n(.*?)```")

func fencedShell(text string) []string {
	var out []string
	for _, m := range fenceRE.FindAllStringSubmatch(text, 64) {
		out = append(out, m[1])
	}
	return out
}

// CommandKey is a command's key: its first non-empty line, trimmed ("" for none).
func CommandKey(cmd string) string {
	for line := range strings.SplitSeq(cmd, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// shellCommand adds a command's key (when long enough to mean something) and the
// paths its words name.
func shellCommand(cmd string, commands, paths, changed *set) {
	if key := CommandKey(cmd); len(key) >= minCommandKey {
		commands.add(key)
	}
	words := shellWords(cmd)
	writeNext := false
	for i, w := range words {
		op, rest := redirect(w)
		if op {
			if rest == "" {
				writeNext = true
				continue
			}
			w = rest
		}
		p := cleanPath(w)
		if p == "" {
			writeNext = false
			continue
		}
		paths.add(p)
		if writeNext || op || writesArg(words, i) {
			changed.add(p)
		}
		writeNext = false
	}
}

// redirect reports whether w is an output redirection (>, >>, 2>, &>), and what
// follows it in the same word.
func redirect(w string) (bool, string) {
	for _, op := range []string{"&>>", "&>", "2>>", "1>>", ">>", "2>", "1>", ">"} {
		if strings.HasPrefix(w, op) {
			return true, w[len(op):]
		}
	}
	return false, ""
}

// writesArg reports whether words[i] is a file the command at the start of its
// pipeline segment writes: tee's, touch's, mkdir's arguments, sed -i's file, the last
// argument of cp and mv.
func writesArg(words []string, i int) bool {
	start := i
	for start > 0 && !isSeparator(words[start-1]) {
		start--
	}
	if start == i {
		return false
	}
	switch words[start] {
	case "tee", "touch", "mkdir", "truncate":
		return true
	case "sed", "perl":
		return slices.ContainsFunc(words[start:i], func(w string) bool { return strings.HasPrefix(w, "-i") || w == "--in-place" })
	case "cp", "mv", "ln", "install":
		end := i + 1
		return end == len(words) || isSeparator(words[end])
	}
	return false
}

func isSeparator(w string) bool {
	switch w {
	case "|", "||", "&&", ";", "&", "(", ")", "{", "}", "then", "do", "else":
		return true
	}
	return false
}

// shellWords splits a command into words: whitespace separates, quotes group (and are
// dropped), and ; | & ( ) are words of their own. It is not a shell parser: it only
// needs to find the words that look like paths.
func shellWords(cmd string) []string {
	if len(cmd) > maxScanBytes {
		cmd = cmd[:maxScanBytes]
	}
	var words []string
	var cur strings.Builder
	var quote rune
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	rs := []rune(cmd)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
				flush()
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			flush()
			quote = r
		case unicode.IsSpace(r):
			flush()
		case r == ';' || r == '|' || r == '&' || r == '(' || r == ')':
			// >& and &> stay inside a redirection word.
			if r == '&' && (strings.HasSuffix(cur.String(), ">") || i+1 < len(rs) && rs[i+1] == '>') {
				cur.WriteRune(r)
				continue
			}
			flush()
			op := string(r)
			if i+1 < len(rs) && (rs[i+1] == '|' || rs[i+1] == '&') && (r == '|' || r == '&') {
				op += string(rs[i+1])
				i++
			}
			words = append(words, op)
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return words
}

// fileExts are the extensions that make a word without a slash a file name.
var fileExts = map[string]bool{}

func init() {
	for e := range strings.FieldsSeq("py pyi pyx ipynb go mod sum js mjs cjs ts tsx jsx json jsonl md rst txt yaml yml toml cfg ini " +
		"sh bash zsh c h cc cpp hpp rs java kt rb php html htm css scss csv tsv xml log sql diff patch proto " +
		"swift scala lua r pl tf gradle properties dockerfile makefile gitignore") {
		fileExts[e] = true
	}
}

// cleanPath returns w as a path when it looks like one ("" when not): it ends in a
// known file extension, or starts with /, ./, ../ or ~/; it is not a URL, an option,
// a glob, a variable or a device. A pytest node id (x.py::Test) or a line number
// (x.py:12) is cut to its file.
func cleanPath(w string) string {
	w = strings.TrimSpace(w)
	w = strings.TrimRight(w, ",.:;)]}'\"`")
	w = strings.TrimLeft(w, "([{'\"`")
	if len(w) < 3 || len(w) > 256 || strings.HasPrefix(w, "-") || strings.Contains(w, "://") {
		return ""
	}
	if strings.ContainsAny(w, "*?$`{}|&;<>=,\\\n\t\"' ") {
		return ""
	}
	if w == "/dev/null" || strings.HasPrefix(w, "/dev/") || strings.HasPrefix(w, "/proc/") {
		return ""
	}
	// A pytest node id or a line number names the file before it.
	if i := strings.Index(w, "::"); i > 0 {
		w = w[:i]
	}
	if i := strings.LastIndexByte(w, ':'); i > 0 && strings.Trim(w[i+1:], "0123456789") == "" {
		w = w[:i]
	}
	w = strings.TrimSuffix(w, "/")
	if len(w) < 3 || strings.Trim(w, "./~") == "" || strings.ContainsRune(w, ':') || strings.IndexFunc(w, unicode.IsLetter) < 0 {
		return ""
	}
	// A known extension, also before a suffix such as .orig or .backup (x.py.orig).
	if parts := strings.Split(strings.ToLower(path.Base(w)), "."); len(parts) > 1 && parts[0] != "" {
		for _, ext := range parts[1:] {
			if fileExts[ext] {
				return w
			}
		}
	}
	// Without a known extension: a path only when it is rooted or relative to a named
	// folder (/tmp/x, ./x, ../x, ~/x), not any word with a slash (and/or, 1/2).
	for _, p := range []string{"/", "./", "../", "~/"} {
		if strings.HasPrefix(w, p) {
			return w
		}
	}
	return ""
}

// stopwords are words too common to be a key term.
var stopwords = map[string]bool{}

func init() {
	for w := range strings.FieldsSeq("the and for that this with from have will would should could there their they them then than " +
		"what when where which while your you are was were been being into onto about after before also only just like " +
		"make made need needs please want some more most other such these those here each every very can not does done " +
		"its it's let's use using used file files code run running thing things sure okay yes any all how why who our out " +
		"over under again still able above below both same new one two may might must shall did doing has had him her his " +
		"she he we us me my mine i'm i've don't can't isn't won't there's following following: let know think see look") {
		stopwords[w] = true
	}
}

// keyTerms are the n most frequent words of text (ties in first-seen order) of at
// least 4 letters that are not stopwords, lower-cased.
func keyTerms(text string, n int) []string {
	if len(text) > maxScanBytes {
		text = text[:maxScanBytes]
	}
	count := map[string]int{}
	var order []string
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	}) {
		if len([]rune(w)) < 4 || len(w) > 40 || stopwords[w] || strings.IndexFunc(w, unicode.IsLetter) < 0 {
			continue
		}
		if count[w] == 0 {
			order = append(order, w)
		}
		count[w]++
	}
	slices.SortStableFunc(order, func(a, b string) int { return count[b] - count[a] })
	return order[:min(n, len(order))]
}

// set is an insertion-ordered set of strings.
type set struct {
	seen map[string]bool
	list []string
}

func newSet() *set { return &set{seen: map[string]bool{}} }

func (s *set) add(v string) {
	if !s.seen[v] {
		s.seen[v] = true
		s.list = append(s.list, v)
	}
}
