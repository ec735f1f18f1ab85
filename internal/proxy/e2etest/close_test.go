package e2etest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/fakeupstream"
)

// post sends body to the proxy's chat completions as conv.
func (s *stack) post(t *testing.T, conv, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.proxy+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+openAIKey)
	req.Header.Set("X-Compactor-Conversation", conv)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A client that closes its connection the moment it has read the stream's end (as
// SDKs do once they have the whole reply) gets the same as one that lingers: the reply
// stored once (before any next turn: the last turn of a conversation has none), and
// its next turn, which sends the reply back, answered. Run several
// times over, since the close races the proxy's storing of the reply.
func TestStreamedReplyStoredWhenClientClosesAtTheEnd(t *testing.T) {
	s := startStack(t)
	for i := range 5 {
		conv := fmt.Sprintf("e2e-close-at-end-%d", i)
		reply := fmt.Sprintf("the whole reply %d", i)
		s.up.Script(fakeupstream.Reply{Text: reply}, fakeupstream.Reply{Text: "next"})
		resp := s.post(t, conv, `{"model":"gpt-e2e","stream":true,"messages":[{"role":"user","content":"hello"}]}`)
		sc := bufio.NewScanner(resp.Body)
		done := false
		for !done && sc.Scan() {
			done = sc.Text() == "data: [DONE]"
		}
		resp.Body.Close() // at once: the connection goes with it
		if !done {
			t.Fatalf("%s: the stream ended without [DONE]: %v", conv, sc.Err())
		}
		if got := flatStored(s.waitStored(t, conv, 2)); got[1].Text != reply {
			t.Fatalf("%s: CHAT holds\n%s", conv, flatLines(got))
		}
		resp = s.post(t, conv, fmt.Sprintf(`{"model":"gpt-e2e","messages":[{"role":"user","content":"hello"},`+
			`{"role":"assistant","content":%q},{"role":"user","content":"and then?"}]}`, reply))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: the next turn got %d: %s", conv, resp.StatusCode, b)
		}
		got := flatStored(s.waitStored(t, conv, 4))
		want := []flat{{Role: "user", Text: "hello"}, {Role: "assistant", Text: reply}, {Role: "user", Text: "and then?"}, {Role: "assistant", Text: "next"}}
		if !sameFlat(got, want) {
			t.Fatalf("%s: CHAT holds\n%swant\n%s", conv, flatLines(got), flatLines(want))
		}
	}
}
