package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
)

// Each API's conversation path is rewritten by its wire and sent to its upstream;
// a base URL of http://proxy/c/<conversation> names the conversation for every API,
// and the prefix is never forwarded.
func TestEveryAPIIsRoutedToItsWireAndUpstream(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, c := range []struct {
		path, upstreamPath, query string
		headers                   []string
	}{
		{"/v1/chat/completions", "/base/v1/chat/completions", "", nil},
		{"/v1/messages?beta=true", "/anthropic/v1/messages", "beta=true", nil},
		{"/v1/responses", "/base/v1/responses", "", nil},
		{"/v1beta/models/gemini-2.5-pro:generateContent", "/gemini/v1beta/models/gemini-2.5-pro:generateContent", "", nil},
		{"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent", "alt=sse", nil},
		{"/v1/models/gemini-2.5-flash:generateContent", "/gemini/v1/models/gemini-2.5-flash:generateContent", "", nil},
	} {
		for _, named := range []string{"header", "path"} {
			path, headers := c.path, []string{ConversationHeader, "c1"}
			if named == "path" {
				path, headers = "/c/c2"+c.path, nil
			}
			before := len(up.requests())
			resp := p.post(t, path, chatBody, headers...)
			readAll(t, resp)
			want := map[string]string{"header": "c1", "path": "c2"}[named]
			if resp.StatusCode != 200 || resp.Header.Get(StatusHeader) != StatusCompacted || resp.Header.Get(ConversationHeader) != want {
				t.Fatalf("%s (%s): status %d %q, conversation %q", path, named, resp.StatusCode, resp.Header.Get(StatusHeader), resp.Header.Get(ConversationHeader))
			}
			got := up.requests()
			if len(got) != before+1 {
				t.Fatalf("%s: %d upstream requests", path, len(got)-before)
			}
			if last := got[len(got)-1]; last.path != c.upstreamPath || last.query != c.query || last.header.Get(ConversationHeader) != "" {
				t.Fatalf("%s went to %s?%s (conversation header %q)", path, last.path, last.query, last.header.Get(ConversationHeader))
			}
		}
	}
	prep, _ := p.convs.calls()
	if len(prep) != 12 {
		t.Fatalf("Prepare called %d times, want 12", len(prep))
	}
	for i, pr := range prep {
		if want := []string{"c1", "c2"}[i%2]; pr.conv != want {
			t.Fatalf("request %d prepared in %q, want %q", i, pr.conv, want)
		}
	}
}

// What passes through under /c/<conversation> loses the prefix too, and goes to the
// upstream of its API: a Gemini key never goes to the OpenAI-compatible one.
func TestPassthroughUnderTheConversationPath(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, c := range []struct {
		method, path, upstreamPath string
		headers                    []string
	}{
		{http.MethodGet, "/c/c1/v1/models", "/base/v1/models", nil},
		{http.MethodGet, "/c/c1/v1beta/models", "/gemini/v1beta/models", nil},
		{http.MethodPost, "/c/c1/v1beta/models/g:countTokens", "/gemini/v1beta/models/g:countTokens", nil},
		{http.MethodPost, "/c/c1/v1/messages/count_tokens?beta=true", "/anthropic/v1/messages/count_tokens", nil},
		{http.MethodGet, "/v1/files", "/gemini/v1/files", []string{"X-Goog-Api-Key", "g-key"}},
		{http.MethodPost, "/c/c1/v1/responses/compact", "/base/v1/responses/compact", nil},
	} {
		req, _ := http.NewRequest(c.method, p.http.URL+c.path, strings.NewReader(`{}`))
		for i := 0; i+1 < len(c.headers); i += 2 {
			req.Header.Set(c.headers[i], c.headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		resp.Body.Close()
		got := up.requests()
		if last := got[len(got)-1]; last.path != c.upstreamPath || resp.Header.Get(StatusHeader) != StatusPassthrough {
			t.Fatalf("%s %s went to %s (%q)", c.method, c.path, last.path, resp.Header.Get(StatusHeader))
		}
	}
	if prep, _ := p.convs.calls(); len(prep) != 0 {
		t.Fatalf("a passed-through request reached Prepare: %d calls", len(prep))
	}
}

// A conversation path that names no valid id, or another conversation than the
// request's header, is refused in the API's error shape; nothing goes upstream.
func TestBadConversationPathIsRefused(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, nil)
	for _, c := range []struct {
		path, want string
		headers    []string
	}{
		{"/c/a%20b/v1/chat/completions", "is not allowed", nil},
		{"/c//v1/chat/completions", "conversation", nil},
		{"/c/" + strings.Repeat("x", 200) + "/v1/messages", `"type":"error"`, nil},
		{"/c/c1/v1/chat/completions", `names conversation \"c1\" and the header`, []string{ConversationHeader, "c2"}},
	} {
		resp := p.post(t, c.path, chatBody, c.headers...)
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, body)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("%d requests went upstream", n)
	}
}

// The operator's Gemini key replaces the client's, in the header and in ?key=, and no
// other upstream ever gets it.
func TestGeminiOperatorKeyReplacesTheClients(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, _ *Options) { c.GeminiUpstreamKey = "operator-g" })
	resp := p.post(t, "/v1beta/models/g:generateContent?key=client-g&alt=json", chatBody, ConversationHeader, "c1", "X-Goog-Api-Key", "client-g")
	readAll(t, resp)
	req, _ := http.NewRequest(http.MethodGet, p.http.URL+"/v1beta/models?key=client-g", nil)
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp2)
	resp2.Body.Close()
	for _, r := range up.requests() {
		if strings.Contains(r.query, "client-g") || r.header.Get("X-Goog-Api-Key") != "operator-g" {
			t.Fatalf("%s?%s went with key %q", r.path, r.query, r.header.Get("X-Goog-Api-Key"))
		}
	}
}

// passWire refuses every body with a wire.Passthrough.
type passWire struct{ testWire }

func (passWire) Parse([]byte) (*Request, error) {
	return nil, &wire.Passthrough{Reason: "previous-response-id"}
}

// A request its wire says the proxy cannot rewrite (state kept by the provider) is
// forwarded as sent, marked with the wire's reason, and nothing is prepared.
func TestWirePassthroughForwardsAsSent(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(_ *Config, _ *Options) {})
	p.srv.wires[APIResponses] = passWire{testWire{APIResponses}}
	resp := p.post(t, "/v1/responses", chatBody, ConversationHeader, "c1")
	readAll(t, resp)
	got := up.requests()
	if resp.StatusCode != 200 || resp.Header.Get(PassthroughHeader) != "previous-response-id" || len(got) != 1 || string(got[0].body) != chatBody {
		t.Fatalf("%d %v; upstream got %d requests", resp.StatusCode, resp.Header, len(got))
	}
	if prep, _ := p.convs.calls(); len(prep) != 0 {
		t.Fatalf("Prepare called %d times", len(prep))
	}
}

// Gemini CLI's side tasks (its router, next-speaker and loop checks) ask for
// structured output; they are sent compacted but not stored. The main requests are.
func TestGeminiStructuredOutputIsASideRequest(t *testing.T) {
	for body, want := range map[string]bool{
		`{"contents":[],"generationConfig":{"responseJsonSchema":{"type":"OBJECT"},"responseMimeType":"application/json"}}`: true,
		`{"contents":[],"generationConfig":{"responseSchema":{"type":"OBJECT"}}}`:                                           true,
		`{"contents":[],"generation_config":{"response_mime_type":"application/json"}}`:                                     true,
		`{"contents":[],"generationConfig":{"temperature":0.2,"thinkingConfig":{"thinkingBudget":-1}}}`:                     false,
		`{"contents":[]}`: false,
	} {
		if got := sideRequest(APIGemini, []byte(body), nil); got != want {
			t.Errorf("%s: side %v, want %v", body, got, want)
		}
		if sideRequest(APIOpenAI, []byte(body), nil) {
			t.Errorf("%s: a side request on the OpenAI API", body)
		}
	}
}
