package eval

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"src/app.py", "src/app.py"},
		{"'/testbed/setup.py',", "/testbed/setup.py"},
		{"./django/core/checks/templates.py", "./django/core/checks/templates.py"},
		{"tests/test_x.py::TestA::test_b", "tests/test_x.py"},
		{"parser.go:120", "parser.go"},
		{"/tmp/repro_test", "/tmp/repro_test"},
		{"/tmp/build/", "/tmp/build"},
		{"README.md", "README.md"},
		{"and/or", ""},
		{"1/2", ""},
		{"2024/05/01", ""},
		{"django.conf", ""},
		{"numpy.linalg", ""},
		{"https://example.com/a.py", ""},
		{"--file=a.py", ""},
		{"*.py", ""},
		{"$HOME/x.py", ""},
		{"/dev/null", ""},
		{".py", ""},
		{"./", ""},
		{"e.g", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := cleanPath(tt.give); got != tt.want {
			t.Errorf("cleanPath(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestCommandKey(t *testing.T) {
	tests := []struct{ give, want string }{
		{"ls -la", "ls -la"},
		{"\n\n  cd /testbed && python x.py  \nsecond line", "cd /testbed && python x.py"},
		{"   \n\t", ""},
	}
	for _, tt := range tests {
		if got := CommandKey(tt.give); got != tt.want {
			t.Errorf("CommandKey(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func call(id, name, args string) schemas.ToolCall {
	return schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: args}}
}

func TestExtract(t *testing.T) {
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("You are an agent in /opt/secret.py")},
		{Role: schemas.RoleUser, Content: schemas.Text("Please fix the parser overflow in the parser module.")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			call("a", "bash", `{"command":"cd /repo && grep -rn overflow src/parse.py | head\nls"}`),
			call("b", "str_replace_editor", `{"command":"create","path":"/repo/new_test.py","file_text":"x"}`),
			call("c", "str_replace_editor", `{"command":"view","path":"/repo/src/lex.py"}`),
		}},
		{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text("src/parse.py:3: overflow /repo/not_counted.py")},
		{Role: schemas.RoleTool, ToolCallID: "b", Content: schemas.Text("created")},
		{Role: schemas.RoleTool, ToolCallID: "c", Content: schemas.Text("...")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("Now:\n```bash\nsed -i 's/a/b/' src/parse.py && echo done > /tmp/out.log\n```\n")},
		{Role: schemas.RoleUser, Content: schemas.Text("ok")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("```bash\nls\n```")},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			call("d", "bash", `{"command":"cp src/parse.py backup/parse.py.orig"}`),
			call("e", "finish", `{"message":"Clamped the overflow in the parser."}`),
			call("f", "bash", `not json`),
		}},
		{Role: schemas.RoleTool, ToolCallID: "d", Content: schemas.Text("")},
		{Role: schemas.RoleTool, ToolCallID: "e", Content: schemas.Text("")},
		{Role: schemas.RoleTool, ToolCallID: "f", Content: schemas.Text("")},
	}
	got := Extract(msgs)
	wantPaths := []string{"/repo", "src/parse.py", "/repo/new_test.py", "/repo/src/lex.py", "/tmp/out.log", "backup/parse.py.orig"}
	if !slices.Equal(got.Paths, wantPaths) {
		t.Errorf("paths %q; want %q", got.Paths, wantPaths)
	}
	wantCommands := []string{"cd /repo && grep -rn overflow src/parse.py | head", "sed -i 's/a/b/' src/parse.py && echo done > /tmp/out.log",
		"cp src/parse.py backup/parse.py.orig"}
	if !slices.Equal(got.Commands, wantCommands) {
		t.Errorf("commands %q; want %q", got.Commands, wantCommands)
	}
	wantChanged := []string{"/repo/new_test.py", "src/parse.py", "/tmp/out.log", "backup/parse.py.orig"}
	if !slices.Equal(got.Changed, wantChanged) {
		t.Errorf("changed %q; want %q", got.Changed, wantChanged)
	}
	if want := []string{"parser", "overflow", "module"}; !slices.Equal(got.UserTerms, want) {
		t.Errorf("user terms %q; want %q", got.UserTerms, want)
	}
	if want := []string{"clamped", "overflow", "parser"}; !slices.Equal(got.FinalTerms, want) {
		t.Errorf("final terms %q; want %q", got.FinalTerms, want)
	}
}

func TestShellWords(t *testing.T) {
	tests := []struct {
		give string
		want []string
	}{
		{`a "b c" 'd'`, []string{"a", "b c", "d"}},
		{`x|y&&z;w`, []string{"x", "|", "y", "&&", "z", ";", "w"}},
		{`cmd 2>&1 >out.txt`, []string{"cmd", "2>&1", ">out.txt"}},
		{`echo hi &> all.log`, []string{"echo", "hi", "&>", "all.log"}},
	}
	for _, tt := range tests {
		if got := shellWords(tt.give); !slices.Equal(got, tt.want) {
			t.Errorf("shellWords(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
}

func TestBrokenToolPairs(t *testing.T) {
	asst := func(ids ...string) schemas.Message {
		m := schemas.Message{Role: schemas.RoleAssistant}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, call(id, "bash", "{}"))
		}
		return m
	}
	tool := func(id string) schemas.Message { return schemas.Message{Role: schemas.RoleTool, ToolCallID: id} }
	user := schemas.Message{Role: schemas.RoleUser}
	tests := []struct {
		name string
		give []schemas.Message
		want int
	}{
		{"whole", []schemas.Message{user, asst("a", "b"), tool("b"), tool("a"), user}, 0},
		{"tool without call", []schemas.Message{user, tool("a"), user}, 1},
		{"call missing a result", []schemas.Message{asst("a", "b"), tool("a"), user}, 1},
		{"call at the end", []schemas.Message{user, asst("a")}, 1},
		{"result of an older round", []schemas.Message{asst("a"), tool("a"), asst("b"), tool("a"), tool("b")}, 1},
		{"empty", nil, 0},
	}
	for _, tt := range tests {
		if got := BrokenToolPairs(tt.give); got != tt.want {
			t.Errorf("%s: got %d; want %d", tt.name, got, tt.want)
		}
	}
}

func TestScoreFiles(t *testing.T) {
	tests := []struct {
		name                  string
		changed               []string
		answer                string
		wantRecall, wantPrecs float64
	}{
		{"all named", []string{"/repo/a.py", "/repo/b.py"}, "- /repo/a.py\n- `/repo/b.py`", 1, 1},
		{"base names", []string{"/repo/a.py", "/repo/x/b.py"}, "a.py and b.py", 1, 1},
		{"half, one wrong", []string{"/repo/a.py", "/repo/b.py"}, "/repo/a.py\n/repo/c.py", 0.5, 0.5},
		{"ambiguous base name", []string{"/x/a.py", "/y/a.py"}, "a.py", 0, 0},
		{"nothing named", []string{"/repo/a.py"}, "I do not know.", 0, 0},
		{"nothing changed", nil, "/repo/a.py", -1, -1},
	}
	for _, tt := range tests {
		r, p := ScoreFiles(tt.changed, tt.answer)
		if r != tt.wantRecall || p != tt.wantPrecs {
			t.Errorf("%s: got recall %v precision %v; want %v %v", tt.name, r, p, tt.wantRecall, tt.wantPrecs)
		}
	}
}

func TestScoreTerms(t *testing.T) {
	tests := []struct {
		terms  []string
		answer string
		want   float64
	}{
		{[]string{"parser", "overflow"}, "The PARSER overflowed.", 0.5},
		{[]string{"parser", "overflow"}, "parser overflow", 1},
		{nil, "anything", -1},
	}
	for _, tt := range tests {
		if got := ScoreTerms(tt.terms, tt.answer); got != tt.want {
			t.Errorf("ScoreTerms(%q, %q) = %v; want %v", tt.terms, tt.answer, got, tt.want)
		}
	}
}

func TestWithoutEvidence(t *testing.T) {
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("sys")},
		{Role: schemas.RoleUser, Content: schemas.Text("[Summary]\n\nwork\n\nEvidence: /a.py")},
		{Role: schemas.RoleUser, Content: schemas.Text("Evidence: /a.py")},
	}
	got := WithoutEvidence(msgs, []uint64{1, 0, 7}, "Evidence: /a.py")
	if s := got[1].Content.String(); s != "[Summary]\n\nwork" {
		t.Errorf("summary %q; want the evidence cut off", s)
	}
	if s := got[2].Content.String(); s != "Evidence: /a.py" {
		t.Errorf("a tail message changed: %q", s)
	}
	if s := msgs[1].Content.String(); !strings.HasSuffix(s, "/a.py") {
		t.Errorf("the input changed: %q", s)
	}
}

func TestByConstruction(t *testing.T) {
	const ev = "Evidence: /a.py; ran make test"
	summary := assemble.SummaryPrefix + "work on /b.py\n\n" + ev
	sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("sys /c.py")}
	tail := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("work on /b.py\n\n" + ev)}
	tests := []struct {
		name     string
		give     []schemas.Message
		seqs     []uint64
		evidence string
		want     []string
	}{
		{"summary and evidence", []schemas.Message{sys, {Role: schemas.RoleUser, Content: schemas.Text(summary)}, tail},
			[]uint64{1, 0, 7}, ev, []string{"sys /c.py", assemble.SummaryPrefix + ev, tail.Content.String()}},
		{"no evidence section", []schemas.Message{sys, {Role: schemas.RoleUser, Content: schemas.Text(assemble.SummaryPrefix + "work on /b.py")}},
			[]uint64{1, 0}, "", []string{"sys /c.py", assemble.SummaryPrefix}},
		{"evidence not in the message", []schemas.Message{{Role: schemas.RoleUser, Content: schemas.Text(assemble.SummaryPrefix + "work on /b.py")}},
			[]uint64{0}, ev, []string{assemble.SummaryPrefix}},
		{"no summary", []schemas.Message{sys, tail}, []uint64{1, 7}, ev, []string{"sys /c.py", tail.Content.String()}},
		{"fewer seqs than messages", []schemas.Message{sys, tail}, []uint64{1}, ev, []string{"sys /c.py", tail.Content.String()}},
		{"empty", nil, nil, ev, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]string, len(tt.give))
			for i := range tt.give {
				before[i] = tt.give[i].Content.String()
			}
			got := ByConstruction(tt.give, tt.seqs, tt.evidence)
			var texts []string
			for i := range got {
				texts = append(texts, got[i].Content.String())
				if got[i].Role != tt.give[i].Role {
					t.Errorf("message %d: role %q; want %q kept", i, got[i].Role, tt.give[i].Role)
				}
			}
			if !slices.Equal(texts, tt.want) {
				t.Errorf("got %q; want %q", texts, tt.want)
			}
			for i := range tt.give {
				if s := tt.give[i].Content.String(); s != before[i] {
					t.Errorf("the input changed: message %d is %q; want %q", i, s, before[i])
				}
			}
		})
	}
}

func TestReadRefusesBadInput(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"not json", "{\"role\":\"user\",\"content\":\"hi\"}\n{nope\n", "f.jsonl:2:"},
		{"bad role", "{\"role\":\"boss\",\"content\":\"hi\"}\n", "f.jsonl:1:"},
		{"empty", "\n\n", "no message"},
		{"orphan tool message", "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"r\"}\n",
			"answers no open tool call"},
	}
	for _, tt := range tests {
		_, err := Read(strings.NewReader(tt.give), "f.jsonl")
		if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v; want ErrBadInput naming %q", tt.name, err, tt.want)
		}
	}
	c, err := Read(strings.NewReader("\n{\"role\":\"user\",\"content\":\"hi\"}\n\n"), "ok.jsonl")
	if err != nil || len(c.Messages) != 1 {
		t.Errorf("blank lines: got %d messages, %v; want 1, nil", len(c.Messages), err)
	}
}

func TestPlant(t *testing.T) {
	msgs := []schemas.Message{
		{Role: schemas.RoleSystem, Content: schemas.Text("s")},
		{Role: schemas.RoleUser, Content: schemas.Text("task")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("ok")},
	}
	got, facts := plant(msgs, "a.jsonl", 2)
	if len(got) != 5 || len(facts) != 2 || facts[0] == facts[1] {
		t.Fatalf("got %d messages, facts %q; want 5 and two distinct facts", len(got), facts)
	}
	for i, f := range facts {
		if m := got[2+i]; m.Role != schemas.RoleUser || !strings.Contains(m.Content.String(), f) {
			t.Errorf("message %d is %v; want the user message planting %s", 2+i, m, f)
		}
	}
	if _, again := plant(msgs, "a.jsonl", 2); !slices.Equal(again, facts) {
		t.Errorf("planting again gave %q; want the same %q", again, facts)
	}
	if _, other := plant(msgs, "b.jsonl", 2); slices.Equal(other, facts) {
		t.Errorf("another file got the same facts %q", other)
	}
}

func TestContextTextDecodesArguments(t *testing.T) {
	msgs := []schemas.Message{{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		call("a", "bash", `{"command":"grep -rn \"def main\" src/app.py\nls","opts":{"deep":["x/y.py"]}}`)}}}
	text := ContextText(msgs)
	for _, want := range []string{`grep -rn "def main" src/app.py`, "x/y.py", "bash"} {
		if !strings.Contains(text, want) {
			t.Errorf("context text lacks %q:\n%s", want, text)
		}
	}
}
