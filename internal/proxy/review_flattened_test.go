package proxy_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// Review: OpenCode's compaction request flattens its history into its prompt, the
// newest reply included. When that reply is a long text (64 characters or more, as
// most are) the prompt "holds" it, so anchor takes the prompt for the client's copy of
// the newest message: nothing of the request is new (t.New is empty), and
// compactionAnswerOf, which drops "the compaction prompt" as the last user message of
// the stored tail and the new messages, drops the conversation's own last prompt and
// the newest reply instead. The answer loses the last exchange, which the summary does
// not cover either.
func TestReviewFlattenedCompactionKeepsTheLastExchange(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, func(c *proxy.Config) { c.BindOwner = false })
		a.f.opts.Owner = proxy.AnyOwner
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are opencode")}
		last := "LAST-REPLY: all twelve tests pass now; the flaky one needed a longer timeout on CI."
		a.f.turn("oc2", []schemas.Message{sys, user("FACT-3 build it")}, "model reply A")
		a.f.turn("oc2", []schemas.Message{sys, user("FACT-3 build it"), bot("model reply A"), user("LAST-PROMPT test it")}, last)
		putValue(a.f, "oc2", 1, "SUMMARY: FACT-3 was built.", "LAST-PROMPT test it")

		resp, body := a.chat(t, "oc2", false, "system", "You are a context summarization agent. You are given a conversation between a user and an agent.",
			"user", "Here is the conversation so far:\n<conversation>\n[User]: FACT-3 build it\n[Assistant]: model reply A\n[User]: LAST-PROMPT test it\n[Assistant]: "+last+
				"\n</conversation>\nCreate a new anchored summary from the conversation history in the <conversation> tags above")
		if resp.Header.Get(proxy.AnsweredHeader) != "opencode" {
			t.Fatalf("not answered: %s", body)
		}
		if !strings.Contains(body, "SUMMARY: FACT-3") || !strings.Contains(body, "LAST-PROMPT") || !strings.Contains(body, "LAST-REPLY") {
			t.Fatalf("the answer lost the last exchange: %s", body)
		}
	})
}
