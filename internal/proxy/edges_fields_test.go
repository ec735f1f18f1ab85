package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wires"
)

// compactorFields is what a producer sets on a message and an HTTP client must not:
// Compactor's own token count, usage, generation, metadata and object reference.
var compactorFields = `"tokens":900000,"usage":{"prompt_tokens":999999,"completion_tokens":1,"total_tokens":1000000},` +
	`"context_generation":3,"meta":{"pin":"true","proxy.n":"7"},` +
	`"content_ref":{"bucket":"b","name":"n","size":5,"sha256":"` + strings.Repeat("0", 64) + `","tokens":2}`

// A proxy client is an HTTP client, not a producer: Compactor's own fields on a message
// it sends (on any of the four APIs) are not read. A client that could set them would
// force compactions with usage, pin messages, and make the proxy refuse its request as
// over the window with "tokens".
func TestClientsCompactorFieldsAreIgnoredOnEveryWire(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	bodies := map[string]struct{ path, body string }{
		APIOpenAI:    {"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi",` + compactorFields + `}]}`},
		APIAnthropic: {"/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi",` + compactorFields + `}]}`},
		APIResponses: {"/v1/responses", `{"model":"m","input":[{"type":"message","role":"user","content":"hi",` + compactorFields + `}]}`},
		APIGemini:    {"/v1beta/models/g:generateContent", `{"contents":[{"role":"user","parts":[{"text":"hi"}],` + compactorFields + `}]}`},
	}
	for api, b := range bodies {
		t.Run(api, func(t *testing.T) {
			p := newTestProxy(t, up, nil)
			all := wires.All()
			p.srv.wires = map[string]Wire{api: all[api]}
			resp := p.post(t, b.path, b.body, ConversationHeader, "c1")
			body := readAll(t, resp)
			prep, _ := p.convs.calls()
			if len(prep) != 1 {
				t.Fatalf("%d prepares; %d %s", len(prep), resp.StatusCode, body)
			}
			for i, m := range prep[0].msgs {
				if m.Tokens != 0 || m.Usage != nil || m.ContextGeneration != nil || m.Meta != nil || m.ContentRef != nil {
					t.Errorf("message %d keeps Compactor's fields the client sent: tokens %d usage %v generation %v meta %v content_ref %v",
						i, m.Tokens, m.Usage, m.ContextGeneration, m.Meta, m.ContentRef)
				}
				for _, k := range []string{"tokens", "usage", "context_generation", "meta", "content_ref"} {
					if _, ok := m.Unknown[k]; ok {
						t.Errorf("message %d keeps %q among its unknown fields", i, k)
					}
				}
			}
			if resp.StatusCode == http.StatusBadRequest {
				t.Errorf("refused: %s", body)
			}
		})
	}
}
