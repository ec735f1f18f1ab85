package fakeupstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

func client(s *Server) *openai.Client {
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = s.URL() + "/v1"
	return openai.NewClientWithConfig(cfg)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

var weatherTool = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
	Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}

// go-openai reads a non-streamed reply with text and a tool call, and the usage counts
// the prefix shared with the conversation's previous request as cached.
func TestOpenAINonStreamedToolCallAndCachedPrefix(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "checking", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		Reply{Text: "sunny"})
	c := client(s)
	msgs := []openai.ChatCompletionMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "weather in Oslo?"}}
	resp, err := c.CreateChatCompletion(ctx(t), openai.ChatCompletionRequest{Model: "gpt-x", Messages: msgs, Tools: []openai.Tool{weatherTool}})
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Choices[0].Message
	if m.Content != "checking" || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "call_1" || m.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` ||
		resp.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("reply %+v", resp.Choices[0])
	}
	if resp.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request cached %d tokens", resp.Usage.PromptTokensDetails.CachedTokens)
	}
	first := s.Agent()[0]
	msgs = append(msgs, m, openai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_1", Content: "12C"})
	resp, err = c.CreateChatCompletion(ctx(t), openai.ChatCompletionRequest{Model: "gpt-x", Messages: msgs, Tools: []openai.Tool{weatherTool}})
	if err != nil {
		t.Fatal(err)
	}
	second := s.Agent()[1]
	shared := commonPrefix(conversationBytes(first), conversationBytes(second))
	if shared != len(conversationBytes(first)) { // the second extends the first
		t.Fatalf("shared prefix %d of %d bytes", shared, len(conversationBytes(first)))
	}
	if got := resp.Usage.PromptTokensDetails.CachedTokens; got != tokens(shared) || got == 0 || resp.Usage.PromptTokens != tokens(len(conversationBytes(second))) {
		t.Fatalf("usage %+v, want %d cached", resp.Usage, tokens(shared))
	}
	if second.Header.Get("Authorization") != "Bearer sk-test" || len(second.Messages) != 4 || Text(second.Messages[3]) != "12C" {
		t.Fatalf("recorded %v %d messages", second.Header, len(second.Messages))
	}
	if resp.Choices[0].Message.Content != "sunny" {
		t.Fatalf("second reply %q", resp.Choices[0].Message.Content)
	}
}

// go-openai puts a streamed reply (text, a tool call's arguments in pieces, the usage
// chunk) back together.
func TestOpenAIStreamedReply(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "a fairly long reply, cut in pieces", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Bergen, Norway"}`}}})
	st, err := client(s).CreateChatCompletionStream(ctx(t), openai.ChatCompletionRequest{Model: "gpt-x", Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		Messages:      []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}, Tools: []openai.Tool{weatherTool}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var text, args, name string
	var usage *openai.Usage
	for {
		ch, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch.Usage != nil {
			usage = ch.Usage
		}
		for _, c := range ch.Choices {
			text += c.Delta.Content
			for _, tc := range c.Delta.ToolCalls {
				name += tc.Function.Name
				args += tc.Function.Arguments
			}
		}
	}
	if text != "a fairly long reply, cut in pieces" || name != "get_weather" || args != `{"city":"Bergen, Norway"}` || usage == nil || usage.PromptTokens == 0 {
		t.Fatalf("text %q name %q args %q usage %+v", text, name, args, usage)
	}
}

// A scripted 429 reaches go-openai with its status, body and retry-after header.
func TestOpenAIRateLimit(t *testing.T) {
	s := New(t)
	body := `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	s.Push(Reply{Status: 429, RetryAfter: "7", ErrorBody: body})
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "7" || string(got) != body {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
	s.Push(Reply{Status: 429, RetryAfter: "3"})
	_, err = client(s).CreateChatCompletion(ctx(t), openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 429 {
		t.Fatalf("err %v", err)
	}
}

// A stream that breaks mid-way is an error for go-openai (not a clean end), and so is
// one that ends in the error event.
func TestOpenAIBrokenAndErrorStreams(t *testing.T) {
	for _, rep := range []Reply{{Text: "one two three four five six", BreakAfter: 3}, {Text: "one two three four five six", ErrorEventAfter: 3}} {
		s := New(t)
		s.Push(rep)
		st, err := client(s).CreateChatCompletionStream(ctx(t), openai.ChatCompletionRequest{Model: "m", Stream: true,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		var recvErr error
		for recvErr == nil {
			_, recvErr = st.Recv()
		}
		st.Close()
		if errors.Is(recvErr, io.EOF) {
			t.Fatalf("%+v: the stream ended cleanly", rep)
		}
		if rep.ErrorEventAfter > 0 && !strings.Contains(recvErr.Error(), "the server had an error") {
			t.Fatalf("error event read as %v", recvErr)
		}
	}
}

// A stalled stream whose client goes away is recorded as gone.
func TestStallUntilClientGoes(t *testing.T) {
	s := New(t)
	stalled := make(chan struct{})
	s.Push(Reply{Text: "one two three four five six", StallAfter: 2, Stalled: stalled})
	c, cancel := context.WithCancel(ctx(t))
	st, err := client(s).CreateChatCompletionStream(c, openai.ChatCompletionRequest{Model: "m", Stream: true,
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-stalled
	cancel()
	st.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !s.Agent()[0].gone(s) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not see its client go")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *Request) gone(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return r.Gone
}

// The summarizer's requests are answered with a summary that keeps every planted fact,
// and take no scripted reply.
func TestSummarizerKeepsFacts(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "scripted"})
	resp, err := client(s).CreateChatCompletion(ctx(t), openai.ChatCompletionRequest{Model: SummarizerModel, Messages: []openai.ChatCompletionMessage{
		{Role: "user", Content: "remember FACT-001=red-fox and FACT-002=blue-owl."}, {Role: "assistant", Content: "noted FACT-001=red-fox"},
		{Role: "user", Content: "summarize"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Choices[0].Message.Content
	if !strings.Contains(got, "FACT-001=red-fox\nFACT-002=blue-owl") || s.Summaries() != 1 || len(s.Agent()) != 0 {
		t.Fatalf("summary %q, %d summaries, %d agent requests", got, s.Summaries(), len(s.Agent()))
	}
	if s.next(&Request{}).Text != "scripted" {
		t.Fatal("the summarizer took the scripted reply")
	}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// readSSE reads every event of an Anthropic stream.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		case line == "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

func postAnthropic(t *testing.T, s *Server, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL()+"/v1/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", "sk-ant-test")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// The Anthropic stream has the API's events in the API's order, the tool input in
// input_json_delta pieces; an error event ends the stream with event: error; the
// non-streamed reply carries content blocks and the cache usage.
func TestAnthropicStreamAndMessage(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "let me look", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		Reply{Text: "a b c d e f g h i j k l m n o p", ErrorEventAfter: 4}, Reply{Text: "plain"})
	body := `{"model":"claude-x","max_tokens":100,"stream":true,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	evs := readSSE(t, postAnthropic(t, s, body).Body)
	var names []string
	var partial string
	for _, e := range evs {
		names = append(names, e.name)
		if d, ok := e.data["delta"].(map[string]any); ok && d["type"] == "input_json_delta" {
			partial += d["partial_json"].(string)
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_delta content_block_stop content_block_start"
	if !strings.HasPrefix(strings.Join(names, " "), want) || names[len(names)-1] != "message_stop" || names[len(names)-2] != "message_delta" ||
		partial != `{"city":"Oslo"}` {
		t.Fatalf("events %v partial %q", names, partial)
	}
	evs = readSSE(t, postAnthropic(t, s, body).Body)
	if last := evs[len(evs)-1]; last.name != "error" || len(evs) != 5 {
		t.Fatalf("error stream %v", evs)
	}
	resp := postAnthropic(t, s, strings.Replace(body, `"stream":true`, `"stream":false`, 1))
	var msg struct {
		Content []map[string]any `json:"content"`
		Usage   map[string]int   `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0]["text"] != "plain" || msg.Usage["cache_read_input_tokens"] == 0 {
		t.Fatalf("message %+v", msg)
	}
	if r := s.Agent()[2]; r.Header.Get("x-api-key") != "sk-ant-test" || !bytes.Contains(r.System, []byte("cache_control")) {
		t.Fatalf("recorded %v %s", r.Header, r.System)
	}
}

// An Anthropic 429 has the API's error body and retry-after.
func TestAnthropicRateLimit(t *testing.T) {
	s := New(t)
	s.Push(Reply{Status: 429, RetryAfter: "5"})
	resp := postAnthropic(t, s, `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`)
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "5" || !strings.Contains(string(got), `"type":"rate_limit_error"`) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, got)
	}
}

// Script drops what is left of the queue; Push adds to it.
func TestScriptReplacesQueue(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "left over"}, Reply{Text: "another"})
	s.Script(Reply{Text: "fresh"})
	if got := s.next(&Request{}).Text; got != "fresh" {
		t.Fatalf("next reply %q", got)
	}
	if got := s.next(&Request{}).Text; got != "ok" {
		t.Fatalf("after the script: %q", got)
	}
}
