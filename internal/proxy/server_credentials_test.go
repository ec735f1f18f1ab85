package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestClientCredentialsGoToTheUpstreamOnly(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/messages", chatBody, ConversationHeader, "c1", "x-api-key", "sk-ant-planted",
		"anthropic-version", "2023-06-01", "anthropic-beta", "tools-1", "Connection", "X-Hop", "X-Hop", "1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	resp = p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c2", "Authorization", "Bearer sk-planted",
		"OpenAI-Organization", "org-1", "OpenAI-Project", "proj-1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	got := up.requests()
	an, oa := got[0].header, got[1].header
	if an.Get("X-Api-Key") != "sk-ant-planted" || an.Get("Anthropic-Version") != "2023-06-01" || an.Get("Anthropic-Beta") != "tools-1" ||
		an.Get("X-Hop") != "" || an.Get(ConversationHeader) != "" {
		t.Fatalf("anthropic upstream headers %v", an)
	}
	if oa.Get("Authorization") != "Bearer sk-planted" || oa.Get("OpenAI-Organization") != "org-1" || oa.Get("OpenAI-Project") != "proj-1" {
		t.Fatalf("openai upstream headers %v", oa)
	}
	prep, _ := p.convs.calls()
	if prep[0].opts.Owner != ownerDigest(nil, "sk-ant-planted") || prep[1].opts.Owner != ownerDigest(nil, "Bearer sk-planted") {
		t.Fatalf("owners %q %q", prep[0].opts.Owner, prep[1].opts.Owner)
	}
}

func TestOperatorKeyReplacesTheClients(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, _ *Options) {
		c.UpstreamKey, c.AnthropicUpstreamKey, c.OwnerKey = "sk-operator", "sk-ant-operator", "owner-key"
	})
	p.post(t, "/v1/messages", chatBody, ConversationHeader, "c1", "x-api-key", "sk-client", "Authorization", "Bearer sk-client2")
	p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1", "Authorization", "Bearer sk-client")
	// Passed-through paths too.
	req, _ := http.NewRequest(http.MethodGet, p.http.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-client")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := up.requests()
	if h := got[0].header; h.Get("X-Api-Key") != "sk-ant-operator" || h.Get("Authorization") != "" {
		t.Fatalf("anthropic %v", h)
	}
	for _, r := range got[1:] {
		if h := r.header; h.Get("Authorization") != "Bearer sk-operator" || h.Get("X-Api-Key") != "" {
			t.Fatalf("%s: %v", r.path, h)
		}
	}
	// The owner is still the client's credential's digest, keyed.
	prep, _ := p.convs.calls()
	if prep[0].opts.Owner != ownerDigest([]byte("owner-key"), "sk-client") {
		t.Fatalf("owner %q", prep[0].opts.Owner)
	}
}

func TestCredentialIsNeverLoggedOrStored(t *testing.T) {
	const planted = "sk-planted-4c1d9e"
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(500)
			return
		}
		replyJSON("ok")(w, r)
	})
	p := newTestProxy(t, up, func(c *Config, _ *Options) { c.Upstream = up.URL + "/" })
	for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/fail"} {
		p.post(t, path, chatBody, ConversationHeader, "c1", "Authorization", "Bearer "+planted, "x-api-key", planted)
	}
	p.post(t, "/v1/chat/completions", `not json`, ConversationHeader, "c1", "Authorization", "Bearer "+planted)
	// An upstream that cannot be reached.
	dead := newTestProxy(t, up, func(c *Config, _ *Options) { c.Upstream = "http://127.0.0.1:1" })
	dead.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1", "Authorization", "Bearer "+planted)
	dead.post(t, "/v1/models", ``, "Authorization", "Bearer "+planted)

	for _, logs := range []string{p.logs.String(), dead.logs.String()} {
		if logs == "" {
			t.Fatal("no log lines to search: the test would show nothing")
		}
		if strings.Contains(logs, planted) {
			t.Fatalf("the credential is in the log:\n%s", logs)
		}
	}
	for _, c := range []*memConvs{p.convs, dead.convs} {
		prep, fin := c.calls()
		b, _ := json.Marshal([]any{prep[0].msgs, prep[0].opts, fin})
		for _, pr := range prep {
			b = append(b, pr.opts.Owner...)
			m, _ := json.Marshal(pr.msgs)
			b = append(b, m...)
		}
		if strings.Contains(string(b), planted) || len(prep) == 0 {
			t.Fatalf("the credential reached the store: %s", b)
		}
	}
}
