package extractive_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/summary"
)

func user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}

func assistant(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s)}
}

func call(id, name, args string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: id, Type: "function", Function: schemas.FunctionCall{Name: name, Arguments: args}}}}
}

func tool(id, s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(s)}
}

func summarize(t *testing.T, in summary.Input) string {
	t.Helper()
	out, err := extractive.New().Summarize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Model != "extractive" || !out.Fallback || out.PromptHash != "" || out.Usage != nil {
		t.Errorf("got model %q, fallback %v, prompt hash %q, usage %v; want extractive, true, \"\", nil",
			out.Model, out.Fallback, out.PromptHash, out.Usage)
	}
	return out.Summary
}

func TestSummarize(t *testing.T) {
	image := json.RawMessage(`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`)
	audio := json.RawMessage(`{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}`)
	file := json.RawMessage(`{"type":"file","file":{"filename":"report.pdf","file_data":"AAAA"}}`)
	text := json.RawMessage(`{"type":"text","text":"what is in these?"}`)
	long := strings.Repeat("a", 1000)
	tests := []struct {
		name string
		give summary.Input
		want string
	}{
		{
			name: "empty input",
			give: summary.Input{},
			want: "Extractive summary, written without an LLM: no new messages.",
		},
		{
			name: "previous summary only",
			give: summary.Input{PreviousSummary: "## Goal\nShip 1.2.\n"},
			want: "Extractive summary, written without an LLM: no new messages.\n## Goal\nShip 1.2.",
		},
		{
			name: "one line per message in order",
			give: summary.Input{Messages: []schemas.Message{
				user("Deploy build 4512\n to   staging, not prod."),
				call("c1", "deploy", `{"build":4512,"env":"staging"}`),
				tool("c1", "ok: staging now runs 4512 (rev 9f3c2e)"),
				assistant("Build 4512 is live on staging."),
			}},
			want: `Extractive summary, written without an LLM: excerpts of 4 messages in order.
- user: "Deploy build 4512 to staging, not prod."
- assistant called deploy({"build":4512,"env":"staging"})
- result of deploy (38 characters): "ok: staging now runs 4512 (rev 9f3c2e)"
- assistant: Build 4512 is live on staging.`,
		},
		{
			name: "previous summary carried forward before the new lines",
			give: summary.Input{PreviousSummary: "The user is Ana.", Messages: []schemas.Message{user("hi")}},
			want: `Extractive summary, written without an LLM: excerpts of 1 message in order.
The user is Ana.
Messages since then:
- user: "hi"`,
		},
		{
			name: "bullets of an earlier extractive summary are carried under one header",
			give: summary.Input{
				PreviousSummary: "Extractive summary, written without an LLM: excerpts of 1 message in order.\n- user: \"hi\"",
				Messages:        []schemas.Message{user("again")},
			},
			want: `Extractive summary, written without an LLM: excerpts of 2 messages in order.
- user: "hi"
- user: "again"`,
		},
		{
			name: "an earlier extractive summary with no new messages",
			give: summary.Input{
				PreviousSummary: "Extractive summary, written without an LLM: excerpts of 1 message in order.\n- user: \"hi\"",
			},
			want: `Extractive summary, written without an LLM: excerpts of 1 message in order.
- user: "hi"`,
		},
		{
			name: "a foreign summary carried in an extractive one stays before the bullets",
			give: summary.Input{
				PreviousSummary: "Extractive summary, written without an LLM: excerpts of 1 message in order.\n" +
					"## Goal\n- Ship 1.2\nMessages since then:\n- user: \"hi\"",
				Messages: []schemas.Message{user("again")},
			},
			want: `Extractive summary, written without an LLM: excerpts of 2 messages in order.
## Goal
- Ship 1.2
Messages since then:
- user: "hi"
- user: "again"`,
		},
		{
			name: "long texts are cut",
			give: summary.Input{Messages: []schemas.Message{
				user(long), assistant(long), call("c1", "f", long), tool("c1", long),
			}},
			want: "Extractive summary, written without an LLM: excerpts of 4 messages in order.\n" +
				`- user: "` + long[:400] + "…\"\n" +
				"- assistant: " + long[:200] + "…\n" +
				"- assistant called f(" + long[:120] + "…)\n" +
				`- result of f (1000 characters): "` + long[:120] + `…"`,
		},
		{
			name: "names, unknown call ids and system messages",
			give: summary.Input{Messages: []schemas.Message{
				{Role: schemas.RoleSystem, Content: schemas.Text("Be brief.")},
				{Role: schemas.RoleUser, Name: "ana", Content: schemas.Text("hello")},
				tool("call_9", "orphan result"),
			}},
			want: `Extractive summary, written without an LLM: excerpts of 3 messages in order.
- system: "Be brief."
- user (ana): "hello"
- result of call_9 (13 characters): "orphan result"`,
		},
		{
			name: "non-text parts are placeholders",
			give: summary.Input{Messages: []schemas.Message{
				{Role: schemas.RoleUser, Content: schemas.Parts(text, image, audio, file)},
				{Role: schemas.RoleUser, Content: schemas.Parts(image)},
			}},
			want: `Extractive summary, written without an LLM: excerpts of 2 messages in order.
- user: "what is in these? [image] [audio] [file: report.pdf]"
- user: "[image]"`,
		},
		{
			name: "assistant text and parallel calls",
			give: summary.Input{Messages: []schemas.Message{
				{Role: schemas.RoleAssistant, Content: schemas.Text("Checking both."), ToolCalls: []schemas.ToolCall{
					{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "ls", Arguments: `{"dir":"/srv"}`}},
					{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "df", Arguments: `{}`}},
				}},
				tool("b", "12G free"),
				tool("a", "app\ndata"),
			}},
			want: `Extractive summary, written without an LLM: excerpts of 3 messages in order.
- assistant: Checking both.
- assistant called ls({"dir":"/srv"})
- assistant called df({})
- result of df (8 characters): "12G free"
- result of ls (8 characters): "app data"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(t, tt.give); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestLeavesOutDetailFirst(t *testing.T) {
	var msgs []schemas.Message
	for i := range 30 {
		id := fmt.Sprint("c", i)
		msgs = append(msgs,
			user(fmt.Sprintf("request %d: keep the value X-%d", i, i)),
			call(id, "fetch", fmt.Sprintf(`{"page":%d,"filler":%q}`, i, strings.Repeat("f", 200))),
			tool(id, fmt.Sprintf("TOOL-OUTPUT-%d %s", i, strings.Repeat("t", 500))),
			assistant(fmt.Sprintf("ASSISTANT-%d %s", i, strings.Repeat("s", 300))),
		)
	}
	prev := "PREV-OLDEST " + strings.Repeat("p", 300) + "\nPREV-NEWEST decision: use Postgres 16"
	tests := []struct {
		name      string
		max       int
		wantIn    []string
		wantNotIn []string
		wantLeft  string
	}{
		{
			name:      "the oldest tool results go first",
			max:       3500,
			wantIn:    []string{"X-0", "X-29", "ASSISTANT-0", `called fetch({"page":0,`, "PREV-OLDEST", "TOOL-OUTPUT-29"},
			wantNotIn: []string{"TOOL-OUTPUT-0 "},
			wantLeft:  "tool results.]",
		},
		{
			name:      "then the oldest tool calls",
			max:       2500,
			wantIn:    []string{"X-0", "X-29", "ASSISTANT-0", `called fetch({"page":29,`, "PREV-OLDEST"},
			wantNotIn: []string{"TOOL-OUTPUT", `called fetch({"page":0,`},
			wantLeft:  "tool calls, 30 tool results.]",
		},
		{
			name:      "then the oldest assistant replies",
			max:       1200,
			wantIn:    []string{"X-0", "X-29", "ASSISTANT-29", "PREV-OLDEST"},
			wantNotIn: []string{"TOOL-OUTPUT", "called fetch", "ASSISTANT-0 "},
			wantLeft:  "assistant replies, 30 tool calls, 30 tool results.]",
		},
		{
			name:      "then the oldest part of the previous summary",
			max:       420,
			wantIn:    []string{"X-0", "X-29", "PREV-NEWEST decision: use Postgres 16"},
			wantNotIn: []string{"TOOL-OUTPUT", "called fetch", "ASSISTANT-", "PREV-OLDEST"},
			wantLeft:  "30 assistant replies, 30 tool calls, 30 tool results, the oldest 313 characters of the earlier summary.]",
		},
		{
			name:      "user messages last, oldest first",
			max:       100,
			wantIn:    []string{"X-29"},
			wantNotIn: []string{"TOOL-OUTPUT", "called fetch", "ASSISTANT-", "PREV-", `X-0"`},
			wantLeft:  "user or system messages",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(t, summary.Input{PreviousSummary: prev, Messages: msgs, MaxSummaryTokens: tt.max})
			if n := tokens.Text(got); n > tt.max {
				t.Fatalf("got %d tokens; want at most %d", n, tt.max)
			}
			for _, s := range tt.wantIn {
				if !strings.Contains(got, s) {
					t.Errorf("summary misses %q:\n%s", s, got)
				}
			}
			for _, s := range tt.wantNotIn {
				if strings.Contains(got, s) {
					t.Errorf("summary holds %q:\n%s", s, got)
				}
			}
			lines := strings.Split(got, "\n")
			if len(lines) < 2 || !strings.HasPrefix(lines[1], "[Left out to fit ") || !strings.Contains(lines[1], tt.wantLeft) {
				t.Errorf("second line %q does not say %q", lines[1], tt.wantLeft)
			}
		})
	}
}

func TestUserTextPreferredOverToolOutput(t *testing.T) {
	msgs := []schemas.Message{
		user("the port must stay 8443"),
		call("c1", "cat", `{"path":"/etc/nginx.conf"}`),
		tool("c1", strings.Repeat("server { listen 80; }\n", 200)),
		user("and keep TLS 1.3 only"),
	}
	got := summarize(t, summary.Input{Messages: msgs, MaxSummaryTokens: 60})
	for _, s := range []string{"8443", "TLS 1.3 only"} {
		if !strings.Contains(got, s) {
			t.Errorf("summary misses the user's %q:\n%s", s, got)
		}
	}
	if strings.Contains(got, "listen 80") {
		t.Errorf("summary keeps tool output over user text:\n%s", got)
	}
}

func TestPreviousSummaryCarriedForwardWhenRoom(t *testing.T) {
	prev := "## Decisions\n- Use Postgres 16 (ops knows it)\n## Facts and identifiers\n- repo: github.com/acme/shop"
	got := summarize(t, summary.Input{PreviousSummary: prev, Messages: []schemas.Message{user("next: migrations")}})
	if !strings.Contains(got, prev) {
		t.Errorf("previous summary not carried forward whole:\n%s", got)
	}
	if strings.Index(got, prev) > strings.Index(got, "next: migrations") {
		t.Errorf("previous summary comes after the new messages:\n%s", got)
	}
}

func TestDefaultCap(t *testing.T) {
	var msgs []schemas.Message
	for i := range 500 {
		msgs = append(msgs, user(fmt.Sprint(i, strings.Repeat(" words", 100))))
	}
	for _, max := range []int{0, -3} {
		got := summarize(t, summary.Input{Messages: msgs, MaxSummaryTokens: max})
		if n := tokens.Text(got); n > extractive.DefaultMaxSummaryTokens || n < extractive.DefaultMaxSummaryTokens-150 {
			t.Errorf("max %d: got %d tokens; want just under %d", max, n, extractive.DefaultMaxSummaryTokens)
		}
	}
}

// TestBound checks the cap on generated conversations of many sizes.
func TestBound(t *testing.T) {
	caps := []int{1, 2, 5, 10, 17, 40, 100, 333, 1000, 2048, 8000}
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, seed*7919))
		in := summary.Input{
			PreviousSummary: randText(r, r.IntN(3)*r.IntN(4000)),
			Messages:        randConversation(r, r.IntN(int(seed%5+1)*40)),
		}
		for _, max := range caps {
			in.MaxSummaryTokens = max
			got := summarize(t, in)
			if n := tokens.Text(got); n > max {
				t.Fatalf("seed %d, %d messages, cap %d: got %d tokens:\n%s", seed, len(in.Messages), max, n, got)
			}
			if again := summarize(t, in); again != got {
				t.Fatalf("seed %d, cap %d: same input gave a different summary", seed, max)
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	build := func() summary.Input {
		r := rand.New(rand.NewPCG(1, 2))
		return summary.Input{PreviousSummary: randText(r, 3000), Messages: randConversation(r, 200), MaxSummaryTokens: 700}
	}
	a := summarize(t, build())
	b := summarize(t, build())
	if a != b {
		t.Errorf("same input gave different summaries:\n%s\n---\n%s", a, b)
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := extractive.New().Summarize(ctx, summary.Input{}); err == nil {
		t.Error("got no error from a canceled context")
	}
}

var words = []string{"deploy", "build", "Ω", "日本語", "port", "8443", "\n", "  ", "\t", "/srv/app", "é", "🙂", "x"}

func randText(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

func randConversation(r *rand.Rand, n int) []schemas.Message {
	var msgs []schemas.Message
	for len(msgs) < n {
		switch r.IntN(4) {
		case 0:
			msgs = append(msgs, user(randText(r, r.IntN(1500))))
		case 1:
			msgs = append(msgs, assistant(randText(r, r.IntN(1500))))
		case 2:
			m := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(randText(r, r.IntN(100)))}
			k := 1 + r.IntN(3)
			for j := range k {
				m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: fmt.Sprint("c", len(msgs), "_", j), Type: "function",
					Function: schemas.FunctionCall{Name: "tool" + fmt.Sprint(j), Arguments: randText(r, r.IntN(600))}})
			}
			msgs = append(msgs, m)
			for _, tc := range m.ToolCalls {
				msgs = append(msgs, tool(tc.ID, randText(r, r.IntN(3000))))
			}
		case 3:
			msgs = append(msgs, schemas.Message{Role: schemas.RoleUser, Name: randText(r, 5),
				Content: schemas.Parts(json.RawMessage(`{"type":"image_url","image_url":{"url":"data:"}}`))})
		}
	}
	return msgs
}

func ExampleSummarizer_Summarize() {
	in := summary.Input{
		PreviousSummary: "The user is Ana; the service is shop-api.",
		Messages: []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("Deploy build 4512 to staging, not prod.")},
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function",
				Function: schemas.FunctionCall{Name: "deploy", Arguments: `{"build":4512,"env":"staging"}`}}}},
			{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text("ok: staging now runs 4512 (rev 9f3c2e)")},
			{Role: schemas.RoleAssistant, Content: schemas.Text("Build 4512 is live on staging.")},
		},
		MaxSummaryTokens: 2048,
	}
	out, err := extractive.New().Summarize(context.Background(), in)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Model, out.Fallback)
	fmt.Println(out.Summary)
	// Output:
	// extractive true
	// Extractive summary, written without an LLM: excerpts of 4 messages in order.
	// The user is Ana; the service is shop-api.
	// Messages since then:
	// - user: "Deploy build 4512 to staging, not prod."
	// - assistant called deploy({"build":4512,"env":"staging"})
	// - result of deploy (38 characters): "ok: staging now runs 4512 (rev 9f3c2e)"
	// - assistant: Build 4512 is live on staging.
}

// The agent's prefix (pinned messages, the summary's message) is for an LLM's prompt
// cache: the extractive summary reads the previous summary and the covered messages
// only, and does not change with it.
func TestPrefixFieldsDoNotChangeTheSummary(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	in := summary.Input{PreviousSummary: randText(r, 2000), Messages: randConversation(r, 80), MaxSummaryTokens: 500}
	want := summarize(t, in)
	sm := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("[Summary of the earlier conversation]\n\n" + in.PreviousSummary)}
	in.Pinned = []schemas.Message{{Role: schemas.RoleSystem, Content: schemas.Text("You are Ops Bot. PINNED-ONLY")}, user("PINNED-ONLY rule")}
	in.SummaryMessage = &sm
	if got := summarize(t, in); got != want {
		t.Errorf("with the prefix fields:\n%s\nwithout:\n%s", got, want)
	}
}
