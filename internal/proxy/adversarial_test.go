package proxy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// The same turn in flight twice (a retry racing the first attempt, two proxy
// processes), each answered with a different reply: the first reply stored takes the
// place, the second goes to a branch, and the next turn on the reply the client kept is
// never sent the other one, a message the client never had. (Both used to be stored at
// the same place and sent.)
func TestTwoRepliesToOneTurnNeverMeet(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := []schemas.Message{user("one")}
		a, err := f.conv.Prepare(f.ctx, "rv1", h, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.conv.Prepare(f.ctx, "rv1", h, f.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, a, bot("answer A"), nil); err != nil {
			t.Fatal(err)
		}
		if err := f.conv.Finish(f.ctx, b, bot("answer B"), nil); err != nil {
			t.Fatal(err)
		}
		// The client got B (the retry's answer) and goes on.
		next := f.turn("rv1", []schemas.Message{user("one"), bot("answer B"), user("two")}, "")
		t.Logf("stored %q on %s; sent %q", f.stored("rv1"), next.Conv, sent(next))
		if strings.Contains(sent(next), "answer A") || sent(next) != "one|answer B|two|" {
			t.Fatalf("the model is sent %q: want the client's history, never answer A", sent(next))
		}
		if got := strings.Join(f.stored("rv1"), "|"); got != "one|answer A" {
			t.Fatalf("the conversation holds %q; want the first reply stored once", got)
		}
	})
}

// A client that cuts its history back to a prefix the summary covers (a truncate past
// the tail) is sent its own messages, cut to fit the window (the cut used to drop
// nothing: it took every message for the summary).
func TestTruncateBehindTheSummaryFitsTheWindow(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 2000)
		var h []schemas.Message
		for i := 0; i < 200; i++ {
			h = append(h, user(strings.Repeat("word ", 200)), bot("ok"))
		}
		h = append(h, user("tail starts here"))
		f.turn("rv2", h, "stored")
		putAll(f, "rv2", 1, "SUMMARY")
		prefix := h[:301] // ends with a user message the summary covers
		tr := f.turn("rv2", prefix, "")
		t.Logf("branch %q cut %v sent %d tokens (client %d)", tr.Branch, tr.Cut, tr.Context.Tokens, tr.ClientTokens)
		if tr.Context.Tokens > 2000 {
			t.Fatalf("sent %d tokens for a window of 2000", tr.Context.Tokens)
		}
	})
}

// putAll writes a value whose summary covers every message of conv (an empty tail).
func putAll(f *fixture, conv string, gen uint64, summary string) {
	f.t.Helper()
	msgs, err := f.st.Chat().LoadLeader(f.ctx, conv, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	last := msgs[len(msgs)-1].Seq
	_, rev, _ := f.st.Results().Get(f.ctx, conv, true)
	v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: gen, Summary: summary,
		TailStartSeq: last + 1, CoveredThroughSeq: last, FirstSeq: msgs[0].Seq, CreatedAt: time.Now()}
	if _, err := f.st.Results().Put(f.ctx, v, rev); err != nil {
		f.t.Fatal(err)
	}
}

// The proxy does not take an id that holds its branches' separator: "team--x" could
// not be told from a branch of "team" by a forget.
func TestIDWithTheBranchSeparatorIsRefused(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		_, err := f.conv.Prepare(f.ctx, "team--x", []schemas.Message{user("hi")}, f.opts)
		if !errors.Is(err, proxy.ErrBadRequest) || !strings.Contains(err.Error(), "--") {
			t.Fatalf("prepare of team--x: %v; want a bad request naming the separator", err)
		}
	})
}

// A client message may carry Compactor's own "tokens" field: a declared count is a hint,
// and the model is still sent no more than the window by the estimate of the text.
func TestDeclaredTokensDoNotBreakTheBound(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 2000)
		var h []schemas.Message
		for i := 0; i < 20; i++ {
			u := user(strings.Repeat("word ", 200))
			u.Tokens = 1
			b := bot(strings.Repeat("okay ", 200))
			b.Tokens = 1
			h = append(h, u, b)
		}
		h = append(h, user("last"))
		tr := f.turn("rv5", h, "")
		var real int
		for i := range tr.Context.Messages {
			m := tr.Context.Messages[i].StripMetadata()
			real += tokens.Message(&m)
		}
		t.Logf("cut %v; Context.Tokens %d; estimate of what is sent %d", tr.Cut, tr.Context.Tokens, real)
		if real > 2000 {
			t.Fatalf("sent %d tokens (estimate of the text) for a window of 2000", real)
		}
	})
}

// A conversation whose newest message another producer wrote with meta proxy.n "0"
// and a well-formed proxy.chain is not the proxy's (it used to index chain[-1] and
// panic, holding a lock).
func TestPositionZeroIsNotTheProxys(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		m := user("written by another producer")
		m.Meta = map[string]string{proxy.MetaPos: "0", proxy.MetaChain: strings.Repeat("ab", 16)}
		if _, err := pipeline.NewWithStore(nc, st).Publish(f.ctx, "rv6", m); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Prepare panicked: %v", r)
			}
		}()
		_, err := f.conv.Prepare(f.ctx, "rv6", []schemas.Message{user("hi")}, f.opts)
		if !errors.Is(err, proxy.ErrBadRequest) {
			t.Fatalf("prepare: %v; want a bad request", err)
		}
	})
}
