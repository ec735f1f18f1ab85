package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestIdentify(t *testing.T) {
	long := strings.Repeat("a", 129)
	sum := sha256.Sum256([]byte("sess/1"))
	mapped := "s-" + hex.EncodeToString(sum[:16])
	for _, c := range []struct {
		name    string
		headers []string
		body    string
		field   string
		want    string
		wantErr string
	}{
		{name: "conversation header", headers: []string{ConversationHeader, "conv-1", "session-id", "s9"}, want: "conv-1"},
		{name: "conversation header breaking the rule", headers: []string{ConversationHeader, "a b"}, wantErr: "is not allowed; use only [A-Za-z0-9_-]"},
		{name: "conversation header too long", headers: []string{ConversationHeader, long}, wantErr: "at most 128"},
		{name: "session headers in order", headers: []string{"session-id", "codex-1", "X-Claude-Code-Session-Id", "claude-1"}, want: "claude-1"},
		{name: "second session header", headers: []string{"x-opencode-session", "oc_1"}, want: "oc_1"},
		{name: "session value mapped", headers: []string{"session-id", "sess/1"}, want: mapped},
		{name: "body field", body: `{"metadata":{"user_id":"u-1"}}`, field: "metadata.user_id", want: "u-1"},
		{name: "body field mapped", body: `{"metadata":{"user_id":"sess/1"}}`, field: "metadata.user_id", want: mapped},
		{name: "body field not a string", body: `{"metadata":{"user_id":5}}`, field: "metadata.user_id"},
		{name: "body field missing", body: `{"metadata":{}}`, field: "metadata.user_id"},
		{name: "body not an object", body: `[1]`, field: "metadata.user_id"},
		{name: "header wins over body", headers: []string{"session-id", "h1"}, body: `{"m":"b1"}`, field: "m", want: "h1"},
		{name: "none", body: `{"messages":[]}`},
		{name: "codex thread header", headers: []string{"thread-id", "th-1"}, want: "th-1"},
		{name: "opencode x-session-id", headers: []string{"x-session-id", "ses_1", "x-session-affinity", "ses_1"}, want: "ses_1"},
		{name: "claude code user_id as JSON", body: `{"metadata":{"user_id":"{\"device_id\":\"d1\",\"session_id\":\"4f1c-9a\"}"}}`, want: "4f1c-9a"},
		{name: "claude code user_id, older form", body: `{"metadata":{"user_id":"user_ab12_account__session_77e0-1"}}`, want: "77e0-1"},
		{name: "a user_id naming a user is no session", body: `{"metadata":{"user_id":"alice"}}`},
		{name: "session header wins over user_id", headers: []string{"X-Claude-Code-Session-Id", "h1"}, body: `{"metadata":{"user_id":"{\"session_id\":\"b1\"}"}}`, want: "h1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for i := 0; i < len(c.headers); i += 2 {
				h.Set(c.headers[i], c.headers[i+1])
			}
			id, err := identify(h, []byte(c.body), DefaultSessionHeaders, c.field)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || id.conv != c.want {
				t.Fatalf("got %q %v, want %q", id.conv, err, c.want)
			}
		})
	}
}

func TestSessionValueMapsToAValidIDDeterministically(t *testing.T) {
	for _, v := range []string{"sess/1", "ünïcode", strings.Repeat("x", 300), "a b"} {
		id := sessionConversation(v)
		if !regexp.MustCompile(`^s-[0-9a-f]{32}$`).MatchString(id) || sessionConversation(v) != id {
			t.Fatalf("%q -> %q", v, id)
		}
	}
	if sessionConversation("a b") == sessionConversation("a c") {
		t.Fatal("two values, one id")
	}
}

func TestConversationIDOverTheWire(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)

	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "bad id")
	body := readAll(t, resp)
	if resp.StatusCode != 400 || !strings.Contains(body, "[A-Za-z0-9_-]") {
		t.Fatalf("invalid id: %d %s", resp.StatusCode, body)
	}

	// No id: forwarded untouched, marked.
	resp = p.post(t, "/v1/chat/completions", chatBody)
	if resp.StatusCode != 200 || resp.Header.Get(StatusHeader) != StatusPassthrough || resp.Header.Get(PassthroughHeader) != PassNoConversation {
		t.Fatalf("no id: %d %v", resp.StatusCode, resp.Header)
	}
	if got := up.requests(); len(got) != 1 || string(got[0].body) != chatBody || got[0].path != "/base/v1/chat/completions" {
		t.Fatalf("upstream got %+v", got)
	}
	if prep, _ := p.convs.calls(); len(prep) != 0 {
		t.Fatal("a request with no id reached Prepare")
	}

	// A session header names it.
	resp = p.post(t, "/v1/messages", chatBody, "X-Claude-Code-Session-Id", "0f3c-11")
	if resp.StatusCode != 200 || resp.Header.Get(ConversationHeader) != "0f3c-11" {
		t.Fatalf("session header: %d %v", resp.StatusCode, resp.Header)
	}

	// Required: 400 with a clear message.
	p = newTestProxy(t, up, func(c *Config, _ *Options) { c.RequireID = true })
	resp = p.post(t, "/v1/messages", chatBody)
	var an struct{ Error struct{ Message string } }
	if err := json.NewDecoder(resp.Body).Decode(&an); err != nil || resp.StatusCode != 400 ||
		!strings.Contains(an.Error.Message, ConversationHeader) {
		t.Fatalf("required: %d %+v %v", resp.StatusCode, an, err)
	}
}

func TestOwnerDigest(t *testing.T) {
	m := hmac.New(sha256.New, []byte("owner-key"))
	m.Write([]byte("Bearer sk-1"))
	if got, want := ownerDigest([]byte("owner-key"), "Bearer sk-1"), hex.EncodeToString(m.Sum(nil))[:32]; got != want {
		t.Fatalf("hmac: %s, want %s", got, want)
	}
	s := sha256.Sum256([]byte(ownerDomain + "Bearer sk-1"))
	if got, want := ownerDigest(nil, "Bearer sk-1"), hex.EncodeToString(s[:])[:32]; got != want {
		t.Fatalf("sha: %s, want %s", got, want)
	}
	if ownerDigest(nil, "") != "" || ownerDigest(nil, "a") == ownerDigest(nil, "b") {
		t.Fatal("digest of no credential, or two credentials with one digest")
	}
}
