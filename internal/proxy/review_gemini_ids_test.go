package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// putValueAt is putValue with the tail starting at conv's i-th stored message (from 0).
func putValueAt(f *fixture, conv string, gen uint64, summary string, i int) {
	f.t.Helper()
	msgs, err := f.st.Chat().LoadLeader(f.ctx, conv, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	m := msgs[i]
	_, rev, _ := f.st.Results().Get(f.ctx, conv, true)
	v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: gen, Summary: summary,
		TailStartSeq: m.Seq, CoveredThroughSeq: m.Seq - 1, FirstSeq: msgs[0].Seq, CreatedAt: time.Now()}
	if _, err := f.st.Results().Put(f.ctx, v, rev); err != nil {
		f.t.Fatal(err)
	}
}

// Review: Gemini's wire names a call by its place in its Content and its name
// (gemini_0_read_file), so every read_file call of a conversation has the same id.
// tailStart finds "the client's copy of the first tail message" by call id from the
// client's first message on, so a managed Gemini history (a masked old output) is sent
// with the summary *and* the client's copies of the messages the summary covers: the
// summary does not replace them, and the compaction saves nothing.
func TestReviewGeminiManagedHistoryIsNotSentTwice(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		const id = "gemini_0_read_file"
		h := []schemas.Message{user("COVERED-PROMPT read a.go"), call(id, "cat a.go")}
		f.turn("gm", h[:1], "")
		// The model's call is the reply; the tool result and the next turn follow.
		tr, err := f.conv.Prepare(f.ctx, "gm", h[:1], f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, tr, h[1], &proxy.Usage{Input: 100, Output: 10}); err != nil {
			t.Fatal(err)
		}
		big := "COVERED-OUTPUT " + strings.Repeat("package a\n", 40)
		h = append(h, result(id, big))
		f.turn("gm", h, "read a")
		h = append(h, bot("read a"), user("now read b.go"))
		tr, err = f.conv.Prepare(f.ctx, "gm", h, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, tr, call(id, "cat b.go"), &proxy.Usage{Input: 100, Output: 10}); err != nil {
			t.Fatal(err)
		}
		h = append(h, call(id, "cat b.go"), result(id, "package b"))
		f.turn("gm", h, "read b")
		h = append(h, bot("read b"))
		// The summary covers the first round; the tail starts at the second call.
		putValueAt(f, "gm", 1, "SUMMARY: a.go was read.", 5)

		// Gemini CLI masks the old output.
		masked := append([]schemas.Message(nil), h...)
		masked[2] = result(id, "<tool_output_masked>package a ... </tool_output_masked>")
		tr = f.turn("gm", append(masked, user("now c")), "")
		if tr.Branch != "" || tr.Conv != "gm" {
			t.Fatalf("managed turn: conversation %s, branch %q", tr.Conv, tr.Branch)
		}
		if s := sent(tr); strings.Contains(s, "COVERED-PROMPT") || strings.Contains(s, "tool_output_masked") {
			t.Fatalf("the summary is sent with the messages it covers: %q", s)
		}
	})
}

// Review: the same search from the client's first message takes any earlier message
// equal to the first tail message for its copy: a tail that starts at a prompt the user
// gave before ("continue", "yes", "go on": agents' sessions are full of them) has the
// model sent the summary and, after it, every message the summary covers from the
// first such prompt on. Not Gemini's alone: unique call ids here.
func TestReviewManagedTailStartIsNotAnEarlierRepeat(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("COVERED-PROMPT build it")}
		f.turn("rp", h, "step one done")
		h = append(h, bot("step one done"), user("continue"))
		tr, err := f.conv.Prepare(f.ctx, "rp", h, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, tr, call("call_a1", "make"), &proxy.Usage{Input: 100, Output: 10}); err != nil {
			t.Fatal(err)
		}
		h = append(h, call("call_a1", "make"), result("call_a1", "COVERED-OUTPUT "+strings.Repeat("log\n", 100)))
		f.turn("rp", h, "COVERED-REPLY step two done")
		h = append(h, bot("COVERED-REPLY step two done"), user("continue"))
		f.turn("rp", h, "step three done")
		h = append(h, bot("step three done"))
		// The summary covers everything up to the second "continue" (index 6).
		putValueAt(f, "rp", 1, "SUMMARY: built, two steps.", 6)

		masked := append([]schemas.Message(nil), h...)
		masked[4] = result("call_a1", "<tool_output_masked>log</tool_output_masked>")
		tr = f.turn("rp", append(masked, user("next")), "")
		if tr.Branch != "" || tr.Conv != "rp" {
			t.Fatalf("managed turn: conversation %s, branch %q", tr.Conv, tr.Branch)
		}
		if s := sent(tr); strings.Contains(s, "COVERED-REPLY") || strings.Contains(s, "tool_output_masked") {
			t.Fatalf("the summary is sent with the messages it covers: %q", s)
		}
	})
}
