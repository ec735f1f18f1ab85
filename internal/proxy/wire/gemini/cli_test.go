package gemini_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/gemini"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
)

// The request bodies in testdata/cli are Gemini CLI 0.61.0's (@google/genai 1.30.0),
// captured through the proxy by internal/proxy/agenttest (a session of prompts p1...
// with tool calls, /compress, and one with tool output masking), re-encoded compactly.

func load(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cli", name+".body.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t *testing.T, body []byte) *wire.Request {
	t.Helper()
	req, err := gemini.Gemini().Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Every captured request builds back from the messages it parses to: the same JSON
// value, its other fields byte for byte, and parsed again the same messages, the
// side requests (structured output) too.
func TestCapturedRequestsRoundTrip(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "cli", "*.body.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".body.json")
		t.Run(name, func(t *testing.T) {
			body := load(t, name)
			req := parse(t, body)
			out := wiretest.CheckBuild(t, gemini.Gemini(), req, "contents")
			if out == nil {
				t.Fatal("Build refused the request's own messages")
			}
			if !bytes.Equal(out, body) && !wiretest.JSONEqual(t, out, body) {
				t.Fatalf("built\n%.3000s\nsent\n%.3000s", out, body)
			}
			again := parse(t, out)
			for i := range req.Messages {
				a, _ := req.Messages[i].Encode()
				b, _ := again.Messages[i].Encode()
				if !bytes.Equal(a, b) {
					t.Fatalf("message %d: %s, then %s", i, a, b)
				}
			}
		})
	}
}

// canonicals is each message's canonical form, as the proxy's digest chain reads it.
func canonicals(msgs []schemas.Message) []string {
	out := make([]string, len(msgs))
	for i := range msgs {
		out[i] = string(proxy.Canonical(&msgs[i]))
	}
	return out
}

// A later request of the session extends an earlier one: the proxy's digest chain of
// the earlier one's messages is a prefix of the later one's. Gemini CLI 0.61 answers
// each call twice (the same id in both responses): the second is kept with the first
// tool message, out of the chain. (The masking session does not extend: by p8 Gemini
// CLI's context management has dropped p1's prompt from the first Content, a history
// the proxy stores as a branch.)
func TestCapturedSessionExtends(t *testing.T) {
	for _, pair := range [][2]string{
		{"gemini-02-p1-gemini-stream-tool-call-answer", "gemini-03-p1-gemini-stream-text-answer"},
		{"gemini-03-p1-gemini-stream-text-answer", "gemini-09-p3-gemini-stream-tool-call-answer"},
		{"gemini-09-p3-gemini-stream-tool-call-answer", "gemini-14-compress-command-gemini-stream-tool-call-answer"},
	} {
		a, b := parse(t, load(t, pair[0])).Messages, parse(t, load(t, pair[1])).Messages
		ca, cb := proxy.Chain(a), proxy.Chain(b)
		if len(ca) > len(cb) || ca[len(ca)-1] != cb[len(ca)-1] {
			x, y := canonicals(a), canonicals(b)
			for i := range x {
				if i >= len(y) || x[i] != y[i] {
					t.Fatalf("%s does not extend %s: message %d\n%q\n%q", pair[1], pair[0], i, x[i], y[min(i, len(y)-1)])
				}
			}
		}
	}
}

// The /compress request sends the history with the ids Gemini CLI keeps internally
// ("run_shell_command__run_shell_command_..."), not the ones it sends the model: the
// conversation's messages are the same.
func TestCapturedCompressRequestHasTheSameMessages(t *testing.T) {
	main := parse(t, load(t, "gemini-09-p3-gemini-stream-tool-call-answer")).Messages
	sum := parse(t, load(t, "gemini-12-compress-command-gemini-generate-summary-request")).Messages
	// Both start with their own system instruction; the history after it is the same
	// but for the last user message (the compression prompt).
	x, y := canonicals(main[1:]), canonicals(sum[1:len(sum)-1])
	if len(y) > len(x) {
		t.Fatalf("%d messages, %d", len(x), len(y))
	}
	for i := range y {
		if x[i] != y[i] {
			t.Fatalf("message %d:\n%q\n%q", i+1, x[i], y[i])
		}
	}
}

// The reply the proxy stores (the upstream's stream: no call id, a real signature,
// thought text) and the same turn Gemini CLI sends back next (its own call id, the
// signature replaced, the thoughts stripped) are the same message to the digest
// chain, and Build of either gives a request the API takes.
func TestStoredReplyIsTheTurnSentBack(t *testing.T) {
	stream := wiretest.Stream([]wiretest.SSEEvent{
		{Data: `{"candidates":[{"content":{"parts":[{"text":"**Running the command** I'll run echo hi.","thought":true}],"role":"model"},"index":0}],"usageMetadata":{"promptTokenCount":9000,"totalTokenCount":9000}}`},
		{Data: `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"echo hi"}},"thoughtSignature":"CiIBjz1rX1Y2Zk0xbm9wZQ=="}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9000,"candidatesTokenCount":12,"thoughtsTokenCount":30,"totalTokenCount":9042}}`},
	})
	s := gemini.Gemini().NewStream()
	if _, err := wire.NewSSESplitter(0, s.Event).Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	stored, _, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	// The turn as the client sends it back: the first model turn of p1's second request.
	next := parse(t, load(t, "gemini-03-p1-gemini-stream-text-answer")).Messages
	var back *schemas.Message
	for i := range next {
		if next[i].Role == schemas.RoleAssistant {
			back = &next[i]
			break
		}
	}
	if string(proxy.Canonical(&stored)) != string(proxy.Canonical(back)) {
		a, _ := stored.Encode()
		b, _ := back.Encode()
		t.Fatalf("stored\n%s\nsent back\n%s", a, b)
	}
	// The context the proxy sends next holds the stored turn: its call goes with the
	// upstream's signature and the id the client gave its response (Gemini CLI keeps
	// that id on the call too), so call and response match.
	req := parse(t, load(t, "gemini-03-p1-gemini-stream-text-answer"))
	msgs := append([]schemas.Message(nil), req.Messages...)
	for i := range msgs {
		if msgs[i].Role == schemas.RoleAssistant {
			msgs[i] = stored
			break
		}
	}
	out, err := gemini.Gemini().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"functionCall":{"args":{"command":"echo hi"},"id":"run_shell_command_1796619811653_0","name":"run_shell_command"},"thoughtSignature":"CiIBjz1rX1Y2Zk0xbm9wZQ=="}`
	if !bytes.Contains(out, []byte(want)) {
		t.Fatalf("no %s in\n%s", want, out)
	}
	if _, err := gemini.Gemini().Parse(out); err != nil {
		t.Fatal(err)
	}

	// The whole reply, non-streamed, is the same message as the stream's.
	reply := `{"candidates":[{"content":{"parts":[{"text":"**Running the command** I'll run echo hi.","thought":true},{"functionCall":{"name":"run_shell_command","args":{"command":"echo hi"}},"thoughtSignature":"CiIBjz1rX1Y2Zk0xbm9wZQ=="}],"role":"model"},"finishReason":"STOP","index":0}]}`
	whole, _, err := gemini.Gemini().Reply([]byte(reply))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := whole.Encode()
	b, _ := stored.Encode()
	if !bytes.Equal(a, b) {
		t.Fatalf("reply\n%s\nstream\n%s", a, b)
	}
}
