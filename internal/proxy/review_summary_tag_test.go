package proxy_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Review: the answer quotes the messages since the summary verbatim inside its
// <summary> element without escaping, and summaryCore takes the text up to the *last*
// </summary>. Claude Code reads its summary with a non-greedy <summary>([\s\S]*?)
// </summary> match: when a quoted message holds "</summary>" (HTML's <details>
// <summary>, common in web work and READMEs) the agent keeps only the text up to it,
// the part after is lost to it, and its next history no longer holds what the proxy
// looks for, so the conversation forks into an edit branch right after the answer.
func TestReviewAnswerWithASummaryTagInAMessageIsContinued(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"system", "you are an agent", "user", "FACT-9 is the port"}
		_, _ = a.chat(t, "st", false, h...)
		h = append(h, "assistant", "model reply 1", "user", "add <details><summary>Logs</summary>...</details> to README.md")
		_, _ = a.chat(t, "st", false, h...)
		h = append(h, "assistant", "model reply 2")
		putValue(a.f, "st", 1, "SUMMARY: FACT-9 is the port.", "add <details><summary>Logs</summary>...</details> to README.md")
		resp, body := a.chat(t, "st", false, append(h, "user", claudeCompact)...)
		if resp.Header.Get(proxy.AnsweredHeader) != "claude-code" {
			t.Fatalf("not answered: %s", body)
		}
		var out struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Choices) != 1 {
			t.Fatalf("%v: %s", err, body)
		}
		m := regexp.MustCompile(`<summary>([\s\S]*?)</summary>`).FindStringSubmatch(out.Choices[0].Message.Content)
		if m == nil || !strings.Contains(m[1], "model reply 2") {
			t.Fatalf("the summary the agent reads stops short of the messages since: %q", m)
		}
		resp, _ = a.chat(t, "st", false, "system", "you are an agent",
			"user", "This session is being continued from a previous conversation. Summary:\n"+strings.TrimSpace(m[1]), "user", "next")
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "st" {
			t.Fatalf("after the answer: conversation %q, branch %q", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader))
		}
	})
}
