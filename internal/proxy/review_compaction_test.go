package proxy_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Review: an agent that rewinds (drops its newest prompt and reply) and then asks for its
// own compaction (Claude Code's /rewind then /compact) is answered with the messages it
// dropped: the compaction rule takes any history with a compaction prompt as a
// continuation of the parent, and the answer quotes the parent's stored tail verbatim.
// The agent carries the answer into its next history, so the model is sent what the
// agent removed; and the prompt and answer are stored after the dropped reply.
func TestReviewCompactionAfterARewindDoesNotQuoteTheDroppedMessages(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"system", "you are an agent", "user", "FACT-1 build it"}
		_, _ = a.chat(t, "rw", false, h...)
		h = append(h, "assistant", "model reply 1", "user", "second")
		_, _ = a.chat(t, "rw", false, h...)
		h = append(h, "assistant", "model reply 2")
		_, _ = a.chat(t, "rw", false, append(h, "user", "DROPPED-PROMPT rm -rf everything")...)
		putValue(a.f, "rw", 1, "SUMMARY: FACT-1 was built.", "second")
		before := strings.Join(a.f.stored("rw"), "|")

		// The agent rewound to before its third prompt, then compacts.
		resp, body := a.chat(t, "rw", false, append(h, "user", claudeCompact)...)
		if strings.Contains(body, "DROPPED-PROMPT") || strings.Contains(body, "model reply 3") {
			t.Fatalf("the answer (answered %q, conversation %q, branch %q) quotes the messages the agent dropped: %s",
				resp.Header.Get(proxy.AnsweredHeader), resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader), body)
		}
		if got := strings.Join(a.f.stored("rw"), "|"); got != before {
			t.Fatalf("the parent changed: from\n%q\nto\n%q", before, got)
		}
	})
}
