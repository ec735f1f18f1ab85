package fakellm

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

func client(f *LLM) *openai.Client {
	cc := openai.DefaultConfig("test-key")
	cc.BaseURL = f.URL() + "/v1"
	return openai.NewClientWithConfig(cc)
}

func ask(f *LLM, text string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client(f).CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model:    "m",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}},
	})
	if err != nil {
		return "", err
	}
	return resp.Choices[0].Message.Content, nil
}

func status(err error) int {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		return apiErr.HTTPStatusCode
	}
	return 0
}

// The summary keeps the needles of the input, sorted and once each; the knobs answer
// as documented, and the counts say what was asked.
func TestSummaryAndKnobs(t *testing.T) {
	f := New(t)
	msgs, needles := NeedleConversation(2)
	if len(msgs) != 9 || len(needles) != 2 || !strings.Contains(msgs[1].Content.String(), needles[0]) {
		t.Fatalf("NeedleConversation(2) = %d messages, needles %v", len(msgs), needles)
	}
	got, err := ask(f, "see NEEDLE-b2 and NEEDLE-a1, again NEEDLE-b2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "\nNEEDLE-a1\nNEEDLE-b2") {
		t.Errorf("summary %q; want the needles sorted, once each", got)
	}

	f.Set(func(f *LLM) { f.Failures = 1 })
	if _, err := ask(f, "x"); status(err) != http.StatusInternalServerError {
		t.Errorf("with a failure: %v; want 500", err)
	}
	if _, err := ask(f, "x"); err != nil {
		t.Errorf("after the failure: %v", err)
	}
	f.Set(func(f *LLM) { f.MaxChars = 5 })
	_, err = ask(f, "longer than five")
	if status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "maximum context length") {
		t.Errorf("over MaxChars: %v; want 400 context_length_exceeded", err)
	}
	f.Set(func(f *LLM) { f.MaxChars, f.Pad = 0, 20 })
	if got, err := ask(f, "pad"); err != nil || !strings.HasSuffix(got, "\npadding padding padd") {
		t.Errorf("with Pad 20: %q, %v", got, err)
	}
	if calls, refused := f.Counts(); calls != 5 || refused != 1 || f.Calls() != calls || !strings.Contains(f.InputsWith("NEEDLE-a1"), "NEEDLE-b2") || strings.Contains(f.AllInputs(), "longer") {
		t.Errorf("calls %d, refused %d, inputs %q; want 5, 1 and the refused one left out", calls, refused, f.AllInputs())
	}
}

// Block holds requests until Release.
func TestBlockAndRelease(t *testing.T) {
	f := New(t)
	f.Release(true)
	done := make(chan error, 1)
	go func() { _, err := ask(f, "held"); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for f.Held() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the block")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a held request answered: %v", err)
	default:
	}
	f.Release(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Window refuses a request over it as OpenAI does, naming the window and the request's
// size (its messages at chars/4, 4 a message, 3 for the reply, and the completion
// tokens reserved); a request within it is answered.
func TestWindow(t *testing.T) {
	f := New(t)
	f.Set(func(f *LLM) { f.Window = 16 })
	text := strings.Repeat("x", 40) // 10 tokens: 3 + 4 + 10 = 17
	_, err := ask(f, text)
	if status(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "maximum context length is 16 tokens. However, you requested 17 tokens") {
		t.Fatalf("over the window: %v; want 400 naming 16 and 17 tokens", err)
	}
	f.Set(func(f *LLM) { f.Window = 17 })
	if _, err := ask(f, text); err != nil {
		t.Fatalf("within the window: %v", err)
	}
	if calls, refused := f.Counts(); calls != 2 || refused != 1 {
		t.Fatalf("calls %d, refused %d; want 2, 1", calls, refused)
	}
}
