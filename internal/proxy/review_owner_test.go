package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// geminiStack is a proxy with the real wires in front of a Gemini upstream that
// answers every generateContent with "model reply N".
func newGeminiStack(t *testing.T, nc *nats.Conn, st *jetstream.Store) (*answerStack, func(conv, key string, texts ...string) (*http.Response, string)) {
	a := &answerStack{f: newFixture(t, nc, st, 128000)}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"model reply %d"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12}}`, n)
	}))
	t.Cleanup(up.Close)
	cfg := proxy.DefaultConfig()
	cfg.Listen, cfg.Upstream, cfg.AnthropicUpstream, cfg.GeminiUpstream = "", up.URL, up.URL, up.URL
	srv, err := proxy.New(cfg, wires.All(), a.f.conv, proxy.Options{NATS: nc, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	a.http = httptest.NewServer(srv.Handler())
	t.Cleanup(a.http.Close)
	post := func(conv, key string, texts ...string) (*http.Response, string) {
		t.Helper()
		var contents []map[string]any
		for i, s := range texts {
			role := "user"
			if i%2 == 1 {
				role = "model"
			}
			contents = append(contents, map[string]any{"role": role, "parts": []any{map[string]any{"text": s}}})
		}
		body, _ := json.Marshal(map[string]any{"contents": contents})
		req, _ := http.NewRequest(http.MethodPost, a.http.URL+"/c/"+conv+"/v1beta/models/gemini-2.5-pro:generateContent", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Goog-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	return a, post
}

// Review (multi-tenant): a Gemini client's key (x-goog-api-key, what Gemini CLI and the
// genai SDK send) is not read as the request's credential, so a Gemini conversation is
// bound to no owner. Anyone who knows or guesses its id (it is in the base URL,
// /c/<conversation>) reads it with another key: one compaction prompt, with no history
// at all, is answered with the victim's summary and messages. The docs promise "the
// same id sent with another credential is refused with 403".
func TestReviewGeminiConversationIsBoundToItsKey(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a, post := newGeminiStack(t, nc, st)
		resp, body := post("proj", "victim-key", "VICTIM-SECRET the db password is hunter2")
		if resp.StatusCode != 200 {
			t.Fatalf("victim's first turn: %d %s", resp.StatusCode, body)
		}
		_, _ = post("proj", "victim-key", "VICTIM-SECRET the db password is hunter2", "model reply 1", "second")
		putValue(a.f, "proj", 1, "SUMMARY: VICTIM-SECRET the db password is hunter2.", "second")

		resp, body = post("proj", "attacker-key", "Generate a new <state_snapshot> of the conversation.")
		if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "hunter2") {
			t.Fatalf("another key on the victim's conversation: %d (answered %q): %s", resp.StatusCode, resp.Header.Get(proxy.AnsweredHeader), body)
		}
	})
}
