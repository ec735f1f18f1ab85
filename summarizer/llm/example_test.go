package llm_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
)

func Example() {
	// A stand-in for any OpenAI-compatible endpoint.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"## Goal\nDeploy build 4512 to staging."}}],`+
			`"usage":{"prompt_tokens":812,"completion_tokens":14,"total_tokens":826,"prompt_tokens_details":{"cached_tokens":640}}}`)
	}))
	defer srv.Close()

	s, err := llm.New(llm.Config{BaseURL: srv.URL, APIKey: "sk-…"}) // "/v1" is added
	if err != nil {
		fmt.Println(err)
		return
	}
	// The request starts like the agent's own: its pinned messages, then the messages
	// to summarize; the instruction comes last.
	out, err := s.Summarize(context.Background(), summary.Input{
		Pinned: []schemas.Message{
			{Role: schemas.RoleSystem, Content: schemas.Text("You are Ops Bot.")},
		},
		Messages: []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("Deploy build 4512 to staging.")},
		},
		MaxSummaryTokens: 1024,
	})
	if err != nil {
		fmt.Println(err, llm.Retryable(err))
		return
	}
	fmt.Println(out.Summary)
	fmt.Println(out.Model, out.Usage.PromptTokens, out.Usage.CachedTokens, out.Usage.CompletionTokens, out.PromptHash == llm.PrefixPromptHash(1024, ""))
	// Output:
	// ## Goal
	// Deploy build 4512 to staging.
	// gpt-4o-mini-2024-07-18 812 640 14 true
}

// The prompt hash a result carries names the instruction of the request shape and the
// operator's instructions; the conversation is not part of it.
func ExamplePrefixPromptHash() {
	plain := llm.PrefixPromptHash(1024, "")
	withWishes := llm.PrefixPromptHash(1024, "Keep every build number.")
	fmt.Println(len(plain), plain == withWishes, plain == llm.PromptHash(1024, ""))
	// Output:
	// 8 false false
}
