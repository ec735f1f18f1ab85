// Code copied from extract.go as it was before the one-pass scanner, every
// package-level name prefixed with ref: the trusted reference the differential tests
// and fuzz targets compare the fast paths with. Do not edit but to fix it.

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
	refMaxScanBytes = 256 << 10
	// maxArgsBytes is the largest tool-call arguments document that is parsed.
	refMaxArgsBytes = 1 << 20
	// maxArgDepth is how deep nested arguments are walked.
	refMaxArgDepth = 6
	// maxCommandRunes is the longest compact form of a command, marker excluded.
	refMaxCommandRunes = 160
	// maxPathBytes is the longest path kept; longer tokens are not paths worth keeping.
	refMaxPathBytes = 256
	// maxCommandLines is how many lines of one command are scanned for paths.
	refMaxCommandLines = 200
)

// CutMarker ends a command whose compact form was shortened: only its first line is
// kept, at most 160 characters of it.
const refCutMarker = " […]"

// pathKeys are tool-call argument names whose value is a path.
var refPathKeys = map[string]bool{
	"path": true, "file_path": true, "filepath": true, "filename": true, "file_name": true, "file": true,
	"dir": true, "directory": true, "notebook_path": true, "target_file": true, "source_path": true,
	"destination_path": true, "old_path": true, "new_path": true, "dest": true, "src": true,
}

// commandKeys are argument names whose value is a shell command, for shell-like tools.
var refCommandKeys = map[string]bool{"command": true, "cmd": true, "script": true}

// editorChanges are the values of an editor tool's command argument that change a file.
var refEditorChanges = map[string]bool{
	"create": true, "str_replace": true, "insert": true, "undo_edit": true, "write": true, "edit": true,
	"append": true, "delete": true, "rename": true, "overwrite": true, "replace": true, "apply": true,
}

// editorReads are command values of a changing-sounding tool that only read.
var refEditorReads = map[string]bool{"view": true, "read": true, "show": true, "list": true, "cat": true, "open": true}

// collector gathers items by kind and value.
type refCollector struct {
	items map[refItemKey]*schemas.EvidenceItem
}

type refItemKey struct{ kind, value string }

func refNewCollector() *refCollector {
	return &refCollector{items: map[refItemKey]*schemas.EvidenceItem{}}
}

func (c *refCollector) add(kind, value string, seq uint64, changed bool) {
	value = refRedact(value)
	if value == "" || len(value) > schemas.MaxEvidenceValueBytes || !utf8.ValidString(value) {
		return
	}
	k := refItemKey{kind, value}
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
func (c *refCollector) list() []schemas.EvidenceItem {
	out := make([]schemas.EvidenceItem, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, *it)
	}
	slices.SortFunc(out, refCanonical)
	return out
}

// Extract returns the evidence items of entries, in canonical order (kind, then value),
// each with its reference count and newest sequence. Secrets are redacted (see Redact)
// before anything is cut or kept. Invalid entries, system messages
// and tool outputs are not read (tool outputs hold too much that is not the agent's own
// doing to pick from without noise).
func refExtract(entries []schemas.Entry) []schemas.EvidenceItem {
	c := refNewCollector()
	for i := range entries {
		c.entry(&entries[i])
	}
	return c.list()
}

func (c *refCollector) entry(e *schemas.Entry) {
	if e.Err != nil {
		return
	}
	m := &e.Message
	switch m.Role {
	case schemas.RoleUser:
		text := refCapText(m.Content.String())
		c.urls(text, e.Seq)
		c.ids(text, e.Seq)
		c.numbers(text, e.Seq)
	case schemas.RoleAssistant:
		text := refCapText(m.Content.String())
		c.urls(text, e.Seq)
		c.ids(text, e.Seq)
		for _, cmd := range refShellFences(text) {
			c.command(cmd, e.Seq)
		}
		for _, tc := range m.ToolCalls {
			c.toolCall(tc.Function.Name, tc.Function.Arguments, e.Seq)
		}
	}
}

// capText is what of a text is scanned: its first maxScanBytes, secrets redacted
// (before the cut, so none is left half there).
func refCapText(s string) string {
	out, _ := refRedactPrefix(s, refMaxScanBytes)
	return out
}

// fenceRE finds fenced code blocks labelled as shell.
var refFenceRE = regexp.MustCompile("(?s)```(?:bash|sh|shell|zsh|console|terminal)[ \\t]*\\r?\\n(.*?)```")

// shellFences returns the bodies of an assistant message's shell code fences, the
// commands of agents that run what they write in ```bash blocks.
func refShellFences(text string) []string {
	var out []string
	for _, m := range refFenceRE.FindAllStringSubmatch(text, 64) {
		var lines []string
		for l := range strings.SplitSeq(m[1], "\n") {
			l = strings.TrimRight(l, "\r")
			if rest, ok := strings.CutPrefix(strings.TrimLeft(l, " \t"), "$ "); ok {
				l = rest
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
func refShellTool(lname string) bool {
	for _, s := range []string{"bash", "shell", "terminal", "exec", "run_command", "zsh"} {
		if strings.Contains(lname, s) {
			return true
		}
	}
	return lname == "sh" || lname == "run" || lname == "cmd" || lname == "command"
}

// changingTool says a tool's name is an editor's or writer's.
func refChangingTool(lname string) bool {
	for _, s := range []string{"write", "edit", "create", "insert", "replace", "patch", "delete", "remove", "rename", "move", "save"} {
		if strings.Contains(lname, s) {
			return true
		}
	}
	return false
}

func (c *refCollector) toolCall(name, args string, seq uint64) {
	lname := strings.ToLower(name)
	shell := refShellTool(lname)
	if len(args) > refMaxArgsBytes {
		return
	}
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		if shell && strings.TrimSpace(args) != "" {
			c.command(args, seq)
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
	if refChangingTool(lname) {
		changed = true
		if sub, ok := obj["command"].(string); ok && refEditorReads[strings.ToLower(sub)] {
			changed = false
		}
	}
	if sub, ok := obj["command"].(string); ok && !shell && refEditorChanges[strings.ToLower(sub)] {
		changed = true
	}
	c.walk(obj, shell, changed, seq, 0)
}

// walk reads one arguments object: its path and command arguments, and the URLs of any
// other string; nested objects and arrays down to maxArgDepth.
func (c *refCollector) walk(obj map[string]any, shell, changed bool, seq uint64, depth int) {
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
			case refPathKeys[lk]:
				if p, ok := refNormalizePath(refRedact(v), false); ok {
					c.add(schemas.EvidenceFile, p, seq, changed)
				}
			case refCommandKeys[lk] && shell:
				c.command(v, seq)
			default:
				c.urls(refCapText(v), seq)
			}
		case []any:
			if depth < refMaxArgDepth {
				c.walkList(lk, v, shell, changed, seq, depth+1)
			}
		case map[string]any:
			if depth < refMaxArgDepth {
				c.walk(v, shell, changed, seq, depth+1)
			}
		}
	}
}

func (c *refCollector) walkList(key string, l []any, shell, changed bool, seq uint64, depth int) {
	for _, x := range l {
		switch v := x.(type) {
		case string:
			if refPathKeys[key] || key == "paths" || key == "files" {
				if p, ok := refNormalizePath(v, false); ok {
					c.add(schemas.EvidenceFile, p, seq, changed)
				}
				continue
			}
			c.urls(refCapText(v), seq)
		case map[string]any:
			if depth < refMaxArgDepth {
				c.walk(v, shell, changed, seq, depth+1)
			}
		}
	}
}

// command records one shell command: its compact form, the paths it names (changed
// when it writes them) and the commit hashes it names.
func (c *refCollector) command(cmd string, seq uint64) {
	cmd = strings.TrimSpace(refCapText(cmd))
	if cmd == "" {
		return
	}
	c.add(schemas.EvidenceCommand, refCompact(cmd), seq, false)
	for _, p := range refScanCommand(cmd) {
		c.add(schemas.EvidenceFile, p.path, seq, p.changed)
	}
	for _, h := range refCommitArgs(cmd) {
		c.add(schemas.EvidenceID, h, seq, false)
	}
	c.urls(cmd, seq)
}

// Compact returns the compact form of a command: its first non-empty line with runs of
// blanks collapsed, at most 160 characters; CutMarker ends it when anything was left
// out (more lines, or the rest of a long line).
func refCompact(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	first, rest, more := strings.Cut(cmd, "\n")
	first = strings.Join(strings.Fields(first), " ")
	cut := more && strings.TrimSpace(rest) != ""
	if utf8.RuneCountInString(first) > refMaxCommandRunes {
		r := []rune(first)
		first = strings.TrimRight(string(r[:refMaxCommandRunes]), " ")
		cut = true
	}
	if cut {
		first += refCutMarker
	}
	return first
}

// normalizePath returns the canonical form of a path-like token (cleaned, no trailing
// slash, no leading ./) and whether it is one. Bare names count only in path arguments
// or with a file extension.
func refNormalizePath(tok string, needShape bool) (string, bool) {
	tok = strings.TrimSpace(tok)
	if i := strings.Index(tok, "::"); i > 0 {
		tok = tok[:i]
	}
	tok = strings.TrimRight(tok, ",;:")
	if tok == "" || len(tok) > refMaxPathBytes || !utf8.ValidString(tok) {
		return "", false
	}
	if strings.ContainsAny(tok, "*?[]{}$()<>|;&'\"`=,\\\t\n\r ") || strings.Contains(tok, "://") || strings.HasPrefix(tok, "-") {
		return "", false
	}
	switch tok {
	case "/", ".", "..", "~", "/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/zero", "/dev/urandom", "/dev/random":
		return "", false
	}
	if needShape && !refPathShaped(tok) {
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
var refExtRE = regexp.MustCompile(`^[A-Za-z0-9_@+.-]*[A-Za-z0-9_@+-]\.[A-Za-z][A-Za-z0-9_]{0,7}$`)

// segRE is one segment of a relative path.
var refSegRE = regexp.MustCompile(`^[A-Za-z0-9_@+.~-]+$`)

// notFiles are extensions of tokens that look like file names but rarely are.
var refNotFiles = map[string]bool{"com": true, "org": true, "net": true, "io": true, "e": true, "g": true, "x": true}

// pathShaped says a token in a command is a path: absolute, ./ ../ ~/ relative, a
// relative path with a slash, or a file name with an extension.
func refPathShaped(tok string) bool {
	if strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "./") || strings.HasPrefix(tok, "../") || strings.HasPrefix(tok, "~/") {
		return len(strings.Trim(tok, "/.~")) > 0
	}
	if strings.Contains(tok, "/") {
		segs := strings.Split(strings.TrimRight(tok, "/"), "/")
		letters := false
		for _, s := range segs {
			if s == "" || !refSegRE.MatchString(s) {
				return false
			}
			letters = letters || strings.ContainsFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
		}
		return letters
	}
	if !refExtRE.MatchString(tok) {
		return false
	}
	ext := tok[strings.LastIndexByte(tok, '.')+1:]
	return !refNotFiles[strings.ToLower(ext)]
}
