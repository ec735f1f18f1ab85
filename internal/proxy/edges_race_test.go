package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
)

// raceProxy is one proxy process: its own Store (its own locks and memory) on the
// shared NATS, in front of an upstream that always answers reply.
type raceProxy struct {
	store *Store
	url   string
}

func newRaceProxy(t *testing.T, nc *nats.Conn, st *jetstream.Store, reply string) *raceProxy {
	t.Helper()
	set := policy.Defaults()
	set.ContextWindow = 128000
	settings := func(context.Context, string) (policy.Settings, error) { return set, nil }
	store := NewConversations(nc, st, settings, zerolog.Nop())
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}`, reply)
	}))
	t.Cleanup(up.Close)
	cfg := DefaultConfig()
	cfg.Listen, cfg.Upstream, cfg.AnthropicUpstream, cfg.GeminiUpstream = "", up.URL, up.URL, up.URL
	srv, err := New(cfg, wires.All(), store, Options{NATS: nc, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &raceProxy{store: store, url: hs.URL}
}

// chat posts a Chat Completions request of texts (user, assistant, user...) to conv.
func (p *raceProxy) chat(t *testing.T, conv string, texts ...string) (*http.Response, string) {
	var msgs []string
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, s))
	}
	req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ConversationHeader, conv)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return nil, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func storedTexts(t *testing.T, st *jetstream.Store, conv string) []string {
	t.Helper()
	msgs, err := st.Chat().LoadLeader(context.Background(), conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		e := m.Entry()
		out = append(out, e.Message.Content.String())
	}
	return out
}

// Two proxy processes finish the same turn of one conversation: A stored the client's
// message and is about to store its reply when B, which read the conversation after
// A's first message, stores its own reply. Only one reply may follow the turn: the
// other client's next turn would otherwise send the model a reply it never saw. The
// loser's client still gets its reply, and that reply goes to a branch, where its
// client's next turn finds it.
func TestTwoProxiesFinishingOneTurnStoreOneReply(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newRaceProxy(t, nc, st, "reply A")
		b := newRaceProxy(t, nc, st, "reply B")
		atReply, release := make(chan struct{}), make(chan struct{})
		a.store.beforePublish = func(conv string, pos int) {
			if conv == "race" && pos == 2 {
				close(atReply)
				<-release
			}
		}
		type answer struct {
			status int
			body   string
		}
		aDone := make(chan answer, 1)
		go func() {
			resp, body := a.chat(t, "race", "hello")
			if resp == nil {
				aDone <- answer{}
				return
			}
			aDone <- answer{resp.StatusCode, body}
		}()
		select {
		case <-atReply:
		case <-time.After(30 * time.Second):
			t.Fatal("A never came to store its reply")
		}
		if resp, body := b.chat(t, "race", "hello"); resp == nil || resp.StatusCode != 200 || !strings.Contains(body, "reply B") {
			t.Fatalf("B: %v %s", resp, body)
		}
		a.store.beforePublish = nil
		close(release)
		var got answer
		select {
		case got = <-aDone:
		case <-time.After(30 * time.Second):
			t.Fatal("A did not answer")
		}
		if got.status != 200 || !strings.Contains(got.body, "reply A") {
			t.Fatalf("A's client did not get its reply: %d %s", got.status, got.body)
		}
		if s := storedTexts(t, st, "race"); strings.Join(s, "|") != "hello|reply B" {
			t.Fatalf("the conversation holds %q, want hello and the one reply stored first", s)
		}
		// A's client goes on from its reply: a branch holds it, not the conversation.
		resp, _ := a.chat(t, "race", "hello", "reply A", "next from A")
		if br := resp.Header.Get(ConversationHeader); !strings.HasPrefix(br, "race"+BranchSep) {
			t.Fatalf("A's next turn went to %q, not a branch", br)
		} else if s := strings.Join(storedTexts(t, st, br), "|"); !strings.Contains(s, "reply A") {
			t.Fatalf("branch %s holds %q", br, s)
		}
		resp, _ = b.chat(t, "race", "hello", "reply B", "next from B")
		if c := resp.Header.Get(ConversationHeader); c != "race" {
			t.Fatalf("B's next turn went to %q", c)
		}
		if s := storedTexts(t, st, "race"); strings.Join(s, "|") != "hello|reply B|next from B|reply B" {
			t.Fatalf("the conversation holds %q", s)
		}
	})
}
