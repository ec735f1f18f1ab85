package extractive_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/summary"
)

// agentRun is a synthetic agent run: the user's task first, then tool rounds with big
// outputs, and every 25 rounds a later user message. Each user message holds a unique
// marker, returned in order.
func agentRun(rounds int) (msgs []schemas.Message, markers []string) {
	say := func(marker, text string) {
		markers = append(markers, marker)
		msgs = append(msgs, user(marker+": "+text))
	}
	say("TASK-7F3A", "migrate the billing service to Postgres 16 and keep the public API unchanged.")
	for r := range rounds {
		if r > 0 && r%25 == 0 {
			say(fmt.Sprint("LATER-", r/25), fmt.Sprintf("also keep the p99 latency under %d ms.", 100+r))
		}
		id := fmt.Sprint("call_", r)
		msgs = append(msgs,
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(fmt.Sprintf("Round %d: reading the next file.", r)),
				ToolCalls: []schemas.ToolCall{{ID: id, Type: "function", Function: schemas.FunctionCall{
					Name: "read_file", Arguments: fmt.Sprintf(`{"path":"billing/part_%d.go","filler":%q}`, r, strings.Repeat("f", 150))}}}},
			tool(id, fmt.Sprintf("OUT-%d %s", r, strings.Repeat("package billing // row data\n", 150))),
		)
	}
	return msgs, markers
}

var leftOutCount = regexp.MustCompile(`(?:: |, )(\d+) (user or system messages?|assistant repl(?:y|ies)|tool calls?|tool results?)\b`)

// TestGenerations feeds each summary back as the previous summary of the next one, as
// a conversation compacted again and again without an LLM does.
func TestGenerations(t *testing.T) {
	msgs, markers := agentRun(100)
	const generations = 20
	tests := []struct {
		name string
		max  int
		// exact: the cap leaves room for the header and the whole left-out line, so the
		// counts can be checked.
		exact bool
	}{
		{name: "room for every user message", max: 250, exact: true},
		{name: "room for the user messages only just", max: 120, exact: true},
		{name: "room for some user messages", max: 70, exact: true},
		{name: "room for less than the header", max: 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev := ""
			var userRunes, wantUsers, results, calls, replies int
			var seen []string
			for g := range generations {
				chunk := msgs[g*len(msgs)/generations : (g+1)*len(msgs)/generations]
				end := (g + 1) * len(msgs) / generations
				in := summary.Input{PreviousSummary: prev, Messages: chunk, MaxSummaryTokens: tt.max}
				got := summarize(t, in)
				if again := summarize(t, in); again != got {
					t.Fatalf("generation %d: same input gave a different summary", g)
				}
				prev = got
				for i := range chunk {
					m := &chunk[i]
					switch {
					case m.Role == schemas.RoleUser:
						userRunes += len(`- user: "`+m.Content.String()+`"`) + 1
						wantUsers++
						seen = markers[:wantUsers]
					case m.Role == schemas.RoleTool:
						results++
					default:
						replies++
						calls += len(m.ToolCalls)
					}
				}

				if n := tokens.Text(got); n > tt.max {
					t.Fatalf("generation %d: got %d tokens; want at most %d:\n%s", g, n, tt.max, got)
				}
				lines := strings.Split(got, "\n")
				if !strings.HasPrefix(lines[0], extractive.HeaderPrefix) || strings.Count(got, extractive.HeaderPrefix) != 1 {
					t.Fatalf("generation %d: want exactly one header, first:\n%s", g, got)
				}
				left := ""
				for i, ln := range lines {
					if strings.HasPrefix(ln, "[Left out to fit ") {
						if left != "" || i != 1 {
							t.Fatalf("generation %d: want at most one left-out line, second:\n%s", g, got)
						}
						left = ln
					}
				}
				if !tt.exact {
					continue
				}

				// If all user bullets fit besides the header and the left-out line, all
				// user markers are there.
				fixed := len([]rune(lines[0]))
				if left != "" {
					fixed += len([]rune(left)) + 1
				}
				if fixed+userRunes <= 4*tt.max {
					for _, m := range seen {
						if !strings.Contains(got, m+":") {
							t.Fatalf("generation %d: user marker %s lost though every user message fits:\n%s", g, m, got)
						}
					}
				}

				wantHeader := fmt.Sprintf("excerpts of %d messages in order.", end)
				if !strings.HasSuffix(lines[0], wantHeader) {
					t.Errorf("generation %d: header %q; want it to end %q", g, lines[0], wantHeader)
				}
				// Every bullet ever made is either still there or counted as left out.
				leftOut := map[string]int{}
				for _, m := range leftOutCount.FindAllStringSubmatch(left, -1) {
					n, _ := strconv.Atoi(m[1])
					leftOut[strings.TrimSuffix(strings.TrimSuffix(m[2], "s"), "ie")] += n
				}
				kept := func(prefix string) int {
					n := 0
					for _, ln := range lines {
						if strings.HasPrefix(ln, prefix) {
							n++
						}
					}
					return n
				}
				for _, c := range []struct {
					what         string
					prefix, name string
					total        int
				}{
					{"tool results", "- result of ", "tool result", results},
					{"tool calls", "- assistant called ", "tool call", calls},
					{"assistant replies", "- assistant: ", "assistant repl", replies},
					{"user messages", "- user: ", "user or system message", wantUsers},
				} {
					if k, l := kept(c.prefix), leftOut[c.name]; k+l != c.total {
						t.Errorf("generation %d: %d %s kept and %d left out; want %d in all:\n%s", g, k, c.what, l, c.total, got)
					}
				}
			}
			t.Logf("last generation:\n%s", prev)
		})
	}
}

// TestCarriedForward checks the order in which bullets carried forward from an earlier
// extractive summary and the new ones are left out.
func TestCarriedForward(t *testing.T) {
	big := strings.Repeat("x", 300)
	prev := extractive.HeaderPrefix + ": excerpts of 5 messages in order.\n" +
		"- user: \"OLD-USER keep the port 8443\"\n" +
		"- assistant: OLD-REPLY " + big[:150] + "\n" +
		"- assistant called ls(OLD-CALL " + big[:100] + ")\n" +
		"- result of ls (3000 characters): \"OLD-RESULT " + big[:110] + "\"\n" +
		"- user (ana): \"OLD-ANA use TLS 1.3\""
	news := []schemas.Message{
		call("c1", "cat", `{"NEW-CALL":"`+big[:100]+`"}`),
		tool("c1", "NEW-RESULT "+big),
		assistant("NEW-REPLY " + big[:150]),
		user("NEW-USER ship it"),
	}
	foreignPrev := extractive.HeaderPrefix + ": excerpts of 2 messages in order.\n" +
		"## Goal\nLLM-OLDEST " + big[:100] + "\n## Decisions\nLLM-NEWEST use Postgres 16\n" +
		sinceLabel + "\n" +
		"- user: \"OLD-USER keep the port 8443\"\n" +
		"- result of ls (3000 characters): \"OLD-RESULT " + big[:110] + "\""
	tests := []struct {
		name      string
		prev      string
		max       int
		wantIn    []string
		wantNotIn []string
		wantLeft  string
	}{
		{
			name:      "results first, carried before new",
			prev:      prev,
			max:       265,
			wantIn:    []string{"OLD-USER", "OLD-ANA", "NEW-USER", "OLD-REPLY", "NEW-REPLY", "OLD-CALL", "NEW-CALL", "NEW-RESULT"},
			wantNotIn: []string{"OLD-RESULT"},
			wantLeft:  ": 1 tool result.]",
		},
		{
			name:      "then calls and replies, carried before new",
			prev:      prev,
			max:       125,
			wantIn:    []string{"OLD-USER", "OLD-ANA", "NEW-USER", "NEW-REPLY"},
			wantNotIn: []string{"RESULT", "CALL", "OLD-REPLY"},
			wantLeft:  ": 1 assistant reply, 2 tool calls, 2 tool results.]",
		},
		{
			name:      "user messages last, oldest first",
			prev:      prev,
			max:       63,
			wantIn:    []string{"OLD-ANA", "NEW-USER"},
			wantNotIn: []string{"RESULT", "CALL", "REPLY", "OLD-USER"},
			wantLeft:  ": 1 user or system message, 2 assistant replies, 2 tool calls, 2 tool results.]",
		},
		{
			name:      "a foreign summary goes after the tool bullets",
			prev:      foreignPrev,
			max:       155,
			wantIn:    []string{"OLD-USER", "NEW-USER", "LLM-OLDEST", "LLM-NEWEST", "NEW-REPLY", sinceLabel},
			wantNotIn: []string{"RESULT", "CALL"},
			wantLeft:  ": 1 tool call, 2 tool results.]",
		},
		{
			name:      "and before the user bullets",
			prev:      foreignPrev,
			max:       90,
			wantIn:    []string{"OLD-USER", "NEW-USER", "LLM-NEWEST use Postgres 16"},
			wantNotIn: []string{"RESULT", "CALL", "REPLY", "LLM-OLDEST"},
			wantLeft:  ": 1 assistant reply, 1 tool call, 2 tool results, the oldest 120 characters of the earlier summary.]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(t, summary.Input{PreviousSummary: tt.prev, Messages: news, MaxSummaryTokens: tt.max})
			if n := tokens.Text(got); n > tt.max {
				t.Fatalf("got %d tokens; want at most %d:\n%s", n, tt.max, got)
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
			if lines := strings.Split(got, "\n"); !strings.HasPrefix(lines[1], "[Left out to fit ") || !strings.HasSuffix(lines[1], tt.wantLeft) {
				t.Errorf("second line %q does not end %q", lines[1], tt.wantLeft)
			}
		})
	}
}

const sinceLabel = "Messages since then:"

func TestLeftOutLineIsCumulative(t *testing.T) {
	tests := []struct {
		name string
		prev string
		give []schemas.Message
		max  int
		want string
	}{
		{
			name: "counts of the previous line are added to",
			prev: extractive.HeaderPrefix + ": excerpts of 3 messages in order.\n" +
				"[Left out to fit 100 tokens: 2 tool calls, 2 tool results.]\n" +
				"- user: \"go\"",
			give: []schemas.Message{call("c1", "f", "{}"), tool("c1", strings.Repeat("z", 500))},
			max:  70,
			want: extractive.HeaderPrefix + ": excerpts of 5 messages in order.\n" +
				"[Left out to fit 70 tokens, counting earlier extractive summaries: 2 tool calls, 3 tool results.]\n" +
				"- user: \"go\"\n" +
				"- assistant called f({})",
		},
		{
			name: "the line is carried when nothing new is left out",
			prev: extractive.HeaderPrefix + ": excerpts of 3 messages in order.\n" +
				"[Left out to fit 100 tokens: 1 assistant reply, the oldest 40 characters of the earlier summary.]\n" +
				"- user: \"go\"",
			give: []schemas.Message{user("more")},
			max:  100,
			want: extractive.HeaderPrefix + ": excerpts of 4 messages in order.\n" +
				"[Left out to fit 100 tokens, counting earlier extractive summaries: 1 assistant reply, the oldest 40 characters of the earlier summary.]\n" +
				"- user: \"go\"\n" +
				"- user: \"more\"",
		},
		{
			name: "summaries that piled up left-out lines are read",
			prev: extractive.HeaderPrefix + ": excerpts of 2 messages in order.\n" +
				"[Left out to fit 100 tokens: parts of 2 of the 2 messages (1 tool call, 1 tool result).]\n" +
				"[Left out to fit 100 tokens: parts of 3 of the 4 messages (1 user or system message, 2 tool results) and the oldest 9 characters of the earlier summary.]\n" +
				"- user: \"first\"\n" +
				sinceLabel + "\n" +
				"- assistant: ok\n" +
				sinceLabel + "\n" +
				"- user: \"second\"",
			give: []schemas.Message{user("third")},
			max:  100,
			want: extractive.HeaderPrefix + ": excerpts of 3 messages in order.\n" +
				"[Left out to fit 100 tokens, counting earlier extractive summaries: 1 user or system message, 1 tool call, 3 tool results, the oldest 9 characters of the earlier summary.]\n" +
				"- user: \"first\"\n" +
				"- assistant: ok\n" +
				"- user: \"second\"\n" +
				"- user: \"third\"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(t, summary.Input{PreviousSummary: tt.prev, Messages: tt.give, MaxSummaryTokens: tt.max})
			if got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestOneUserBulletCutLast(t *testing.T) {
	task := "TASK " + strings.Repeat("word ", 100)
	got := summarize(t, summary.Input{Messages: []schemas.Message{user(task), tool("c1", "big "+strings.Repeat("y", 900))}, MaxSummaryTokens: 60})
	if n := tokens.Text(got); n != 60 {
		t.Errorf("got %d tokens; want the whole cap of 60", n)
	}
	lines := strings.Split(got, "\n")
	want := "[Left out to fit 60 tokens: 1 tool result, the end of 1 user or system message.]"
	if len(lines) != 3 || lines[1] != want || !strings.HasPrefix(lines[2], `- user: "TASK word`) || !strings.HasSuffix(lines[2], "…") {
		t.Errorf("got\n%s\nwant the left-out line %q and the start of the user's task", got, want)
	}

	// Cut again in the next generation, it is still counted once.
	got = summarize(t, summary.Input{PreviousSummary: got, Messages: []schemas.Message{tool("c2", strings.Repeat("y", 900))}, MaxSummaryTokens: 60})
	lines = strings.Split(got, "\n")
	want = "[Left out to fit 60 tokens, counting earlier extractive summaries: 2 tool results, the end of 1 user or system message.]"
	if n := tokens.Text(got); len(lines) != 3 || lines[1] != want || !strings.HasPrefix(lines[2], `- user: "TASK word`) || n > 60 {
		t.Errorf("next generation: got %d tokens\n%s\nwant the left-out line %q and the start of the user's task", n, got, want)
	}
}

// TestBoundAcrossGenerations checks the cap, the one header and the one left-out line on
// generated conversations compacted again and again, starting from a foreign summary.
func TestBoundAcrossGenerations(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, seed*104729))
		max := []int{1, 5, 30, 80, 200, 700}[seed%6]
		prev := randText(r, r.IntN(3000))
		for g := range 15 {
			in := summary.Input{PreviousSummary: prev, Messages: randConversation(r, r.IntN(40)), MaxSummaryTokens: max}
			got := summarize(t, in)
			if n := tokens.Text(got); n > max {
				t.Fatalf("seed %d, generation %d, cap %d: got %d tokens:\n%s", seed, g, max, n, got)
			}
			if again := summarize(t, in); again != got {
				t.Fatalf("seed %d, generation %d: same input gave a different summary", seed, g)
			}
			// Under 20 tokens, not even the header fits.
			if n := strings.Count(got, extractive.HeaderPrefix); n > 1 || n == 0 && max >= 20 {
				t.Fatalf("seed %d, generation %d, cap %d: %d headers:\n%s", seed, g, max, n, got)
			}
			if n := strings.Count(got, "[Left out to fit "); n > 1 {
				t.Fatalf("seed %d, generation %d: %d left-out lines:\n%s", seed, g, n, got)
			}
			prev = got
		}
	}
}
