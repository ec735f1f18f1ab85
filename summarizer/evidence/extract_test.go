package evidence_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// call is an assistant entry with one tool call of name and arguments.
func call(seq uint64, name string, args map[string]any) schemas.Entry {
	b, _ := json.Marshal(args)
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: schemas.RoleAssistant,
		ToolCalls: []schemas.ToolCall{{ID: "c", Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: string(b)}}}}}
}

func text(seq uint64, role schemas.Role, s string) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: role, Content: schemas.Text(s)}}
}

// got lists the extracted items as "kind value" (with a * for a changed file).
func got(items []schemas.EvidenceItem) []string {
	var out []string
	for _, it := range items {
		s := it.Kind + " " + it.Value
		if it.Changed {
			s += " *"
		}
		out = append(out, s)
	}
	return out
}

// Shapes taken from the corpus (SWE-agent, mini-swe-agent, OpenHands, Claude Code,
// tau-bench, ChatGPT exports), and the hostile or noisy inputs beside them.
func TestExtract(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		want []string
	}{
		{
			name: "bash tool: command, paths read, a redirection writes",
			give: []schemas.Entry{call(3, "bash", map[string]any{"command": "sed -n '2460,2550p' /testbed/pydicom/dataset.py && python reproduce.py > out.txt 2>&1"})},
			want: []string{"file /testbed/pydicom/dataset.py", "file out.txt *", "file reproduce.py",
				"command sed -n '2460,2550p' /testbed/pydicom/dataset.py && python reproduce.py > out.txt 2>&1"},
		},
		{
			name: "sed -i changes its file, not its script",
			give: []schemas.Entry{call(5, "execute_bash", map[string]any{"command": "sed -i 's/old/new/g' ./src/app/main.py", "timeout": 30})},
			want: []string{"file src/app/main.py *", "command sed -i 's/old/new/g' ./src/app/main.py"},
		},
		{
			name: "heredoc: its body is not read, its target is written",
			give: []schemas.Entry{call(7, "bash", map[string]any{"command": "cat > /tmp/test_fix.py << 'EOF'\nimport os\nopen('/etc/passwd')\nEOF\npython /tmp/test_fix.py"})},
			want: []string{"file /tmp/test_fix.py *", "command cat > /tmp/test_fix.py << 'EOF'" + evidence.CutMarker},
		},
		{
			name: "str_replace_editor: view reads, str_replace changes",
			give: []schemas.Entry{
				call(2, "str_replace_editor", map[string]any{"command": "view", "path": "/workspace/django/db/models/"}),
				call(4, "str_replace_editor", map[string]any{"command": "str_replace", "path": "/workspace/django/db/models/query.py", "old_str": "a", "new_str": "see https://docs.djangoproject.com/en/5.0/"}),
			},
			want: []string{"file /workspace/django/db/models", "file /workspace/django/db/models/query.py *", "url https://docs.djangoproject.com/en/5.0/"},
		},
		{
			name: "Claude Code Write and Read with file_path",
			give: []schemas.Entry{
				call(2, "Write", map[string]any{"file_path": "/home/u/hello_world.py", "content": "print('x')"}),
				call(4, "Read", map[string]any{"file_path": "/home/u/notes.md"}),
				call(6, "Bash", map[string]any{"command": "python hello_world.py", "description": "run it"}),
			},
			want: []string{"file /home/u/hello_world.py *", "file /home/u/notes.md", "file hello_world.py", "command python hello_world.py"},
		},
		{
			name: "mini-swe-agent: a ```bash fence in assistant content is a command",
			give: []schemas.Entry{text(4, schemas.RoleAssistant, "THOUGHT: check it\n\n```bash\ncd /testbed && grep -rn 'def to_json' src/pkg/core.py\n```")},
			want: []string{"file /testbed", "file /testbed/src/pkg/core.py", "command cd /testbed && grep -rn 'def to_json' src/pkg/core.py"},
		},
		{
			name: "a pytest node id names its file",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "python -m pytest tests/test_dataset.py::TestDataset::test_to_json -xvs"})},
			want: []string{"file tests/test_dataset.py", "command python -m pytest tests/test_dataset.py::TestDataset::test_to_json -xvs"},
		},
		{
			name: "relative paths after a cd to an absolute directory resolve against it; after a relative cd they stay",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "cd /repo && python fix.py; cd sub && cat notes.txt"})},
			want: []string{"file /repo", "file /repo/fix.py", "file notes.txt", "command cd /repo && python fix.py; cd sub && cat notes.txt"},
		},
		{
			name: "python -c and -m: code and modules are not paths",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "python3 -c \"open('/workspace/q3.xlsx')\"; python -m http.server 8000"})},
			want: []string{"command python3 -c \"open('/workspace/q3.xlsx')\"; python -m http.server 8000"},
		},
		{
			name: "grep's pattern, find's glob and /dev/null are not paths",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "grep -rn 'foo/bar' lib/ | head; find / -name '*.csv' 2>/dev/null"})},
			want: []string{"file lib", "command grep -rn 'foo/bar' lib/ | head; find / -name '*.csv' 2>/dev/null"},
		},
		{
			name: "mv changes both ends, cp its target",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "mv a.txt b.txt && cp -r src/ /backup/src"})},
			want: []string{"file /backup/src *", "file a.txt *", "file b.txt *", "file src", "command mv a.txt b.txt && cp -r src/ /backup/src"},
		},
		{
			name: "git commands name commits",
			give: []schemas.Entry{call(2, "bash", map[string]any{"command": "git show 8da0b9b2 && git diff abc1234^..HEAD -- setup.py"})},
			want: []string{"file setup.py", "command git show 8da0b9b2 && git diff abc1234^..HEAD -- setup.py", "id 8da0b9b2", "id abc1234"},
		},
		{
			name: "user message: urls, ids, numbers with units",
			give: []schemas.Entry{text(1, schemas.RoleUser,
				"Fix PROJ-4521 (see #123 and https://github.com/o/r/issues/123). The API returns HTTP 503 after 30s; "+
					"pylint says E1101, Oracle says ORA-00942. Budget $1,200, 2 bags, disk 500 GB. UTF-8 and SHA-256 are fine, v1.2 too.")},
			want: []string{"url https://github.com/o/r/issues/123", "id #123", "id E1101", "id HTTP 503", "id ORA-00942", "id PROJ-4521",
				"number $1,200", "number 2 bags", "number 30s", "number 500 GB"},
		},
		{
			name: "numbers come from user messages only; markdown links lose their brackets",
			give: []schemas.Entry{text(2, schemas.RoleAssistant, "It took 30s. Open [the site](http://the-agent-company.com:8091/).")},
			want: []string{"url http://the-agent-company.com:8091/"},
		},
		{
			name: "tool outputs and system prompts are not read",
			give: []schemas.Entry{text(1, schemas.RoleSystem, "see /etc/hosts and https://a.example/x"), text(3, schemas.RoleTool, "https://b.example/y PROJ-1 /tmp/x.py")},
		},
		{
			name: "invalid entries and arguments that are not JSON are skipped",
			give: []schemas.Entry{
				{Seq: 1, Err: schemas.ErrInvalid, Message: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("PROJ-9")}},
				{Seq: 2, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c", Type: "function",
					Function: schemas.FunctionCall{Name: "open", Arguments: `{"path":`}}}}},
			},
		},
		{
			name: "a shell tool's raw (non-JSON) arguments are the command",
			give: []schemas.Entry{{Seq: 2, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c", Type: "function",
				Function: schemas.FunctionCall{Name: "shell", Arguments: "make test"}}}}}},
			want: []string{"command make test"},
		},
		{
			name: "tau-bench: ids in arguments are not guessed at, the user's numbers are",
			give: []schemas.Entry{
				text(1, schemas.RoleUser, "I want to change my flight to 2 passengers, budget $500."),
				call(2, "get_reservation_details", map[string]any{"reservation_id": "ZFA04Y"}),
			},
			want: []string{"number $500", "number 2 passengers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := got(evidence.Extract(tt.give))
			if !slices.Equal(g, tt.want) {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(g, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// References are counted, the newest sequence kept, and a file once changed stays
// changed; the same path written differently is one item.
func TestExtractCountsAndNormalizes(t *testing.T) {
	items := evidence.Extract([]schemas.Entry{
		call(2, "bash", map[string]any{"command": "cat ./src/a.py"}),
		call(4, "str_replace_editor", map[string]any{"command": "create", "path": "src//a.py", "file_text": "x"}),
		call(9, "bash", map[string]any{"command": "cat src/a.py/"}),
	})
	var file schemas.EvidenceItem
	for _, it := range items {
		if it.Kind == schemas.EvidenceFile {
			file = it
		}
	}
	want := schemas.EvidenceItem{Kind: schemas.EvidenceFile, Value: "src/a.py", Count: 3, LastSeq: 9, Changed: true}
	if file != want {
		t.Fatalf("got %+v; want %+v (items %v)", file, want, got(items))
	}
}

func TestCompact(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct{ name, give, want string }{
		{"one line", "  ls   -la\t/testbed  ", "ls -la /testbed"},
		{"more lines", "cat > f << EOF\nbody\nEOF", "cat > f << EOF" + evidence.CutMarker},
		{"trailing blank lines are not more", "make\n\n", "make"},
		{"long line", long, strings.Repeat("x", 160) + evidence.CutMarker},
		{"runes, not bytes", strings.Repeat("é", 170), strings.Repeat("é", 160) + evidence.CutMarker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := evidence.Compact(tt.give); got != tt.want {
				t.Fatalf("Compact(%q) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}

// Hostile input: huge and deeply nested arguments, invalid UTF-8 and 100k messages
// cost bounded work and never panic; every value stays within the schema's bounds.
func TestExtractHostile(t *testing.T) {
	var nested any = map[string]any{"path": "/deep/file.go"}
	for range 1000 {
		nested = map[string]any{"x": []any{nested}}
	}
	deep, _ := json.Marshal(map[string]any{"a": nested})
	es := []schemas.Entry{
		call(1, "bash", map[string]any{"command": strings.Repeat("/a/b ", 200000)}),
		{Seq: 2, Message: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c", Type: "function",
			Function: schemas.FunctionCall{Name: "edit", Arguments: string(deep)}}}}},
		text(3, schemas.RoleUser, "PROJ-12 \xff\xfe https://x.example/"+strings.Repeat("p", 5000)),
		call(4, "bash", map[string]any{"command": "cat " + strings.Repeat("d/", 300) + "f.py"}),
	}
	for i := range 100000 {
		es = append(es, text(uint64(5+i), schemas.RoleUser, "ok"))
	}
	ev := evidence.Merge(nil, es, uint64(len(es)+4))
	if err := ev.Validate(); err != nil {
		t.Fatalf("merged evidence does not validate: %v", err)
	}
	for _, it := range ev.Items {
		if it.Value == "/deep/file.go" {
			t.Fatalf("a path %d levels deep was read; want a bounded walk", 1000)
		}
	}
}
