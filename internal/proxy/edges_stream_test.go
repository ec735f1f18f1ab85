package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy/wires"
)

// A Chat Completions stream whose upstream closes cleanly after choice 0's
// finish_reason is whole even without data: [DONE] (some OpenAI-compatible servers
// send none): it is stored, and the client gets no error. One cut before its
// finish_reason is not stored, and the client gets the API's error event.
func TestChatStreamWithoutDoneIsWholeAfterItsFinishReason(t *testing.T) {
	chunk := func(delta, finish string) string {
		f := "null"
		if finish != "" {
			f = fmt.Sprintf("%q", finish)
		}
		return `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}` + "\n\n"
	}
	for _, c := range []struct {
		name, stream string
		stored       bool
	}{
		{"finished, no [DONE]", chunk(`{"role":"assistant","content":"Hel"}`, "") + chunk(`{"content":"lo"}`, "") + chunk(`{}`, "stop"), true},
		{"cut mid-way", chunk(`{"role":"assistant","content":"Hel"}`, "") + chunk(`{"content":"lo"}`, ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, c.stream)
			})
			reports := make(reportsOf, 4)
			p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Observer = reports })
			p.srv.wires = map[string]Wire{APIOpenAI: wires.All()[APIOpenAI]}
			resp := p.post(t, "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
			body := readAll(t, resp)
			_, fin := p.convs.calls()
			hasError := strings.Contains(body, `"error"`)
			if c.stored {
				if len(fin) != 1 || fin[0].reply.Content.String() != "Hello" || hasError || body != c.stream {
					t.Fatalf("stored %+v; the client got %q", fin, body)
				}
				if r := reports.next(t); r.Outcome != OutcomeCompacted {
					t.Fatalf("report %+v", r)
				}
				return
			}
			if len(fin) != 0 || !hasError || !strings.HasPrefix(body, c.stream) {
				t.Fatalf("stored %+v; the client got %q", fin, body)
			}
			if r := reports.next(t); r.Outcome != OutcomeFailed {
				t.Fatalf("report %+v", r)
			}
		})
	}
}
