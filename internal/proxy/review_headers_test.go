package proxy_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Review (docs): the response headers table promises X-Compactor-Conversation (the
// conversation or branch the context was read from) and X-Compactor-Status on every
// rewritten response; a compaction request answered from the summary carries neither
// (answer and answerCompact never call setTurnHeaders), so a client cannot tell which
// conversation or branch its summary came from.
func TestReviewAnsweredCompactionCarriesTheTurnHeaders(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"system", "you are an agent", "user", "FACT-1 build it"}
		_, _ = a.chat(t, "hd", false, h...)
		h = append(h, "assistant", "model reply 1", "user", "second")
		_, _ = a.chat(t, "hd", false, h...)
		h = append(h, "assistant", "model reply 2")
		putValue(a.f, "hd", 1, "SUMMARY: FACT-1 was built.", "second")
		resp, _ := a.chat(t, "hd", false, append(h, "user", claudeCompact)...)
		if resp.Header.Get(proxy.AnsweredHeader) != "claude-code" || resp.Header.Get(proxy.ConversationHeader) != "hd" || resp.Header.Get(proxy.StatusHeader) == "" {
			t.Fatalf("answered %q: conversation %q, status %q", resp.Header.Get(proxy.AnsweredHeader), resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.StatusHeader))
		}
	})
}
