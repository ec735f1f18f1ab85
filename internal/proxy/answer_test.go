package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wires"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// answerStack is a proxy with the real wires and conversations in front of an
// upstream that answers every chat completion with "model reply N" and counts them.
type answerStack struct {
	f     *fixture
	http  *httptest.Server
	calls atomic.Int32
}

func newAnswerStack(t *testing.T, nc *nats.Conn, st *jetstream.Store, configure func(*proxy.Config)) *answerStack {
	return newAnswerStackWith(t, nc, st, configure, proxy.Options{})
}

// newAnswerStackWith is newAnswerStack with opts (its NATS and Logger are the stack's).
func newAnswerStackWith(t *testing.T, nc *nats.Conn, st *jetstream.Store, configure func(*proxy.Config), opts proxy.Options) *answerStack {
	a := &answerStack{f: newFixture(t, nc, st, 128000)}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, ":generateContent") {
			fmt.Fprintf(w, `{"candidates":[{"index":0,"content":{"role":"model","parts":[{"text":"model reply %d"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":2,"totalTokenCount":12}}`, n)
			return
		}
		if r.URL.Path == "/v1/responses/compact" {
			fmt.Fprintf(w, `{"id":"cmp_%d","object":"response.compaction","output":[{"type":"compaction","encrypted_content":"opaque"}],"usage":{"input_tokens":40,"output_tokens":7,"total_tokens":47,"input_tokens_details":{"cached_tokens":30}}}`, n)
			return
		}
		if r.URL.Path == "/v1/responses" {
			fmt.Fprintf(w, `{"id":"resp_%d","object":"response","status":"completed","output":[{"type":"message","id":"msg_%d","status":"completed","role":"assistant","content":[{"type":"output_text","text":"model reply %d","annotations":[]}]}],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12}}`, n, n, n)
			return
		}
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"model reply %d"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}`, n)
	}))
	t.Cleanup(up.Close)
	cfg := proxy.DefaultConfig()
	cfg.Listen, cfg.Upstream, cfg.AnthropicUpstream, cfg.GeminiUpstream = "", up.URL, up.URL, up.URL
	if configure != nil {
		configure(&cfg)
	}
	opts.NATS, opts.Logger = nc, zerolog.Nop()
	srv, err := proxy.New(cfg, wires.All(), a.f.conv, opts)
	if err != nil {
		t.Fatal(err)
	}
	a.http = httptest.NewServer(srv.Handler())
	t.Cleanup(a.http.Close)
	return a
}

// chat posts an OpenAI chat request of messages (role, text pairs) to conv.
func (a *answerStack) chat(t *testing.T, conv string, stream bool, pairs ...string) (*http.Response, string) {
	t.Helper()
	var msgs []map[string]string
	for i := 0; i+1 < len(pairs); i += 2 {
		msgs = append(msgs, map[string]string{"role": pairs[i], "content": pairs[i+1]})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream})
	req, _ := http.NewRequest(http.MethodPost, a.http.URL+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set(proxy.ConversationHeader, conv)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const claudeCompact = "CRITICAL: Respond with TEXT ONLY.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests."

// An agent's request to summarize its own conversation is answered from Compactor's
// summary, without calling the model, in the shape the agent reads (Claude Code: an
// <analysis> and a <summary>), whole or streamed; the answer holds the summary and the
// messages since it. The prompt and the answer are stored as the turn, and the agent's
// next history, which carries the answer, continues the conversation. With no summary
// yet, or with answering off, the request goes to the model.
func TestAgentsCompactionRequestIsAnsweredFromTheSummary(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"system", "you are an agent", "user", "FACT-9 is the port"}
		_, _ = a.chat(t, "a1", false, h...)
		h = append(h, "assistant", "model reply 1", "user", "second")
		_, _ = a.chat(t, "a1", false, h...)
		h = append(h, "assistant", "model reply 2")

		// No summary yet: the compaction request goes to the model.
		resp, body := a.chat(t, "a1", false, append(h, "user", claudeCompact)...)
		if resp.Header.Get(proxy.AnsweredHeader) != "" || a.calls.Load() != 3 || !strings.Contains(body, "model reply 3") {
			t.Fatalf("with no summary: answered %q, %d upstream calls, %s", resp.Header.Get(proxy.AnsweredHeader), a.calls.Load(), body)
		}
		h = append(h, "user", claudeCompact, "assistant", "model reply 3", "user", "third")
		_, _ = a.chat(t, "a1", false, h...)
		h = append(h, "assistant", "model reply 4")
		putValue(a.f, "a1", 1, "SUMMARY: FACT-9 is the port, asked twice.", "third")

		for _, stream := range []bool{false, true} {
			resp, body = a.chat(t, "a1", stream, append(h, "user", claudeCompact)...)
			if resp.StatusCode != 200 || resp.Header.Get(proxy.AnsweredHeader) != "claude-code" || a.calls.Load() != 4 {
				t.Fatalf("stream %v: %d, answered %q, %d upstream calls: %s", stream, resp.StatusCode, resp.Header.Get(proxy.AnsweredHeader), a.calls.Load(), body)
			}
			for _, want := range []string{"<analysis>", "<summary>", "SUMMARY: FACT-9 is the port", "[user] third", "[assistant] model reply 4", "</summary>"} {
				if !strings.Contains(strings.ReplaceAll(body, `\n`, "\n"), want) {
					t.Fatalf("stream %v: the answer lacks %q: %s", stream, want, body)
				}
			}
			if strings.Contains(body, "Your task is to create") {
				t.Fatalf("the answer quotes the compaction prompt: %s", body)
			}
			if stream != (resp.Header.Get("Content-Type") == "text/event-stream") || stream != strings.Contains(body, "data: [DONE]") {
				t.Fatalf("stream %v answered as %s: %s", stream, resp.Header.Get("Content-Type"), body)
			}
		}
		stored := a.f.stored("a1")
		if n := len(stored); n != 11 || !strings.HasPrefix(stored[10], "<analysis>") || stored[9] != claudeCompact {
			t.Fatalf("CHAT holds %d messages: %q", n, stored)
		}

		// Claude Code goes on from a history that carries the summary.
		var answer string
		for _, s := range stored {
			if strings.HasPrefix(s, "<analysis>") {
				answer = s
			}
		}
		inner := answer[strings.Index(answer, "<summary>")+len("<summary>") : strings.LastIndex(answer, "</summary>")]
		resp, _ = a.chat(t, "a1", false, "system", "you are an agent",
			"user", "This session is being continued from a previous conversation. Summary:\n"+strings.TrimSpace(inner), "user", "fourth")
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "a1" || a.calls.Load() != 5 {
			t.Fatalf("after the answer: conversation %q, branch %q, %d upstream calls", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader), a.calls.Load())
		}
		// The message carrying the answer is the client's copy of it: only what follows
		// is new.
		if got := a.f.stored("a1"); len(got) != 13 || got[11] != "fourth" || got[12] != "model reply 5" {
			t.Fatalf("CHAT holds %q", got[10:])
		}
	})
}

// With COMPACTOR_PROXY_ANSWER_COMPACTIONS=false the model is asked, summary or not; an
// operator's own prompt text is recognised too.
func TestCompactionAnswersCanBeTurnedOffAndExtended(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		for _, c := range []struct {
			conv     string
			answer   bool
			prompt   string
			answered string
		}{
			{"off", false, claudeCompact, ""},
			{"own", true, "Please SQUASH-HISTORY now", "operator"},
		} {
			a := newAnswerStack(t, nc, st, func(cfg *proxy.Config) {
				cfg.AnswerCompactions = c.answer
				cfg.CompactionPrompts = []string{"SQUASH-HISTORY"}
			})
			h := []string{"user", "one", "assistant", "model reply 1", "user", "two"}
			_, _ = a.chat(t, c.conv, false, "user", "one")
			_, _ = a.chat(t, c.conv, false, h...)
			putValue(a.f, c.conv, 1, "SUMMARY of one", "two")
			resp, _ := a.chat(t, c.conv, false, append(h, "assistant", "model reply 2", "user", c.prompt)...)
			if got := resp.Header.Get(proxy.AnsweredHeader); got != c.answered {
				t.Fatalf("%s: answered %q, want %q", c.conv, got, c.answered)
			}
		}
	})
}

// OpenCode asks for its summary with a system prompt of its own and its history
// flattened into one message: answered from the conversation's summary all the same,
// stored after the conversation's newest message, and OpenCode's next history, which
// holds the answer as an assistant message, continues the conversation. Its title
// generator, a side task on the same session, is sent but never stored.
func TestOpenCodesSummaryRequestAndTitleGenerator(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		resp, _ := a.chat(t, "oc", false, "system", "You are a title generator. You output ONLY a thread title.", "user", "Generate a title for this conversation:", "user", "FACT-3 build it")
		if resp.Header.Get(proxy.SideHeader) != "true" || len(a.f.stored("oc")) != 0 || a.calls.Load() != 1 {
			t.Fatalf("title request: side %q, CHAT holds %q, %d calls", resp.Header.Get(proxy.SideHeader), a.f.stored("oc"), a.calls.Load())
		}
		h := []string{"system", "You are opencode", "user", "FACT-3 build it"}
		_, _ = a.chat(t, "oc", false, h...)
		h = append(h, "assistant", "model reply 2", "user", "test it")
		_, _ = a.chat(t, "oc", false, h...)
		putValue(a.f, "oc", 1, "SUMMARY: FACT-3 was built.", "test it")
		resp, body := a.chat(t, "oc", false, "system", "You are a context summarization agent. You are given a conversation between a user and an agent.",
			"user", "Here is the conversation so far:\n<conversation>\n[User]: FACT-3 build it\n</conversation>\nCreate a new anchored summary from the conversation history in the <conversation> tags above")
		if resp.Header.Get(proxy.AnsweredHeader) != "opencode" || resp.Header.Get(proxy.BranchHeader) != "" || a.calls.Load() != 3 ||
			!strings.Contains(body, "SUMMARY: FACT-3 was built.") || !strings.Contains(body, "[assistant] model reply 3") {
			t.Fatalf("summary request: answered %q, branch %q, %d calls: %s", resp.Header.Get(proxy.AnsweredHeader), resp.Header.Get(proxy.BranchHeader), a.calls.Load(), body)
		}
		var answer map[string]any
		if err := json.Unmarshal([]byte(body), &answer); err != nil {
			t.Fatal(err)
		}
		text := answer["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		resp, _ = a.chat(t, "oc", false, "system", "You are opencode", "user", "What did we do so far?", "assistant", text, "user", "Continue if you have next steps")
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "oc" {
			t.Fatalf("after the summary: conversation %q, branch %q", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader))
		}
		got := a.f.stored("oc")
		if n := len(got); n != 9 || got[n-2] != "Continue if you have next steps" || got[n-1] != "model reply 4" || got[n-3] != text {
			t.Fatalf("CHAT holds %q", got)
		}
	})
}

// responses posts an OpenAI Responses request of items (role, text pairs) to path.
func (a *answerStack) responses(t *testing.T, path, conv string, pairs ...string) (*http.Response, string) {
	t.Helper()
	var items []map[string]any
	for i := 0; i+1 < len(pairs); i += 2 {
		kind := "input_text"
		if pairs[i] == "assistant" {
			kind = "output_text"
		}
		items = append(items, map[string]any{"type": "message", "role": pairs[i], "content": []any{map[string]any{"type": kind, "text": pairs[i+1]}}})
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "input": items})
	req, _ := http.NewRequest(http.MethodPost, a.http.URL+path, strings.NewReader(string(body)))
	req.Header.Set("session-id", conv)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// POST /v1/responses/compact (the Responses API's own compaction, which Codex calls
// against OpenAI) is answered from Compactor's summary with one readable user message,
// never an opaque compaction item; the client's next history, that message and its new
// input, continues the conversation. Before a summary exists it goes to the provider.
func TestResponsesCompactEndpointIsAnsweredFromTheSummary(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"developer", "you are codex", "user", "FACT-5 lives in main.go"}
		_, _ = a.responses(t, "/v1/responses", "cx", h...)
		h = append(h, "assistant", "model reply 1", "user", "second")
		_, _ = a.responses(t, "/v1/responses", "cx", h...)
		h = append(h, "assistant", "model reply 2")
		resp, _ := a.responses(t, "/v1/responses/compact", "cx", h...)
		if resp.Header.Get(proxy.PassthroughHeader) != "no-summary" || a.calls.Load() != 3 {
			t.Fatalf("with no summary: passthrough %q, %d upstream calls", resp.Header.Get(proxy.PassthroughHeader), a.calls.Load())
		}
		putValue(a.f, "cx", 1, "SUMMARY: FACT-5 lives in main.go", "second")
		resp, body := a.responses(t, "/v1/responses/compact", "cx", h...)
		var out struct {
			Object string `json:"object"`
			Output []struct {
				Type, Role string
				Content    []struct{ Type, Text string }
			} `json:"output"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || resp.StatusCode != 200 || a.calls.Load() != 3 || out.Object != "response.compaction" ||
			len(out.Output) != 1 || out.Output[0].Role != "user" || len(out.Output[0].Content) != 1 || out.Output[0].Content[0].Type != "input_text" {
			t.Fatalf("compact: %d, %d upstream calls, %v: %s", resp.StatusCode, a.calls.Load(), err, body)
		}
		text := out.Output[0].Content[0].Text
		if !strings.Contains(text, "SUMMARY: FACT-5 lives in main.go") || !strings.Contains(text, "[assistant] model reply 2") {
			t.Fatalf("the compacted history: %q", text)
		}
		resp, _ = a.responses(t, "/v1/responses", "cx", "developer", "you are codex", "user", text, "user", "third")
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "cx" {
			t.Fatalf("after the compaction: conversation %q, branch %q", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader))
		}
		if got := a.f.stored("cx"); len(got) != 8 || got[5] != text || got[6] != "third" || got[7] != "model reply 4" {
			t.Fatalf("CHAT holds %q", got)
		}
	})
}

// gemini posts a Gemini generateContent request of contents (role, text pairs) to conv
// (named in the path, as Gemini CLI's base URL names it).
func (a *answerStack) gemini(t *testing.T, conv, system string, pairs ...string) (*http.Response, string) {
	t.Helper()
	var contents []map[string]any
	for i := 0; i+1 < len(pairs); i += 2 {
		contents = append(contents, map[string]any{"role": pairs[i], "parts": []any{map[string]any{"text": pairs[i+1]}}})
	}
	body, _ := json.Marshal(map[string]any{"contents": contents, "systemInstruction": map[string]any{"parts": []any{map[string]any{"text": system}}}})
	req, _ := http.NewRequest(http.MethodPost, a.http.URL+"/c/"+conv+"/v1beta/models/g:generateContent", strings.NewReader(string(body)))
	req.Header.Set("X-Goog-Api-Key", "k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Gemini CLI compresses as a side task (its own system prompt, the history and
// "Generate a new <state_snapshot>") and goes on from a history that keeps its newest
// turns: the request is answered from the summary in a <state_snapshot>, and neither it
// nor the answer is stored, so the turn that follows, which lacks them, continues the
// conversation instead of branching.
func TestGeminiCompressionIsAnsweredAndNotStored(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"user", "FACT-8 is the flag"}
		_, _ = a.gemini(t, "gm", "you are gemini", h...)
		h = append(h, "model", "model reply 1", "user", "second")
		_, _ = a.gemini(t, "gm", "you are gemini", h...)
		h = append(h, "model", "model reply 2")
		putValue(a.f, "gm", 1, "SUMMARY: FACT-8 is the flag", "second")
		before := len(a.f.stored("gm"))
		resp, body := a.gemini(t, "gm", "You are a specialized system component responsible for distilling chat history into a structured XML <state_snapshot>.",
			append(h, "user", "Generate a new <state_snapshot> based on the provided history.")...)
		if resp.Header.Get(proxy.AnsweredHeader) != "gemini-cli" || a.calls.Load() != 2 || !strings.Contains(body, "state_snapshot") ||
			!strings.Contains(body, "SUMMARY: FACT-8 is the flag") {
			t.Fatalf("compression: answered %q, %d upstream calls: %s", resp.Header.Get(proxy.AnsweredHeader), a.calls.Load(), body)
		}
		if got := a.f.stored("gm"); len(got) != before {
			t.Fatalf("the compression was stored: %q", got[before:])
		}
		resp, _ = a.gemini(t, "gm", "you are gemini", append(h, "user", "third")...)
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "gm" || a.calls.Load() != 3 {
			t.Fatalf("the next turn: conversation %q, branch %q", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader))
		}
	})
}

// Claude Code compacts on its own from before the reply whose usage made it compact:
// its compaction request is the history without that reply, plus the prompt. It is
// answered for what the client has, and makes no branch; the next history, the summary
// and the kept reply, continues the conversation.
func TestCompactionFromBeforeTheNewestReplyMakesNoBranch(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a := newAnswerStack(t, nc, st, nil)
		h := []string{"system", "you are an agent", "user", "FACT-2 build it"}
		_, _ = a.chat(t, "cc2", false, h...)
		h = append(h, "assistant", "model reply 1", "user", "second")
		_, _ = a.chat(t, "cc2", false, h...)
		putValue(a.f, "cc2", 1, "SUMMARY: FACT-2 was built.", "second")
		before := strings.Join(a.f.stored("cc2"), "|")
		resp, body := a.chat(t, "cc2", false, append(h, "user", claudeCompact)...)
		if resp.Header.Get(proxy.AnsweredHeader) != "claude-code" || !strings.Contains(body, "SUMMARY: FACT-2 was built.") || strings.Contains(body, "model reply 2") {
			t.Fatalf("answered %q: %s", resp.Header.Get(proxy.AnsweredHeader), body)
		}
		if got := strings.Join(a.f.stored("cc2"), "|"); got != before {
			t.Fatalf("the conversation changed: %q", got)
		}
		if b := resp.Header.Get(proxy.ConversationHeader); b != "cc2" && len(a.f.stored(b)) > 0 {
			t.Fatalf("a branch was made: %s holds %q", b, a.f.stored(b))
		}
		resp, _ = a.chat(t, "cc2", false, "system", "you are an agent", "user", "This session is being continued. Summary: SUMMARY: FACT-2 was built.",
			"assistant", "model reply 2", "user", "third")
		if resp.Header.Get(proxy.BranchHeader) != "" || resp.Header.Get(proxy.ConversationHeader) != "cc2" {
			t.Fatalf("after: conversation %q, branch %q", resp.Header.Get(proxy.ConversationHeader), resp.Header.Get(proxy.BranchHeader))
		}
	})
}
