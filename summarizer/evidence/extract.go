package evidence

import (
	"encoding/json"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
)

// Bounds of the work one message costs: text past them is not scanned.
const (
	// maxScanBytes is how much of a message's text (or of one argument) is scanned.
	maxScanBytes = 256 << 10
	// maxArgsBytes is the largest tool-call arguments document that is parsed.
	maxArgsBytes = 1 << 20
	// maxArgDepth is how deep nested arguments are walked.
	maxArgDepth = 6
	// maxCommandRunes is the longest compact form of a command, marker excluded.
	maxCommandRunes = 160
	// maxPathBytes is the longest path kept; longer tokens are not paths worth keeping.
	maxPathBytes = 256
	// maxCommandLines is how many lines of one command are scanned for paths.
	maxCommandLines = 200
)

// CutMarker ends a command whose compact form was shortened: only its first line is
// kept, at most 160 characters of it.
const CutMarker = " […]"

// pathKeys are tool-call argument names whose value is a path.
var pathKeys = map[string]bool{
	"path": true, "file_path": true, "filepath": true, "filename": true, "file_name": true, "file": true,
	"dir": true, "directory": true, "notebook_path": true, "target_file": true, "source_path": true,
	"destination_path": true, "old_path": true, "new_path": true, "dest": true, "src": true,
}

// commandKeys are argument names whose value is a shell command, for shell-like tools.
var commandKeys = map[string]bool{"command": true, "cmd": true, "script": true}

// editorChanges are the values of an editor tool's command argument that change a file.
var editorChanges = map[string]bool{
	"create": true, "str_replace": true, "insert": true, "undo_edit": true, "write": true, "edit": true,
	"append": true, "delete": true, "rename": true, "overwrite": true, "replace": true, "apply": true,
}

// editorReads are command values of a changing-sounding tool that only read.
var editorReads = map[string]bool{"view": true, "read": true, "show": true, "list": true, "cat": true, "open": true}

// collector gathers items by kind and value.
type collector struct {
	items map[itemKey]*schemas.EvidenceItem
}

type itemKey struct{ kind, value string }

func newCollector() *collector { return &collector{items: map[itemKey]*schemas.EvidenceItem{}} }

func (c *collector) add(kind, value string, seq uint64, changed bool) {
	value = Redact(value) // what was found is redacted before it was cut; this is a backstop
	if value == "" || len(value) > schemas.MaxEvidenceValueBytes || !utf8.ValidString(value) {
		return
	}
	k := itemKey{kind, value}
	it := c.items[k]
	if it == nil {
		it = &schemas.EvidenceItem{Kind: kind, Value: value}
		c.items[k] = it
	}
	it.Count++
	it.LastSeq = max(it.LastSeq, seq)
	it.Changed = it.Changed || changed
}

// list returns the items in canonical order (kind, then value).
func (c *collector) list() []schemas.EvidenceItem {
	out := make([]schemas.EvidenceItem, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, *it)
	}
	slices.SortFunc(out, canonical)
	return out
}

// Extract returns the evidence items of entries, in canonical order (kind, then value),
// each with its reference count and newest sequence. Secrets are redacted (see Redact)
// before anything is cut or kept. Invalid entries, system messages
// and tool outputs are not read (tool outputs hold too much that is not the agent's own
// doing to pick from without noise).
func Extract(entries []schemas.Entry) []schemas.EvidenceItem {
	c := newCollector()
	for i := range entries {
		c.entry(&entries[i])
	}
	return c.list()
}

func (c *collector) entry(e *schemas.Entry) {
	if e.Err != nil {
		return
	}
	m := &e.Message
	switch m.Role {
	case schemas.RoleUser:
		t, _ := redactPrefix(m.Content.String(), maxScanBytes)
		c.urls(t.s, e.Seq)
		c.ids(&t, e.Seq)
		c.numbers(&t, e.Seq)
	case schemas.RoleAssistant:
		t, _ := redactPrefix(m.Content.String(), maxScanBytes)
		text := t.s
		c.urls(text, e.Seq)
		c.ids(&t, e.Seq)
		for _, cmd := range shellFences(text) {
			c.command(cmd, e.Seq)
		}
		for _, tc := range m.ToolCalls {
			c.toolCall(tc.Function.Name, tc.Function.Arguments, e.Seq)
		}
	}
}

// capText is what of a text is scanned: its first maxScanBytes, secrets redacted
// (before the cut, so none is left half there).
func capText(s string) string {
	out, _ := RedactPrefix(s, maxScanBytes)
	return out
}

// fenceRE finds fenced code blocks labelled as shell.
var fenceRE = regexp.MustCompile("(?s)```(?:bash|sh|shell|zsh|console|terminal)[ \\t]*\\r?\\n(.*?)```")

// shellFences returns the bodies of an assistant message's shell code fences, the
// commands of agents that run what they write in ```bash blocks.
func shellFences(text string) []string {
	var out []string
	for _, m := range fenceRE.FindAllStringSubmatch(text, 64) {
		var lines []string
		for l := range strings.SplitSeq(m[1], "\n") {
			l = strings.TrimRight(l, "\r")
			if rest, ok := strings.CutPrefix(strings.TrimLeft(l, " \t"), "$ "); ok {
				l = rest // a console prompt
			}
			lines = append(lines, l)
		}
		if body := strings.TrimSpace(strings.Join(lines, "\n")); body != "" {
			out = append(out, body)
		}
	}
	return out
}

// shellTool says a tool's name is a shell's (bash, execute_bash, Bash, run_shell...).
func shellTool(lname string) bool {
	for _, s := range []string{"bash", "shell", "terminal", "exec", "run_command", "zsh"} {
		if strings.Contains(lname, s) {
			return true
		}
	}
	return lname == "sh" || lname == "run" || lname == "cmd" || lname == "command"
}

// changingTool says a tool's name is an editor's or writer's.
func changingTool(lname string) bool {
	for _, s := range []string{"write", "edit", "create", "insert", "replace", "patch", "delete", "remove", "rename", "move", "save"} {
		if strings.Contains(lname, s) {
			return true
		}
	}
	return false
}

func (c *collector) toolCall(name, args string, seq uint64) {
	lname := strings.ToLower(name)
	shell := shellTool(lname)
	if len(args) > maxArgsBytes {
		return
	}
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		if shell && strings.TrimSpace(args) != "" { // command redacts it
			c.command(args, seq) // some agents send the command itself as the arguments
		}
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		if s, ok := v.(string); ok && shell {
			c.command(s, seq)
		}
		return
	}
	changed := false
	if changingTool(lname) {
		changed = true
		if sub, ok := obj["command"].(string); ok && editorReads[strings.ToLower(sub)] {
			changed = false
		}
	}
	if sub, ok := obj["command"].(string); ok && !shell && editorChanges[strings.ToLower(sub)] {
		changed = true
	}
	c.walk(obj, shell, changed, seq, 0)
}

// walk reads one arguments object: its path and command arguments, and the URLs of any
// other string; nested objects and arrays down to maxArgDepth.
func (c *collector) walk(obj map[string]any, shell, changed bool, seq uint64, depth int) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		switch v := obj[k].(type) {
		case string:
			switch {
			case pathKeys[lk]:
				if p, ok := normalizePath(Redact(v), false); ok {
					c.add(schemas.EvidenceFile, p, seq, changed)
				}
			case commandKeys[lk] && shell:
				c.command(v, seq)
			default: // file contents, code, messages: only their URLs
				c.urls(capText(v), seq)
			}
		case []any:
			if depth < maxArgDepth {
				c.walkList(lk, v, shell, changed, seq, depth+1)
			}
		case map[string]any:
			if depth < maxArgDepth {
				c.walk(v, shell, changed, seq, depth+1)
			}
		}
	}
}

func (c *collector) walkList(key string, l []any, shell, changed bool, seq uint64, depth int) {
	for _, x := range l {
		switch v := x.(type) {
		case string:
			if pathKeys[key] || key == "paths" || key == "files" {
				if p, ok := normalizePath(v, false); ok {
					c.add(schemas.EvidenceFile, p, seq, changed)
				}
				continue
			}
			c.urls(capText(v), seq)
		case map[string]any:
			if depth < maxArgDepth {
				c.walk(v, shell, changed, seq, depth+1)
			}
		}
	}
}

// command records one shell command: its compact form, the paths it names (changed
// when it writes them) and the commit hashes it names.
func (c *collector) command(cmd string, seq uint64) {
	cmd = strings.TrimSpace(capText(cmd))
	if cmd == "" {
		return
	}
	c.add(schemas.EvidenceCommand, Compact(cmd), seq, false)
	for _, p := range scanCommand(cmd) {
		c.add(schemas.EvidenceFile, p.path, seq, p.changed)
	}
	for _, h := range commitArgs(cmd) {
		c.add(schemas.EvidenceID, h, seq, false)
	}
	c.urls(cmd, seq)
}

// Compact returns the compact form of a command: its first non-empty line with runs of
// blanks collapsed, at most 160 characters; CutMarker ends it when anything was left
// out (more lines, or the rest of a long line).
func Compact(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	first, rest, more := strings.Cut(cmd, "\n")
	first = strings.Join(strings.Fields(first), " ")
	cut := more && strings.TrimSpace(rest) != ""
	if utf8.RuneCountInString(first) > maxCommandRunes {
		r := []rune(first)
		first = strings.TrimRight(string(r[:maxCommandRunes]), " ")
		cut = true
	}
	if cut {
		first += CutMarker
	}
	return first
}

// normalizePath returns the canonical form of a path-like token (cleaned, no trailing
// slash, no leading ./) and whether it is one. Bare names count only in path arguments
// or with a file extension.
func normalizePath(tok string, needShape bool) (string, bool) {
	tok = strings.TrimSpace(tok)
	if i := strings.Index(tok, "::"); i > 0 {
		tok = tok[:i] // a test id: tests/test_x.py::TestX::test_y names tests/test_x.py
	}
	tok = strings.TrimRight(tok, ",;:")
	if tok == "" || len(tok) > maxPathBytes || !utf8.ValidString(tok) {
		return "", false
	}
	if strings.ContainsAny(tok, "*?[]{}$()<>|;&'\"`=,\\\t\n\r ") || strings.Contains(tok, "://") || strings.HasPrefix(tok, "-") {
		return "", false
	}
	switch tok {
	case "/", ".", "..", "~", "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/zero", "/dev/urandom", "/dev/random":
		return "", false
	}
	if needShape && !pathShaped(tok) {
		return "", false
	}
	home := strings.HasPrefix(tok, "~/")
	p := path.Clean(tok)
	if home && !strings.HasPrefix(p, "~/") {
		return "", false
	}
	if p == "." || p == "/" || p == ".." {
		return "", false
	}
	return p, true
}

// extRE is a file name with an extension that starts with a letter (not a version).
var extRE = regexp.MustCompile(`^[A-Za-z0-9_@+.-]*[A-Za-z0-9_@+-]\.[A-Za-z][A-Za-z0-9_]{0,7}$`)

// segRE is one segment of a relative path.
var segRE = regexp.MustCompile(`^[A-Za-z0-9_@+.~-]+$`)

// notFiles are extensions of tokens that look like file names but rarely are.
var notFiles = map[string]bool{"com": true, "org": true, "net": true, "io": true, "e": true, "g": true, "x": true}

// pathShaped says a token in a command is a path: absolute, ./ ../ ~/ relative, a
// relative path with a slash, or a file name with an extension.
func pathShaped(tok string) bool {
	if strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "./") || strings.HasPrefix(tok, "../") || strings.HasPrefix(tok, "~/") {
		return len(strings.Trim(tok, "/.~")) > 0
	}
	if strings.Contains(tok, "/") {
		segs := strings.Split(strings.TrimRight(tok, "/"), "/")
		letters := false
		for _, s := range segs {
			if s == "" || !segRE.MatchString(s) {
				return false
			}
			letters = letters || strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
		}
		return letters
	}
	if !extRE.MatchString(tok) {
		return false
	}
	ext := tok[strings.LastIndexByte(tok, '.')+1:]
	return !notFiles[strings.ToLower(ext)]
}
