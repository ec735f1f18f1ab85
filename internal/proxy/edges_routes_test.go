package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// A Chat Completions (or Responses) request is the OpenAI API's whatever other headers
// it carries: one with an anthropic-version header goes to the OpenAI-compatible
// upstream with its Authorization, never to the Anthropic upstream (it used to, with
// the client's OpenAI key). anthropic-version still routes a path of no API of its own
// (the Anthropic SDK's GET /v1/models).
func TestAnthropicVersionOnChatCompletionsGoesByThePath(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, c := range []struct{ path, conv string }{
		{"/v1/chat/completions", "c1"}, {"/v1/chat/completions", ""}, {"/v1/responses", "c2"},
	} {
		hs := []string{"Authorization", "Bearer sk-openai-secret", "Anthropic-Version", "2023-06-01"}
		if c.conv != "" {
			hs = append(hs, ConversationHeader, c.conv)
		}
		readAll(t, p.post(t, c.path, chatBody, hs...))
		got := up.requests()
		last := got[len(got)-1]
		if last.path != "/base"+c.path || last.header.Get("Authorization") != "Bearer sk-openai-secret" {
			t.Fatalf("%s (conversation %q) with anthropic-version went to %s", c.path, c.conv, last.path)
		}
	}
	for _, r := range up.requests() {
		if strings.HasPrefix(r.path, "/anthropic/") {
			t.Fatalf("the Anthropic upstream got %s with %q", r.path, r.header.Get("Authorization"))
		}
	}
	req, _ := http.NewRequest(http.MethodGet, p.http.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-ant-oat-token")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	got := up.requests()
	if last := got[len(got)-1]; last.path != "/anthropic/v1/models" {
		t.Fatalf("an Anthropic client's GET /v1/models went to %s", last.path)
	}
}
