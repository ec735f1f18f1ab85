package llm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/summarizer/summary"
)

// Issue 18: a refusal for length says the model's window and the request's size in the
// words of each kind of server; the error returned by Summarize (through the real
// go-openai client) hands them to the worker, which sizes its next requests by them.
func TestContextLimitFromRefusals(t *testing.T) {
	tests := []struct {
		name                    string
		status                  int
		body                    string
		wantWindow, wantRequest int
	}{
		{"openai", 400, `{"error":{"message":"This model's maximum context length is 3000 tokens. However, you requested 8755 tokens (7905 in the messages, 850 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, 3000, 8755},
		{"vllm", 400, `{"object":"error","message":"This model's maximum context length is 2048 tokens. However, you requested 2300 tokens (2100 in the messages, 200 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, 2048, 2300},
		{"litellm", 400, `{"error":{"message":"This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`, 4096, 5000},
		{"llama.cpp", 400, `{"error":{"code":400,"message":"the request exceeds the available context size (4096 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`, 4096, 0},
		{"anthropic wording", 400, `{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum","type":"invalid_request_error"}}`, 200000, 210000},
		{"no numbers", 413, `{"error":{"message":"request entity too large"}}`, 0, 0},
		{"characters are not tokens", 400, `{"error":{"message":"This model's maximum context length is 12000 characters; your messages resulted in 15000.","code":"context_length_exceeded"}}`, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEndpoint(t, reply(tc.status, tc.body))
			s := newSummarizer(t, Config{BaseURL: e.srv.URL})
			_, err := s.Summarize(context.Background(), summary.Input{Messages: conversation()})
			if !errors.Is(err, ErrContextLength) {
				t.Fatalf("got %v; want ErrContextLength", err)
			}
			var cl interface{ ContextLimit() (int, int) }
			if !errors.As(err, &cl) {
				t.Fatalf("%v has no ContextLimit", err)
			}
			if w, r := cl.ContextLimit(); w != tc.wantWindow || r != tc.wantRequest {
				t.Fatalf("got window %d, request %d; want %d, %d", w, r, tc.wantWindow, tc.wantRequest)
			}
		})
	}
}

// The compact form: the transcript shape with CompactPrompt, far shorter than either
// full prompt, its own prompt hash, and the same blocks and defence as the transcript
// shape.
func TestCompactSummarizer(t *testing.T) {
	e := newEndpoint(t, nil)
	s := newSummarizer(t, Config{BaseURL: e.srv.URL + "/v1", Model: "m"})
	c, ok := s.Compact().(*Summarizer)
	if !ok {
		t.Fatal("Compact is not an *llm.Summarizer")
	}
	empty := summary.Input{MaxSummaryTokens: 300}
	full, compact := s.RequestTokens(empty), c.RequestTokens(empty)
	transcript := newSummarizer(t, Config{BaseURL: e.srv.URL, RequestShape: ShapeTranscript}).RequestTokens(empty)
	if compact-300 > (min(full, transcript)-300)/2 {
		t.Fatalf("the compact request takes %d tokens besides its cap; the full ones %d and %d", compact-300, full-300, transcript-300)
	}
	in := summary.Input{SystemPrompt: "You are Ops Bot.", PreviousSummary: "## Goal\nShip 4512.", Messages: conversation(),
		Instructions: "Keep build numbers.", MaxSummaryTokens: 300}
	out, err := c.Summarize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if out.PromptHash != CompactPromptHash(300, in.Instructions) || out.PromptHash == PromptHash(300, in.Instructions) {
		t.Fatalf("prompt hash %q is not the compact prompt's", out.PromptHash)
	}
	r := e.last(t)
	msgs := r.Body.Messages
	if len(msgs) != 2 || msgs[0].Content != compactSystemMessage(300) {
		t.Fatalf("want the compact system message and one user message; got %d messages", len(msgs))
	}
	for _, want := range []string{"<agent_system_prompt>\nYou are Ops Bot.", "Ship 4512.", "<transcript", "Keep build numbers."} {
		if !strings.Contains(msgs[1].Content, want) {
			t.Errorf("user message lacks %q", want)
		}
	}
	if url, model := c.Endpoint(); url != e.srv.URL+"/v1" || model != "m" {
		t.Errorf("endpoint %s %s", url, model)
	}
	if s.cfg.RequestShape != ShapePrefix || s.compact {
		t.Error("Compact changed the summarizer it was made from")
	}
	if w, r := s.RequestTokens(in), c.RequestTokens(in); r >= w {
		t.Errorf("with input the compact request (%d) is not shorter than the full one (%d)", r, w)
	}
}

// Endpoint shows no credentials.
func TestEndpointHidesCredentials(t *testing.T) {
	s := newSummarizer(t, Config{BaseURL: "https://user:hunter2@llm.example.com/v1", Model: "m"})
	if url, _ := s.Endpoint(); strings.Contains(url, "hunter2") || strings.Contains(url, "user") || !strings.Contains(url, "llm.example.com/v1") {
		t.Fatalf("endpoint %q", url)
	}
}
