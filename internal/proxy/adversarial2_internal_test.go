package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

func r2user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}
func r2bot(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s)}
}

func r2store(t *testing.T, nc *nats.Conn, st *jetstream.Store) (*Store, context.Context) {
	set := policy.Defaults()
	set.ContextWindow = 128000
	settings := func(context.Context, string) (policy.Settings, error) { return set, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return NewConversations(nc, st, settings, zerolog.Nop()), ctx
}

func r2texts(t *testing.T, ctx context.Context, st *jetstream.Store, conv string) string {
	t.Helper()
	msgs, err := st.Chat().LoadLeader(ctx, conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		e := m.Entry()
		out = append(out, e.Message.Content.String())
	}
	return strings.Join(out, "|")
}

// Two proxy processes finish two different continuations of the same tip at the same
// time (process B read the tip before process A stored its turn). B's first place is
// taken by A's message (ErrDuplicate), and nothing of B's batch after it is stored (a
// batch used to send every message before its first ack: B's later places were free
// and stored after A's, and B's next turn was sent A's messages and never its own).
func TestAStaleBaseStoresNothingPastATakenPlace(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		s, ctx := r2store(t, nc, st)
		opts := TurnOptions{Owner: "o", CacheTTL: time.Minute}
		h := []schemas.Message{r2user("u0")}
		t0, err := s.Prepare(ctx, "dup1", h, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, t0, r2bot("r0"), nil); err != nil {
			t.Fatal(err)
		}
		tipB, err := s.tip(ctx, "dup1") // what B's resolve read: the tip before A stored
		if err != nil {
			t.Fatal(err)
		}
		// A: the client's continuation [u0 r0 A-user] + A-reply, stored.
		hA := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("A-user")}
		ta, err := s.Prepare(ctx, "dup1", hA, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, ta, r2bot("A-reply"), nil); err != nil {
			t.Fatal(err)
		}
		// B: another continuation of the same tip, longer (a tool round, say), + B-reply,
		// published as resolve publishes it with the tip it read before A stored.
		fullB := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("B-user"), r2bot("B-mid"), r2user("B-user2"), r2bot("B-reply")}
		chainB := Chain(fullB)
		base, err := s.base(ctx, "dup1", tipB)
		if err != nil {
			t.Fatal(err)
		}
		_, _, perr := s.publish(ctx, "dup1", fullB[tipB.pos:], tipB.pos, prevLink(chainB, tipB.pos), "o", base, tipB.seq)
		t.Logf("B's publish: %v", perr)
		// resolve goes on after ErrDuplicate: re-read the tip and store what is missing.
		if _, err := s.resolve(ctx, "dup1", fullB, chainB, "o", true); err != nil {
			t.Fatal(err)
		}
		got := r2texts(t, ctx, st, "dup1")
		t.Logf("CHAT dup1: %s", got)
		// B's client goes on.
		next := append(append([]schemas.Message(nil), fullB...), r2user("B-next"))
		tn, err := s.Prepare(ctx, "dup1", next, opts)
		if err != nil {
			t.Fatal(err)
		}
		var sent []string
		for _, m := range tn.Context.Messages {
			sent = append(sent, m.Content.String())
		}
		t.Logf("B's next turn on %s (%q) is sent %q", tn.Conv, tn.Branch, sent)
		if strings.Contains(got, "B-user2") && strings.Contains(got, "A-user") {
			t.Errorf("dup1 holds A's turn and the rest of B's after it: %s", got)
		}
		if s := strings.Join(sent, "|"); strings.Contains(s, "A-user") || !strings.Contains(s, "B-user|") {
			t.Errorf("B's client is sent %q: A's messages, which it never had, instead of its own", s)
		}
	})
}

// A streamed reply over the bound the proxy keeps (maxReply) is a whole, successful
// stream: passed to the client and not stored, with no error event after its end (the
// accumulator stops hearing events at the bound, so it never sees the end; the proxy
// used to take that for a broken stream).
func TestStreamOverTheBoundGetsNoErrorAfterItsEnd(t *testing.T) {
	defer func(old int) { maxReply = old }(maxReply)
	maxReply = 64
	release := make(chan struct{})
	close(release)
	long := strings.Repeat("z", 200)
	up := newFakeUpstream(t, streamUpstream(release, "data: {\"text\":\""+long+"\"}\n\ndata: [DONE]\n\n"))
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
	body := readAll(t, resp)
	t.Logf("client got %q", body)
	if i := strings.Index(body, "[DONE]"); i < 0 || strings.Contains(body[i:], "event: error") {
		t.Fatalf("a whole stream over the bound ends with an error event after its end: %q", body)
	}
}

// After the API's end, tee reads no further: an upstream that goes on sending after
// [DONE] (comments, keep-alives, a hostile one) cannot make the proxy hold more than
// the read the end came in, nor keep the client waiting for the upstream's close (it
// used to hold every byte until the close).
func TestNothingIsReadAfterTheStreamsEnd(t *testing.T) {
	defer func(old int) { maxReply = old }(maxReply)
	maxReply = 1 << 10
	rec := httptest.NewRecorder()
	x := &exchange{w: rec}
	rc := http.NewResponseController(rec)
	sp := wire.NewSSESplitter(0, func(string, []byte) error { return nil })
	stream := "data: [DONE]\n\n" + strings.Repeat(": keep-alive\n", 700_000) // ~9 MiB after the end
	held, _, _ := x.tee(strings.NewReader(stream), rc, sp, func() bool { return true })
	t.Logf("held %d bytes after the end (maxReply %d)", len(held), maxReply)
	if len(held) > 32<<10 {
		t.Fatalf("tee held %d bytes after the stream's end; want at most the one read the end came in", len(held))
	}
}

// A request an Anthropic client makes (an x-api-key or anthropic-version header) goes
// to the Anthropic upstream whatever its path: a POST /v1/chat/completions with an
// x-api-key naming a conversation too (it used to go to the OpenAI-compatible upstream,
// with the key).
func TestAnthropicKeyOnChatCompletionsGoesToTheAnthropicUpstream(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/chat/completions", chatBody, "X-Api-Key", "sk-ant-secret")
	readAll(t, resp)
	resp = p.post(t, "/v1/chat/completions", chatBody, "X-Api-Key", "sk-ant-secret", ConversationHeader, "c1")
	readAll(t, resp)
	reqs := up.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d upstream requests", len(reqs))
	}
	t.Logf("passthrough went to %s; compacted went to %s", reqs[0].path, reqs[1].path)
	if reqs[0].path != reqs[1].path {
		t.Fatalf("the same request with an x-api-key went to %s without a conversation and to %s with one (key %q)",
			reqs[0].path, reqs[1].path, reqs[1].header.Get("X-Api-Key"))
	}
}

// Turn X read the tip (resolve), then, over the window, waited for a compaction
// (compactNow, up to COMPACTOR_PROXY_WAIT). Meanwhile turn Y, another continuation of
// the same tip (a parallel request on the conversation), was stored, and the
// compaction X waited for covers Y's messages. X's model is never sent that summary,
// of messages X's client never had: X's own messages are sent, cut to fit. (The value
// is written by hand here, as the compaction would write it.)
func TestSummaryPastTheTipIsNeverSent(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		s, ctx := r2store(t, nc, st)
		opts := TurnOptions{Owner: "o", CacheTTL: time.Minute}
		t0, err := s.Prepare(ctx, "past1", []schemas.Message{r2user("u0")}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, t0, r2bot("r0"), nil); err != nil {
			t.Fatal(err)
		}
		hX := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("X-user")}
		pl, err := s.resolve(ctx, "past1", hX, Chain(hX), "o", false) // X's Prepare
		if err != nil {
			t.Fatal(err)
		}
		hY := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("Y-secret")}
		tY, err := s.Prepare(ctx, "past1", hY, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, tY, r2bot("Y-reply"), nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := st.Chat().LoadLeader(ctx, "past1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := msgs[len(msgs)-1].Seq
		v := &schemas.Result{SchemaVersion: 1, Conversation: "past1", Generation: 1, Summary: "SUMMARY: the user said Y-secret",
			TailStartSeq: last + 1, CoveredThroughSeq: last, FirstSeq: msgs[0].Seq, CreatedAt: time.Now()}
		_, rev, _ := st.Results().Get(ctx, "past1", true)
		if _, err := st.Results().Put(ctx, v, rev); err != nil {
			t.Fatal(err)
		}
		b, err := s.bounds(ctx, "past1", 0)
		if err != nil {
			t.Fatal(err)
		}
		tr := &Turn{}
		if err := s.forward(ctx, tr, pl, hX, b, opts); err != nil {
			t.Fatal(err)
		}
		var sent []string
		for _, m := range tr.Context.Messages {
			sent = append(sent, m.Content.String())
		}
		t.Logf("X is sent %q", sent)
		if strings.Contains(strings.Join(sent, "|"), "Y-secret") {
			t.Fatalf("X's model is sent a summary of Y's messages: %q", sent)
		}
	})
}

// The same as TestAStaleBaseStoresNothingPastATakenPlace, with no help: two Stores (two
// proxy processes, each with its own locks) finish two different continuations of one
// tip at the same time, over and over: the conversation never holds A's turn with the
// rest of B's after it.
func TestTwoProcessesNeverMixTwoContinuations(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		p1, ctx := r2store(t, nc, st)
		p2, _ := r2store(t, nc, st)
		raceTwoContinuations(t, ctx, st, p1, p2)
	})
}

// raceTwoContinuations has p1 and p2 finish two different continuations of one tip at
// once, 150 times, and fails when a conversation ends up holding both.
func raceTwoContinuations(t *testing.T, ctx context.Context, st *jetstream.Store, p1, p2 *Store) {
	t.Helper()
	opts := TurnOptions{Owner: "o", CacheTTL: time.Minute}
	mixed := 0
	for i := 0; i < 150; i++ {
		conv := "race" + strings.Repeat("x", 1) + time.Now().Format("150405") + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		t0, err := p1.Prepare(ctx, conv, []schemas.Message{r2user("u0")}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := p1.Finish(ctx, t0, r2bot("r0"), nil); err != nil {
			t.Fatal(err)
		}
		hA := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("A-user")}
		hB := []schemas.Message{r2user("u0"), r2bot("r0"), r2user("B-user"), r2bot("B-mid"), r2user("B-user2")}
		ta, err := p1.Prepare(ctx, conv, hA, opts)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := p2.Prepare(ctx, conv, hB, opts)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		go func() { done <- p1.Finish(ctx, ta, r2bot("A-reply"), nil) }()
		go func() { done <- p2.Finish(ctx, tb, r2bot("B-reply"), nil) }()
		for range 2 {
			if err := <-done; err != nil {
				t.Logf("finish: %v", err)
			}
		}
		if got := r2texts(t, ctx, st, conv); strings.Contains(got, "A-user") && strings.Contains(got, "B-user2") {
			mixed++
			t.Logf("run %d: %s holds %s", i, conv, got)
		}
	}
	if mixed > 0 {
		t.Fatalf("%d of 150 runs mixed two continuations in one conversation", mixed)
	}
}

// The race of TestTwoProcessesNeverMixTwoContinuations on a new conversation, with
// two credentials: both pass the owner check (the conversation is empty), and the first
// to store takes it whole; the other's turn is refused, and neither is ever sent the
// other's message.
func TestTwoCredentialsRacingOnANewConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		p1, ctx := r2store(t, nc, st)
		p2, _ := r2store(t, nc, st)
		optsA := TurnOptions{Owner: "owner-a", CacheTTL: time.Minute}
		optsB := TurnOptions{Owner: "owner-b", CacheTTL: time.Minute}
		for i := 0; i < 50; i++ {
			conv := "own" + time.Now().Format("150405") + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			hA := []schemas.Message{r2user("A-secret")}
			hB := []schemas.Message{r2user("B-one"), r2bot("B-two"), r2user("B-three")}
			ta, err := p1.Prepare(ctx, conv, hA, optsA)
			if err != nil {
				t.Fatal(err)
			}
			tb, err := p2.Prepare(ctx, conv, hB, optsB)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 2)
			go func() { done <- p1.Finish(ctx, ta, r2bot("A-reply"), nil) }()
			go func() { done <- p2.Finish(ctx, tb, r2bot("B-reply"), nil) }()
			for range 2 {
				<-done
			}
			next := append(append([]schemas.Message(nil), hB...), r2bot("B-reply"), r2user("B-next"))
			tn, err := p2.Prepare(ctx, conv, next, optsB)
			if err != nil {
				continue
			}
			var sent []string
			for _, m := range tn.Context.Messages {
				sent = append(sent, m.Content.String())
			}
			if s := strings.Join(sent, "|"); strings.Contains(s, "A-secret") {
				_, errA := p1.Prepare(ctx, conv, append(hA, r2bot("A-reply"), r2user("A-next")), optsA)
				t.Fatalf("run %d: CHAT %s holds %s; credential B's next turn is sent %q; credential A's next turn: %v",
					i, conv, r2texts(t, ctx, st, conv), s, errA)
			}
		}
	})
}

// The same race within one process, whose stripe lock serializes the storing: the
// control of TestTwoProcessesNeverMixTwoContinuations.
func TestOneProcessDoesNotMixTwoContinuations(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		p, ctx := r2store(t, nc, st)
		raceTwoContinuations(t, ctx, st, p, p)
	})
}
