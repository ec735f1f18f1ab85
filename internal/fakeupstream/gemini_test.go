package fakeupstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/genai"
)

func geminiClient(t *testing.T, s *Server) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(ctx(t), &genai.ClientConfig{APIKey: "gk-test", Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: s.URL(), APIVersion: "v1beta"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// geminiText is the text parts of resp joined (genai's Text logs a warning when
// there are function calls too).
func geminiText(resp *genai.GenerateContentResponse) string {
	var out string
	for _, p := range resp.Candidates[0].Content.Parts {
		out += p.Text
	}
	return out
}

var geminiWeather = []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{Name: "get_weather",
	ParametersJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}}}

// google.golang.org/genai reads a non-streamed reply with text and a function call
// whose part carries a thoughtSignature; the next request, which sends the call back
// with its signature and the function's response, is billed the shared prefix as
// cached (cachedContentTokenCount), as the other wires are.
func TestGeminiNonStreamedToolCallAndCachedPrefix(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "checking", ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}, Reply{Text: "sunny"})
	c := geminiClient(t, s)
	cfg := &genai.GenerateContentConfig{SystemInstruction: genai.NewContentFromText("be brief", genai.RoleUser), Tools: geminiWeather}
	contents := []*genai.Content{genai.NewContentFromText("weather in Oslo?", genai.RoleUser)}
	resp, err := c.Models.GenerateContent(ctx(t), "gemini-x", contents, cfg)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.FunctionCalls()
	parts := resp.Candidates[0].Content.Parts
	if geminiText(resp) != "checking" || len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Args["city"] != "Oslo" ||
		resp.Candidates[0].FinishReason != genai.FinishReasonStop || len(parts) != 2 {
		t.Fatalf("response %+v", resp)
	}
	first := s.Agent()[0]
	if string(parts[1].ThoughtSignature) != "fakeupstream-thought/1" || len(first.Signatures) != 1 || first.Signatures[0] != GeminiSignature(1) {
		t.Fatalf("signature %q, recorded %v", parts[1].ThoughtSignature, first.Signatures)
	}
	u := resp.UsageMetadata
	if u.CachedContentTokenCount != 0 || u.PromptTokenCount == 0 || u.CandidatesTokenCount == 0 || u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount {
		t.Fatalf("first usage %+v", u)
	}
	if first.API != Gemini || first.Model != "gemini-x" || first.Stream || first.Path != "/v1beta/models/gemini-x:generateContent" ||
		first.Header.Get("x-goog-api-key") != "gk-test" || !strings.Contains(string(first.System), "be brief") ||
		len(first.Messages) != 1 || Text(first.Messages[0]) != "weather in Oslo?" || ToolNames(first)[0] != "get_weather" {
		t.Fatalf("recorded %+v", first)
	}
	contents = append(contents, resp.Candidates[0].Content,
		genai.NewContentFromFunctionResponse("get_weather", map[string]any{"output": "12C"}, genai.RoleUser))
	resp, err = c.Models.GenerateContent(ctx(t), "gemini-x", contents, cfg)
	if err != nil {
		t.Fatal(err)
	}
	second := s.Agent()[1]
	shared := commonPrefix(conversationBytes(first), conversationBytes(second))
	if shared == 0 || resp.UsageMetadata.CachedContentTokenCount != int32(tokens(shared)) ||
		resp.UsageMetadata.PromptTokenCount != int32(tokens(len(conversationBytes(second)))) || geminiText(resp) != "sunny" {
		t.Fatalf("usage %+v, want %d cached; reply %q", resp.UsageMetadata, tokens(shared), geminiText(resp))
	}
	if !bytes.Contains(second.Messages[1], []byte(`"thoughtSignature":"`+GeminiSignature(1)+`"`)) || Text(second.Messages[2]) != "12C" ||
		!EndsWithToolResult(second) {
		t.Fatalf("second request %s", second.Body)
	}
}

// genai's stream: the text in pieces, the function call whole with its signature,
// the last chunk with the finish reason and the full usage.
func TestGeminiStreamed(t *testing.T) {
	s := New(t)
	s.Push(Reply{Text: "a fairly long reply, cut in pieces", ToolCalls: []ToolCall{{ID: "fc-1", Name: "get_weather", Arguments: `{"city":"Bergen"}`}}})
	var text string
	var calls []*genai.FunctionCall
	var sig []byte
	var last *genai.GenerateContentResponse
	n := 0
	for resp, err := range geminiClient(t, s).Models.GenerateContentStream(ctx(t), "gemini-x",
		[]*genai.Content{genai.NewContentFromText("hi", genai.RoleUser)}, &genai.GenerateContentConfig{Tools: geminiWeather}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		text += geminiText(resp)
		calls = append(calls, resp.FunctionCalls()...)
		for _, p := range resp.Candidates[0].Content.Parts {
			if p.FunctionCall != nil {
				sig = p.ThoughtSignature
			}
		}
		last = resp
	}
	r := s.Agent()[0]
	if text != "a fairly long reply, cut in pieces" || len(calls) != 1 || calls[0].ID != "fc-1" || calls[0].Args["city"] != "Bergen" ||
		string(sig) != "fakeupstream-thought/1" || n != len(pieces(text))+1 || last.Candidates[0].FinishReason != genai.FinishReasonStop ||
		last.UsageMetadata.CandidatesTokenCount == 0 || last.UsageMetadata.CandidatesTokenCount != int32(r.Usage.Output) {
		t.Fatalf("text %q calls %v signature %q, %d chunks, last %+v", text, calls, sig, n, last)
	}
	if !r.Stream || r.Path != "/v1beta/models/gemini-x:streamGenerateContent" || r.Query.Get("alt") != "sse" {
		t.Fatalf("recorded %s %v", r.Path, r.Query)
	}
}

// A scripted 429 reaches genai as an APIError in Gemini's shape, with its retry
// delay; a broken stream is an error; the error event is an APIError; the key may
// come as ?key=.
func TestGeminiErrors(t *testing.T) {
	s := New(t)
	c := geminiClient(t, s)
	hi := []*genai.Content{genai.NewContentFromText("hi", genai.RoleUser)}
	s.Push(Reply{Status: 429, RetryAfter: "7"})
	_, err := c.Models.GenerateContent(ctx(t), "gemini-x", hi, nil)
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 429 || apiErr.Status != "RESOURCE_EXHAUSTED" || len(apiErr.Details) != 1 ||
		apiErr.Details[0]["retryDelay"] != "7s" {
		t.Fatalf("err %v", err)
	}
	for _, rep := range []Reply{{Text: "one two three four five six", BreakAfter: 2}, {Text: "one two three four five six", ErrorEventAfter: 2}} {
		s.Push(rep)
		var got error
		for _, err := range c.Models.GenerateContentStream(ctx(t), "gemini-x", hi, nil) {
			if err != nil {
				got = err
				break
			}
		}
		if got == nil {
			t.Fatalf("%+v: the stream ended cleanly", rep)
		}
		if rep.ErrorEventAfter > 0 && (!errors.As(got, &apiErr) || apiErr.Code != 500 || apiErr.Status != "INTERNAL") {
			t.Fatalf("error event read as %v", got)
		}
	}
	resp, err := http.Post(s.URL()+"/v1beta/models/gemini-x:generateContent?key=gk-query", "application/json",
		strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := s.Agent()[len(s.Agent())-1]; resp.StatusCode != 200 || r.Query.Get("key") != "gk-query" {
		t.Fatalf("%d %v", resp.StatusCode, r.Query)
	}
	resp, err = http.Post(s.URL()+"/v1beta/models/gemini-x:generateContent", "application/json", strings.NewReader(`{"contents":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct {
			Code   int
			Status string
		}
	}
	if json.Unmarshal(body, &e) != nil || resp.StatusCode != 400 || e.Error.Code != 400 || e.Error.Status != "INVALID_ARGUMENT" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// countTokens counts the conversation as usage does.
func TestGeminiCountTokens(t *testing.T) {
	s := New(t)
	resp, err := geminiClient(t, s).Models.CountTokens(ctx(t), "gemini-x", []*genai.Content{genai.NewContentFromText("hello there", genai.RoleUser)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[0]; resp.TotalTokens != int32(tokens(len(conversationBytes(r)))) || resp.TotalTokens == 0 {
		t.Fatalf("%d tokens", resp.TotalTokens)
	}
	// The REST form that wraps the whole request counts the same.
	hr, err := http.Post(s.URL()+"/v1beta/models/gemini-x:countTokens", "application/json",
		strings.NewReader(`{"generateContentRequest":{"model":"models/gemini-x","contents":[{"parts":[{"text":"hello there"}],"role":"user"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var count struct{ TotalTokens int32 }
	_ = json.NewDecoder(hr.Body).Decode(&count)
	hr.Body.Close()
	if hr.StatusCode != 200 || count.TotalTokens != resp.TotalTokens {
		t.Fatalf("%d: %d tokens, want %d", hr.StatusCode, count.TotalTokens, resp.TotalTokens)
	}
}
