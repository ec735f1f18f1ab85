package e2etest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/schemas"
)

// errorCase is one upstream failure an SDK must see as a failure.
type errorCase struct {
	name string
	rep  fakeupstream.Reply
	// stream says the request asks for a stream.
	stream bool
}

const longText = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"

var (
	openAI429    = `{"error":{"message":"Rate limit reached for gpt-e2e","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	anthropic429 = `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your rate limit"}}`
)

func errorCases(body429 string) []errorCase {
	return []errorCase{
		{name: "429", rep: fakeupstream.Reply{Status: 429, RetryAfter: "7", ErrorBody: body429}},
		{name: "429-streamed", rep: fakeupstream.Reply{Status: 429, RetryAfter: "7", ErrorBody: body429}, stream: true},
		{name: "broken-stream", rep: fakeupstream.Reply{Text: longText, BreakAfter: 4}, stream: true},
		{name: "error-event", rep: fakeupstream.Reply{Text: longText, ErrorEventAfter: 4}, stream: true},
	}
}

// checkErrorCase checks that the client saw the failure: a 429 verbatim (status,
// retry-after, the body's error), a broken stream or an error event as an error, never
// a clean end; and, through the proxy, that CHAT stored no reply for the failed turn.
func checkErrorCase(t *testing.T, tg target, c errorCase, body429 string, r turnResult, conv string, sentMsgs int) {
	t.Helper()
	if r.got.OK {
		t.Fatalf("%s: the client got a reply: %s", c.name, r.got.Message)
	}
	t.Logf("%s: the client failed with %s, status %d: %s", c.name, r.got.Kind, r.got.Status, r.got.Error)
	if c.rep.Status == 429 {
		if r.got.Status != 429 || r.got.Headers["retry-after"] != "7" {
			t.Fatalf("%s: the client got status %d, headers %v", c.name, r.got.Status, r.got.Headers)
		}
		var whole struct {
			Error json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal([]byte(body429), &whole)
		if e := compactJSON(string(r.got.Error)); e != compactJSON(body429) && e != compactJSON(string(whole.Error)) {
			t.Fatalf("%s: the client got the error %s, the upstream sent %s", c.name, r.got.Error, body429)
		}
	}
	if c.rep.ErrorEventAfter > 0 && r.got.Kind != "APIError" {
		t.Fatalf("%s: the client failed with %s, not the API's error event", c.name, r.got.Kind)
	}
	if tg.st == nil {
		return
	}
	// Through the proxy a stream the upstream broke ends in the API's error event too,
	// never in a dropped connection or a clean end.
	if c.rep.BreakAfter > 0 && r.got.Kind != "APIError" {
		t.Fatalf("%s: the client failed with %s, not the API's error event", c.name, r.got.Kind)
	}
	stored := tg.st.stored(t, conv)
	if len(stored) > sentMsgs {
		t.Fatalf("%s: CHAT holds %d messages for %d the client sent:\n%s", c.name, len(stored), sentMsgs, dump(stored))
	}
	for _, m := range stored {
		if m.Role == schemas.RoleAssistant {
			t.Fatalf("%s: CHAT holds a reply of a failed turn:\n%s", c.name, dump(stored))
		}
	}
}

// openAIErrors runs the failures with the openai package, one conversation each.
func openAIErrors(t *testing.T, tg target) {
	for _, c := range errorCases(openAI429) {
		t.Run(c.name, func(t *testing.T) {
			tc := tg
			if tc.st != nil {
				tc.conv = fmt.Sprintf("%s-%s", tg.conv, c.name)
			}
			req := map[string]any{"model": "gpt-e2e", "stream": c.stream, "messages": []any{
				map[string]any{"role": "user", "content": "hello " + c.name}}}
			r := openAITurn(t, tc, req, c.rep)
			checkErrorCase(t, tc, c, openAI429, r, tc.conv, 1)
		})
	}
}

// anthropicErrors runs the failures with the @anthropic-ai/sdk package.
func anthropicErrors(t *testing.T, tg target) {
	for _, c := range errorCases(anthropic429) {
		t.Run(c.name, func(t *testing.T) {
			tc := tg
			if tc.st != nil {
				tc.conv = fmt.Sprintf("%s-%s", tg.conv, c.name)
			}
			req := map[string]any{"model": "claude-e2e", "max_tokens": 100, "stream": c.stream, "messages": []any{
				map[string]any{"role": "user", "content": "hello " + c.name}}}
			r := anthropicTurn(t, tc, req, c.rep)
			checkErrorCase(t, tc, c, anthropic429, r, tc.conv, 1)
		})
	}
}

// The scripts of js/ and the fake upstream on their own: the official SDKs talk to the
// fake directly, so the scenarios the proxy tests run are known to pass without a
// proxy between them (what the upstream gets is then what the client sent).
func TestSDKScriptsAgainstFakeUpstream(t *testing.T) {
	jsDir(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("openai/stream=%v", stream), func(t *testing.T) {
			up := fakeupstream.New(t)
			openAIScenario(t, target{up: up, root: up.URL()}, stream)
		})
		t.Run(fmt.Sprintf("anthropic/stream=%v", stream), func(t *testing.T) {
			up := fakeupstream.New(t)
			anthropicScenario(t, target{up: up, root: up.URL()}, stream)
		})
	}
	t.Run("openai/errors", func(t *testing.T) {
		up := fakeupstream.New(t)
		openAIErrors(t, target{up: up, root: up.URL()})
	})
	t.Run("anthropic/errors", func(t *testing.T) {
		up := fakeupstream.New(t)
		anthropicErrors(t, target{up: up, root: up.URL()})
	})
}

// The official openai package (7.x) through the proxy, streamed and not, with tools:
// the upstream gets the client's conversation, every other field and the credential as
// sent; the client gets the reply whole with the proxy's headers; CHAT holds each
// message once; upstream failures reach the client as failures (a 429 verbatim).
func TestOpenAISDKThroughProxy(t *testing.T) {
	jsDir(t)
	s := startStack(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			openAIScenario(t, target{up: s.up, root: s.proxy, conv: fmt.Sprintf("e2e-openai-sdk-%v", stream), st: s}, stream)
		})
	}
	t.Run("errors", func(t *testing.T) {
		openAIErrors(t, target{up: s.up, root: s.proxy, conv: "e2e-openai-sdk-err", st: s})
	})
	s.checkSummarizerKey(t)
}

// The official @anthropic-ai/sdk package (1.x) through the proxy: as
// TestOpenAISDKThroughProxy, on the Messages API.
func TestAnthropicSDKThroughProxy(t *testing.T) {
	jsDir(t)
	s := startStack(t)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			anthropicScenario(t, target{up: s.up, root: s.proxy, conv: fmt.Sprintf("e2e-anthropic-sdk-%v", stream), st: s}, stream)
		})
	}
	t.Run("errors", func(t *testing.T) {
		anthropicErrors(t, target{up: s.up, root: s.proxy, conv: "e2e-anthropic-sdk-err", st: s})
	})
	s.checkSummarizerKey(t)
}

// checkSummarizerKey checks that every summarizer request carried the operator's key,
// never a client's.
func (s *stack) checkSummarizerKey(t *testing.T) {
	t.Helper()
	for _, r := range s.up.Requests() {
		if r.Summarizer && r.Header.Get("Authorization") != "Bearer "+summarizerKey {
			t.Fatalf("a summarizer request carried Authorization %q", r.Header.Get("Authorization"))
		}
	}
}

// go-openai against the fake upstream on its own: the scenario TestGoOpenAIThroughProxy
// runs passes without a proxy between them.
func TestGoOpenAIAgainstFakeUpstream(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			up := fakeupstream.New(t)
			goScenario(t, target{up: up, root: up.URL()}, stream)
		})
	}
	t.Run("errors", func(t *testing.T) {
		for _, c := range errorCases(openAI429) {
			t.Run(c.name, func(t *testing.T) {
				up := fakeupstream.New(t)
				goErrorCase(t, target{up: up, root: up.URL()}, c)
			})
		}
	})
}
