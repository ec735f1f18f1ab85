package proxy_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Review: transcriptLine cuts a message over 8 KiB at byte offsets (and a tool call's
// arguments at 8 KiB), splitting a multi-byte character: the answer holds invalid
// UTF-8 (the client gets U+FFFD), and Finish refuses to store it (schemas.Text keeps
// invalid UTF-8 so that Validate refuses it) after it stored the prompt: a half-stored
// turn, a prompt with no reply. The agent's next history, which carries the answer
// instead of the conversation's newest message, is no continuation of it: the
// conversation forks into an edit branch after every compaction answered for a user
// who writes CJK text or emoji.
func TestReviewCompactionAnswerCutsOnCharacterBoundaries(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		long := strings.Repeat("日", 3000) // 9,000 bytes: cut at 4,096 and 4,904 bytes
		h := []string{"system", "you are an agent", "user", "FACT-1 build it"}
		_, _ = a.chat(t, "u8", false, h...)
		h = append(h, "assistant", "model reply 1", "user", long)
		_, _ = a.chat(t, "u8", false, h...)
		h = append(h, "assistant", "model reply 2")
		putValue(a.f, "u8", 1, "SUMMARY: FACT-1 was built.", long)
		before := len(a.f.stored("u8"))

		resp, body := a.chat(t, "u8", false, append(h, "user", claudeCompact)...)
		if resp.Header.Get(proxy.AnsweredHeader) != "claude-code" {
			t.Fatalf("not answered: %s", body)
		}
		if got := a.f.stored("u8"); len(got) != before+2 {
			t.Fatalf("the prompt and the answer were not both stored: CHAT went from %d to %d messages", before, len(got))
		}
		if !utf8.ValidString(body) || strings.Contains(body, "\ufffd") || strings.Contains(body, `\ufffd`) {
			t.Fatalf("the answer holds a broken character")
		}
	})
}
