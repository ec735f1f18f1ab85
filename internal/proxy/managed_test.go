package proxy_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

func call(id, cmd string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function",
		Function: schemas.FunctionCall{Name: "shell", Arguments: `{"command":"` + cmd + `"}`}}}}
}

func result(id, out string) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(out)}
}

// An agent that masks an old tool output (Gemini CLI's <tool_output_masked>) and drops
// its first prompt still holds the newest message: its history continues the
// conversation, with no branch; only its new messages are stored, and what it masked
// or dropped is never sent back to the model, before or after a compaction.
func TestAgentsOwnContextManagementIsNotAFork(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("you are an agent")}
		big := "FULL-OUTPUT " + strings.Repeat("line of build log\n", 50)
		h := []schemas.Message{sys, user("FACT-1 build it"), call("t1", "make"), result("t1", big)}
		f.turn("g1", h, "built")
		h = append(h, bot("built"), user("now test"))
		f.turn("g1", h, "tested")
		h = append(h, bot("tested"))

		masked := append([]schemas.Message(nil), h...)
		masked[3] = result("t1", "<tool_output_masked>\nline of build log\n... 48 lines omitted ...\n</tool_output_masked>")
		tr := f.turn("g1", append(masked, user("deploy")), "deployed")
		if tr.Branch != "" || tr.Conv != "g1" || tr.Published != 1 {
			t.Fatalf("masked turn: conversation %s, branch %q, published %d; want g1, none, 1", tr.Conv, tr.Branch, tr.Published)
		}
		if s := sent(tr); strings.Contains(s, "FULL-OUTPUT") || !strings.Contains(s, "tool_output_masked") || !strings.HasSuffix(s, "tested|deploy|") {
			t.Fatalf("masked turn sent %q", s)
		}

		// Later the agent also drops its first prompt.
		dropped := append(append([]schemas.Message{sys}, masked[2:]...), user("deploy"), bot("deployed"), user("report"))
		tr = f.turn("g1", dropped, "reported")
		if tr.Branch != "" || tr.Conv != "g1" || tr.Published != 1 {
			t.Fatalf("dropped-prompt turn: conversation %s, branch %q, published %d", tr.Conv, tr.Branch, tr.Published)
		}
		want := "you are an agent|FACT-1 build it||" + big + "|built|now test|tested|deploy|deployed|report|reported"
		if got := strings.Join(f.stored("g1"), "|"); got != want {
			t.Fatalf("CHAT holds\n%q\nwant\n%q", got, want)
		}

		// Compacted: Compactor's summary in place of what it covers, then the client's
		// own copies of the tail (its masked output, not the stored one).
		putValue(f, "g1", 1, "SUMMARY: FACT-1", "")
		next := append(dropped, bot("reported"), user("done?"))
		tr = f.turn("g1", next, "")
		s := sent(tr)
		if tr.Branch != "" || !strings.HasPrefix(s, "you are an agent|[Summary") || !strings.Contains(s, "SUMMARY: FACT-1||<tool_output_masked>") || strings.Contains(s, "FULL-OUTPUT") ||
			!strings.Contains(s, "tool_output_masked") || !strings.HasSuffix(s, "reported|done?|") {
			t.Fatalf("compacted managed turn (branch %q) sent %q", tr.Branch, s)
		}
	})
}

// An agent that compacts on its own (Claude Code's /compact, Codex's checkpoint)
// continues from a history that holds the summary its model wrote, in a message of its
// own, instead of the messages it summarized: the same conversation, continued, and
// the next turns accumulate in it.
func TestAgentsOwnSummaryContinuesTheConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("you are an agent")}
		h := []schemas.Message{sys, user("FACT-7 is the port"), bot("noted"), user("Your task is to create a detailed summary of the conversation so far")}
		core := "1. Primary Request: remember FACT-7 is the port. " + strings.Repeat("More detail of the work so far. ", 10)
		f.turn("cc", h, "<analysis>thinking it over</analysis>\n<summary>\n"+core+"\n</summary>")
		cont := []schemas.Message{sys, user("This session is being continued from a previous conversation that ran out of context. " +
			"The conversation is summarized below:\n" + core + "\nPlease continue."), user("next step")}
		tr := f.turn("cc", cont, "ok, next")
		if tr.Branch != "" || tr.Conv != "cc" || tr.Published != 1 {
			t.Fatalf("after the agent's own summary: conversation %s, branch %q, published %d; want cc, none, 1", tr.Conv, tr.Branch, tr.Published)
		}
		tr = f.turn("cc", append(cont, bot("ok, next"), user("and then")), "done")
		if tr.Branch != "" || tr.Published != 1 {
			t.Fatalf("the turn after: branch %q, published %d", tr.Branch, tr.Published)
		}
		if got := f.stored("cc"); len(got) != 9 || got[5] != "next step" || got[8] != "done" {
			t.Fatalf("CHAT holds %q", got)
		}
	})
}

// A short newest message is found only as itself: a later prompt that merely quotes it
// is no copy, and a history that lost it is an edit (a branch), as before.
func TestAHistoryWithoutTheNewestMessageStillBranches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("one"), bot("reply one"), user("two")}
		f.turn("e1", h, "reply two")
		// The agent rewound to its first prompt, edited it, and quotes the old reply.
		tr := f.turn("e1", []schemas.Message{user("ONE, edited"), user("you said: reply two")}, "fine")
		if tr.Branch != "edit" || tr.Conv == "e1" {
			t.Fatalf("a rewound, edited history: conversation %s, branch %q; want an edit branch", tr.Conv, tr.Branch)
		}
		if got := strings.Join(f.stored("e1"), "|"); got != "one|reply one|two|reply two" {
			t.Fatalf("the conversation changed: %q", got)
		}
	})
}
