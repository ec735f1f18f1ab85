package eval

import (
	"testing"

	"github.com/compactor/compactor/summarizer/llm"
)

// The eval's call counter hands the worker what it reads of an LLM summarizer: its
// request sizes, its endpoint (to learn a small window) and its compact form, itself
// counted.
func TestCountingKeepsTheLLMForm(t *testing.T) {
	sum, err := llm.New(llm.Config{BaseURL: "http://127.0.0.1:1/v1", APIKey: "k", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	wrapped := newCounting().wrap(sum)
	form, ok := wrapped.(llmForm)
	if !ok {
		t.Fatalf("wrapped %T has no endpoint or compact form", wrapped)
	}
	if url, model := form.Endpoint(); url != "http://127.0.0.1:1/v1" || model != "m" {
		t.Errorf("endpoint = %q %q", url, model)
	}
	if _, ok := form.Compact().(llmSummarizer); !ok {
		t.Errorf("compact form %T is not counted", form.Compact())
	}
}
