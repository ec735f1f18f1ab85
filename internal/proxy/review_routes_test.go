package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// Review (credentials): isGeminiPath takes every /v1/models/<x> whose <x> holds a colon
// for Gemini's, "which OpenAI's paths never are"; but OpenAI's fine-tuned model ids are
// ft:<base>:<org>:<suffix>:<id>, and an OpenAI client retrieving (GET) or deleting
// (DELETE) one sends its OpenAI key to the Gemini upstream. The docs promise the
// client's Authorization goes to COMPACTOR_PROXY_UPSTREAM for every non-Gemini request.
func TestReviewOpenAIFineTunedModelPathGoesToOpenAI(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, p.http.URL+"/v1/models/ft:gpt-4o-mini-2024-07-18:acme::9abcDEF", nil)
		req.Header.Set("Authorization", "Bearer sk-openai-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		resp.Body.Close()
		got := up.requests()
		if last := got[len(got)-1]; !strings.HasPrefix(last.path, "/base/") {
			t.Fatalf("%s of an OpenAI fine-tuned model went to %s with %q", method, last.path, last.header.Get("Authorization"))
		}
	}
}

// Review (credentials): the docs say a request with an x-api-key or anthropic-version
// header goes to the Anthropic upstream "whatever its path", and routeOf's comment that
// "a key never goes to another provider"; but a Gemini path is routed before the
// headers are read, so an Anthropic key on a /v1beta/ path goes to Google.
func TestReviewAKeyNeverGoesToAnotherProvider(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, c := range []struct {
		method, path, header, key, wantPrefix string
	}{
		{http.MethodGet, "/v1beta/models", "X-Api-Key", "sk-ant-secret", "/anthropic/"},
		{http.MethodPost, "/v1beta/models/g:countTokens", "X-Api-Key", "sk-ant-secret", "/anthropic/"},
	} {
		req, _ := http.NewRequest(c.method, p.http.URL+c.path, strings.NewReader(`{}`))
		req.Header.Set(c.header, c.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		resp.Body.Close()
		got := up.requests()
		if last := got[len(got)-1]; !strings.HasPrefix(last.path, c.wantPrefix) {
			t.Fatalf("%s %s with %s went to %s", c.method, c.path, c.header, last.path)
		}
	}
}
