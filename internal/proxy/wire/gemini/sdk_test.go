// The Gemini wire against Google's own Go SDK (google.golang.org/genai, a test
// dependency of the module).
package gemini_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genai"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/gemini"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

// upstream is a fake Gemini API: it keeps the last request body and answers with
// the body or event stream given.
type upstream struct {
	mu     sync.Mutex
	body   []byte
	path   string
	answer string
	sse    bool
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.body, u.path = b, r.URL.Path+"?"+r.URL.RawQuery
	answer, sse := u.answer, u.sse
	u.mu.Unlock()
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	_, _ = io.WriteString(w, answer)
}

func client(t *testing.T, u *upstream) *genai.Client {
	t.Helper()
	srv := httptest.NewServer(u)
	t.Cleanup(srv.Close)
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{APIKey: "k", Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// history is a conversation as an agent keeps it in the SDK's types: a call without
// an id and its signature, a response with an id of the client's, an image, thoughts.
func history() []*genai.Content {
	return []*genai.Content{
		{Role: "user", Parts: []*genai.Part{{Text: "What is in this picture, and list the files."}, {InlineData: &genai.Blob{MIMEType: "image/png", Data: []byte("\x89PNG")}}}},
		{Role: "model", Parts: []*genai.Part{
			{Text: "**Looking** at the picture", Thought: true},
			{Text: "A cat. Listing the files."},
			{FunctionCall: &genai.FunctionCall{Name: "list_directory", Args: map[string]any{"dir_path": ".", "depth": 2}}, ThoughtSignature: []byte("signature-1")},
		}},
		{Role: "user", Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: "list_directory-1752-ab12", Name: "list_directory", Response: map[string]any{"output": "main.go\ngo.mod"}}}}},
		{Role: "model", Parts: []*genai.Part{{Text: "There are two files."}}},
		{Role: "user", Parts: []*genai.Part{{Text: "Thanks"}}},
	}
}

func config() *genai.GenerateContentConfig {
	budget := int32(-1)
	return &genai.GenerateContentConfig{
		SystemInstruction: &genai.Content{Role: "user", Parts: []*genai.Part{{Text: "You are a CLI agent."}}},
		MaxOutputTokens:   8192,
		Temperature:       genai.Ptr[float32](1),
		ThinkingConfig:    &genai.ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &budget},
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{Name: "list_directory", Description: "Lists a directory.",
			ParametersJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"dir_path": map[string]any{"type": "string"}}}}}}},
	}
}

const reply = `{"candidates":[{"content":{"role":"model","parts":[{"text":"**Done**","thought":true},{"text":"You're welcome."}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":5,"thoughtsTokenCount":7,"totalTokenCount":132},"modelVersion":"gemini-2.5-pro"}`

// The request the SDK sends parses, and builds back to itself; the reply the wire
// reads is the one the SDK reads.
func TestSDKRequestAndReply(t *testing.T) {
	u := &upstream{answer: reply}
	resp, err := client(t, u).Models.GenerateContent(context.Background(), "gemini-2.5-pro", history(), config())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "You're welcome." {
		t.Fatalf("the SDK read %q", resp.Text())
	}
	if !strings.HasSuffix(u.path, "models/gemini-2.5-pro:generateContent?") {
		t.Fatalf("path %s", u.path)
	}
	req, err := gemini.Gemini().Parse(u.body)
	if err != nil {
		t.Fatalf("%v in %s", err, u.body)
	}
	if req.MaxOutput != 8192 || len(req.Messages) != 6 {
		t.Fatalf("max %d, %d messages", req.MaxOutput, len(req.Messages))
	}
	out := wiretest.CheckBuild(t, gemini.Gemini(), req, "contents")
	if out == nil || !wiretest.JSONEqual(t, out, u.body) {
		t.Fatalf("built\n%s\nsent\n%s", out, u.body)
	}
	m, usage, err := gemini.Gemini().Reply([]byte(reply))
	if err != nil || m.Content.String() != "You're welcome." || usage.Output != 12 || usage.Input != 120 {
		t.Fatalf("%v %s %+v", err, m.Content.Raw(), usage)
	}
	// What Build sends the upstream, the SDK's types read back as the same history.
	var sent struct {
		Contents []*genai.Content `json:"contents"`
	}
	if err := json.Unmarshal(out, &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Contents) != 5 || string(sent.Contents[1].Parts[2].ThoughtSignature) != "signature-1" ||
		sent.Contents[1].Parts[2].FunctionCall.ID != "" || sent.Contents[2].Parts[0].FunctionResponse.ID != "list_directory-1752-ab12" ||
		string(sent.Contents[0].Parts[1].InlineData.Data) != "\x89PNG" {
		b, _ := json.Marshal(sent.Contents)
		t.Fatalf("sent %s", b)
	}
}

// The SDK reads a streamed answer the wire puts back together into the same turn,
// and the wire's stream error is an error the SDK reports.
func TestSDKStream(t *testing.T) {
	events := []wiretest.SSEEvent{
		{Data: `{"candidates":[{"content":{"parts":[{"text":"**Plan**","thought":true}],"role":"model"},"index":0}]}`},
		{Data: `{"candidates":[{"content":{"parts":[{"text":"Listing "}],"role":"model"},"index":0}]}`},
		{Data: `{"candidates":[{"content":{"parts":[{"text":"again."}],"role":"model"},"index":0}]}`},
		{Data: `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"list_directory","args":{"dir_path":"."}},"thoughtSignature":"c2lnLTI="}],"role":"model"},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":130,"candidatesTokenCount":9,"totalTokenCount":139}}`},
	}
	stream := wiretest.Stream(events)
	u := &upstream{answer: stream, sse: true}
	var (
		text  strings.Builder
		calls []*genai.FunctionCall
		sig   []byte
	)
	for chunk, err := range client(t, u).Models.GenerateContentStream(context.Background(), "gemini-2.5-pro", history(), config()) {
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range chunk.Candidates[0].Content.Parts {
			if !p.Thought {
				text.WriteString(p.Text)
			}
			if p.FunctionCall != nil {
				calls = append(calls, p.FunctionCall)
				sig = p.ThoughtSignature
			}
		}
	}
	if !strings.Contains(u.path, ":streamGenerateContent") || !strings.Contains(u.path, "alt=sse") {
		t.Fatalf("path %s", u.path)
	}
	s := gemini.Gemini().NewStream()
	if _, err := wire.NewSSESplitter(0, s.Event).Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	m, usage, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	if m.Content.String() != text.String() || len(m.ToolCalls) != len(calls) || m.ToolCalls[0].Function.Name != calls[0].Name ||
		string(sig) != "sig-2" || !strings.Contains(string(m.Extra), `"thoughtSignature":"c2lnLTI="`) || usage.Input != 130 {
		enc, _ := m.Encode()
		t.Fatalf("wire %s, SDK text %q calls %d sig %q", enc, text.String(), len(calls), sig)
	}
	// The turn as an agent keeps the SDK's chunks in its history (the thought text and
	// the answer text joined) and sends it back is the stored one (but for
	// ExtraUpstream, which the proxy's digest chain does not read).
	back := &genai.Content{Role: "model", Parts: []*genai.Part{{Text: "**Plan**", Thought: true}, {Text: text.String()}, {FunctionCall: calls[0], ThoughtSignature: sig}}}
	b, _ := json.Marshal(map[string]any{"contents": append(history(), back, &genai.Content{Role: "user", Parts: []*genai.Part{
		{FunctionResponse: &genai.FunctionResponse{Name: "list_directory", Response: map[string]any{"output": "main.go"}}}}})})
	req, err := gemini.Gemini().Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	got := req.Messages[len(req.Messages)-2]
	x, _ := got.Encode()
	y, _ := m.Encode()
	// The same message but for the mark of the upstream's reply.
	if string(x) != strings.Replace(string(y), `,"gemini_upstream":true`, "", 1) {
		t.Fatalf("sent back\n%s\nstored\n%s", x, y)
	}

	// The proxy's stream error.
	u.mu.Lock()
	u.answer = string(gemini.Gemini().StreamError("the upstream broke"))
	u.mu.Unlock()
	var failed error
	for _, err := range client(t, u).Models.GenerateContentStream(context.Background(), "gemini-2.5-pro", history(), config()) {
		if err != nil {
			failed = err
			break
		}
	}
	var apiErr genai.APIError
	if !errors.As(failed, &apiErr) || apiErr.Code != 500 || apiErr.Status != "INTERNAL" || apiErr.Message != "the upstream broke" {
		t.Fatalf("the SDK on the wire's stream error: %#v", failed)
	}
}
