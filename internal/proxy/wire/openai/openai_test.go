package openai

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/schemas"
)

// openAIRequest is a Chat Completions request as the API reference shows them: a
// system prompt, a user turn with an image, an assistant turn calling a tool, its
// result, and the fields the proxy must leave as sent.
const openAIRequest = `{
  "model": "gpt-4o",
  "messages": [
    {"role": "developer", "content": "You are a helpful assistant."},
    {"role": "user", "content": [
      {"type": "text", "text": "What's the weather like where this was taken?"},
      {"type": "image_url", "image_url": {"url": "https://upload.wikimedia.org/boardwalk.jpg", "detail": "low"}}
    ]},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_abc123", "type": "function", "function": {"name": "get_current_weather", "arguments": "{\"location\": \"Boston, MA\"}"}}
    ]},
    {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temperature\": 22, \"unit\": \"celsius\"}"},
    {"role": "user", "content": "And tomorrow?", "name": "ann"}
  ],
  "tools": [{"type": "function", "function": {"name": "get_current_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}],
  "tool_choice": "auto",
  "temperature": 0.2,
  "max_completion_tokens": 512,
  "max_tokens": 100,
  "stream": true,
  "stream_options": {"include_usage": true},
  "metadata": {"session": "s-1"}
}`

func TestOpenAIParse(t *testing.T) {
	req, err := OpenAI().Parse([]byte(openAIRequest))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "gpt-4o" || !req.Stream || req.MaxOutput != 512 {
		t.Fatalf("model %q stream %v max %d", req.Model, req.Stream, req.MaxOutput)
	}
	roles := []schemas.Role{"system", "user", "assistant", "tool", "user"}
	if len(req.Messages) != len(roles) {
		t.Fatalf("%d messages", len(req.Messages))
	}
	for i, r := range roles {
		if req.Messages[i].Role != r {
			t.Errorf("message %d: role %s, want %s", i, req.Messages[i].Role, r)
		}
	}
	if tc := req.Messages[2].ToolCalls; len(tc) != 1 || tc[0].ID != "call_abc123" || tc[0].Function.Arguments != `{"location": "Boston, MA"}` {
		t.Errorf("tool calls %+v", tc)
	}
	if !req.Messages[1].Content.IsParts() || req.Messages[4].Name != "ann" || req.Messages[3].ToolCallID != "call_abc123" {
		t.Errorf("messages %+v", req.Messages)
	}
	// max_tokens alone is the limit too.
	req, err = OpenAI().Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":77}`))
	if err != nil || req.MaxOutput != 77 || req.Stream {
		t.Fatalf("%+v %v", req, err)
	}
}

func TestOpenAIParseRefuses(t *testing.T) {
	for _, body := range []string{
		``,
		`[]`,
		`{"model":"m"}`,
		`{"model":"m","messages":null}`,
		`{"model":"m","messages":{}}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","messages":["hi"]}`,
		`{"model":"m","messages":[{"role":"robot","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user"}]}`,
		`{"model":"m","messages":[{"role":"tool","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`,
		`{"model":7,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"9"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"messages":[]}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		// Tool calls and results that do not pair up.
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"a","content":"r"}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"x"},{"role":"tool","tool_call_id":"a","content":"r"}]}`,
	} {
		_, err := OpenAI().Parse([]byte(body))
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v, want a bad request", body, err)
		}
	}
}

func TestOpenAIRoundTrip(t *testing.T) {
	body := strings.Replace(openAIRequest, `"developer"`, `"system"`, 1)
	req, err := OpenAI().Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := OpenAI().Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, []byte(body)) {
		t.Fatalf("round trip changed the request:\n%s", out)
	}
	// The bytes before the messages are the client's.
	head := body[:strings.Index(body, `"messages"`)]
	if !strings.HasPrefix(string(out), head) || !strings.HasSuffix(string(out), body[strings.Index(body, `"tools"`)-4:]) {
		t.Fatalf("bytes around messages changed:\n%s", out)
	}
}

func TestOpenAIBuildSendsTheContextWithoutMetadata(t *testing.T) {
	req, err := OpenAI().Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"old"}],"temperature":1}`))
	if err != nil {
		t.Fatal(err)
	}
	gen := uint64(3)
	msgs := []schemas.Message{
		{Role: "user", Content: schemas.Text("summary"), Tokens: 9, Meta: map[string]string{"pin": "true"}, ContextGeneration: &gen},
		{Role: "user", Content: schemas.Text("new")},
	}
	out, err := OpenAI().Build(req, wiretest.ContextOf(msgs))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":"summary"},{"role":"user","content":"new"}],"temperature":1}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
}

func TestOpenAIReply(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		want  string // the message as encoded
		usage *wire.Usage
	}{
		{"text with cached usage", `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion", "created": 1741569952, "model": "gpt-4.1-2025-04-14",
  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I assist you today?", "refusal": null, "annotations": []}, "logprobs": null, "finish_reason": "stop"}],
  "usage": {"prompt_tokens": 2006, "completion_tokens": 10, "total_tokens": 2016, "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}},
  "service_tier": "default"}`,
			`{"role":"assistant","content":"Hello! How can I assist you today?"}`,
			&wire.Usage{Input: 2006, Output: 10, CacheRead: 1920}},
		{"tool calls", `{"id":"chatcmpl-abc","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,
  "tool_calls":[{"id":"call_abc123","type":"function","function":{"name":"get_current_weather","arguments":"{\n\"location\": \"Boston, MA\"\n}"}}]},"finish_reason":"tool_calls"}],
  "usage":{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99}}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc123","type":"function","function":{"name":"get_current_weather","arguments":"{\n\"location\": \"Boston, MA\"\n}"}}]}`,
			&wire.Usage{Input: 82, Output: 17}},
		{"refusal", `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`,
			`{"role":"assistant","content":"I can't help with that."}`, nil},
		{"reasoning of a compatible server is not kept", `{"choices":[{"message":{"role":"assistant","content":"4","reasoning_content":"2+2","annotations":[]}}]}`,
			`{"role":"assistant","content":"4"}`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, u, err := OpenAI().Reply([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			enc, _ := m.Encode()
			if string(enc) != c.want {
				t.Errorf("got  %s\nwant %s", enc, c.want)
			}
			if !reflect.DeepEqual(u, c.usage) {
				t.Errorf("usage %+v, want %+v", u, c.usage)
			}
		})
	}
	for _, bad := range []string{``, `{}`, `{"choices":[]}`, `{"choices":[{"message":{"tool_calls":[{"id":"","function":{"name":"f"}}]}}]}`} {
		if _, _, err := OpenAI().Reply([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// feed sends each "data: ..." event of a stream to s.
func feed(t *testing.T, s wire.Stream, events ...string) {
	t.Helper()
	for _, e := range events {
		if err := s.Event("", []byte(e)); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
	}
}

func TestOpenAIStream(t *testing.T) {
	s := OpenAI().NewStream()
	feed(t, s,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":1,"delta":{"content":"other choice"},"finish_reason":null}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"check."},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"loc"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ation\": \"Paris\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"prompt_tokens_details":{"cached_tokens":64}}}`,
	)
	if s.Done() {
		t.Fatal("done before [DONE]")
	}
	if _, _, err := s.Result(); err == nil {
		t.Fatal("a result before [DONE]")
	}
	feed(t, s, `[DONE]`)
	if !s.Done() || s.Failed() {
		t.Fatalf("done %v failed %v", s.Done(), s.Failed())
	}
	m, u, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := m.Encode()
	want := `{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"location\": \"Paris\"}"}},{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}`
	if string(enc) != want {
		t.Fatalf("got  %s\nwant %s", enc, want)
	}
	if *u != (wire.Usage{Input: 120, Output: 30, CacheRead: 64}) {
		t.Fatalf("usage %+v", u)
	}
}

func TestOpenAIStreamToolCallsOnly(t *testing.T) {
	s := OpenAI().NewStream()
	feed(t, s,
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"ls","arguments":"{}"}}]}}]}`,
		`[DONE]`)
	m, u, err := s.Result()
	if err != nil || u != nil {
		t.Fatal(err, u)
	}
	if !m.Content.IsNull() || len(m.ToolCalls) != 1 {
		t.Fatalf("%+v", m)
	}
}

// Servers that leave out the index, or number every call 0, still give each call
// its own id, name and arguments.
func TestOpenAIStreamCallsWithoutIndex(t *testing.T) {
	for name, events := range map[string][]string{
		"no index": {
			`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"ls","arguments":"{\"p\":"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"pwd","arguments":"{}"}}]}}]}`,
		},
		"every call 0": {
			`{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"pwd","arguments":"{}"}}]}}]}`,
		},
	} {
		s := OpenAI().NewStream()
		feed(t, s, append(events, `[DONE]`)...)
		m, _, err := s.Result()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		enc, _ := json.Marshal(m.ToolCalls)
		want := `[{"id":"call_a","type":"function","function":{"name":"ls","arguments":"{\"p\":1}"}},{"id":"call_b","type":"function","function":{"name":"pwd","arguments":"{}"}}]`
		if string(enc) != want {
			t.Errorf("%s: got %s", name, enc)
		}
	}
}

func TestOpenAIStreamFailed(t *testing.T) {
	s := OpenAI().NewStream()
	feed(t, s, `{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
		`{"error":{"message":"The server had an error while processing your request.","type":"server_error"}}`)
	if !s.Failed() || s.Done() {
		t.Fatalf("failed %v done %v", s.Failed(), s.Done())
	}
	if _, _, err := s.Result(); err == nil {
		t.Fatal("a result from a failed stream")
	}
	if err := OpenAI().NewStream().Event("", []byte(`not json`)); err == nil {
		t.Fatal("accepted a data line that is not JSON")
	}
}

// The error event the proxy writes into a broken stream is an error to go-openai's
// client, not the end of the stream.
func TestOpenAIStreamErrorReachesGoOpenAI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n")
		w.Write(OpenAI().StreamError("upstream connection lost"))
	}))
	defer srv.Close()
	cfg := openai.DefaultConfig("k")
	cfg.BaseURL = srv.URL + "/v1"
	st, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(context.Background(), openai.ChatCompletionRequest{
		Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Recv()
	if err != nil || first.Choices[0].Delta.Content != "Hel" {
		t.Fatalf("%+v %v", first, err)
	}
	_, err = st.Recv()
	if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "upstream connection lost") {
		t.Fatalf("after the error event: %v", err)
	}
	// And it is the API's error event to the stream accumulator.
	s := OpenAI().NewStream()
	ev := strings.TrimSuffix(strings.TrimPrefix(string(OpenAI().StreamError("x")), "data: "), "\n\n")
	feed(t, s, ev)
	if !s.Failed() {
		t.Fatal("the proxy's own error event is not a failure")
	}
}
