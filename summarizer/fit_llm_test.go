package summarizer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/llm"
)

// windowLLM is an OpenAI-compatible endpoint whose model has a context window of
// window tokens: a request whose messages (chars/4 each, plus 4 per message and 3 for
// the reply) and reserved completion tokens exceed it is refused with HTTP 400 and the
// OpenAI error code context_length_exceeded. It records the size of every request.
type windowLLM struct {
	window int
	// silent refusals name neither the window nor the request's size.
	silent bool
	mu     sync.Mutex
	sizes  []int  // every request, in order
	over   []bool // whether it was refused
	text   strings.Builder
}

func newWindowLLM(t *testing.T, window int) (*windowLLM, *llm.Summarizer) {
	t.Helper()
	w := &windowLLM{window: window}
	srv := httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(srv.Close)
	sum, err := llm.New(llm.Config{BaseURL: srv.URL, Model: "small-local-model"})
	if err != nil {
		t.Fatal(err)
	}
	return w, sum
}

func (w *windowLLM) serve(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		MaxTokens           int `json:"max_tokens"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
		Messages            []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	size := 3 + req.MaxTokens + req.MaxCompletionTokens
	for _, m := range req.Messages {
		size += 4 + (utf8.RuneCountInString(m.Content)+3)/4
	}
	w.mu.Lock()
	w.sizes = append(w.sizes, size)
	w.over = append(w.over, size > w.window)
	if size <= w.window {
		for _, m := range req.Messages {
			w.text.WriteString(m.Content)
		}
	}
	w.mu.Unlock()
	rw.Header().Set("Content-Type", "application/json")
	if size > w.window {
		rw.WriteHeader(http.StatusBadRequest)
		if w.silent {
			fmt.Fprint(rw, `{"error":{"message":"prompt is too long","type":"invalid_request_error","code":"context_length_exceeded"}}`)
			return
		}
		fmt.Fprintf(rw, `{"error":{"message":"This model's maximum context length is %d tokens. However, you requested %d tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, w.window, size)
		return
	}
	// A summary about as long as the model may write (90% of its cap), so merging
	// really has to fit several summaries into one request.
	user := req.Messages[len(req.Messages)-1].Content
	summary := fmt.Sprintf("## Goal\nsummary of %d messages.\n", strings.Count(user, "<message "))
	summary += strings.Repeat("fact ", max(0, (req.MaxTokens+req.MaxCompletionTokens)*4*9/10/5-10))
	out, _ := json.Marshal(map[string]any{"model": "small-local-model", "choices": []any{map[string]any{
		"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": summary}}}})
	_, _ = rw.Write(out)
}

// refusedThenSmaller checks that every request sent after a refusal is smaller than the
// refused one: a retry never repeats what the endpoint said was too long.
func (w *windowLLM) refusedThenSmaller(t *testing.T) (refused int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	limit := -1
	for i, size := range w.sizes {
		if limit >= 0 && size >= limit {
			t.Fatalf("request %d has %d tokens, not less than the %d-token request refused before it (sizes %v)", i, size, limit, w.sizes)
		}
		if w.over[i] {
			refused++
			limit = size
		}
	}
	return refused
}

func (w *windowLLM) stats() (n, refused, largest int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range w.sizes {
		if w.over[i] {
			refused++
		}
		largest = max(largest, s)
	}
	return len(w.sizes), refused, largest
}

func messages(n, chars int, word string) []schemas.Message {
	msgs := make([]schemas.Message, n)
	for i := range msgs {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		text := fmt.Sprintf("%s-%d ", word, i)
		text += strings.Repeat("x", max(0, chars-len(text)))
		msgs[i] = schemas.Message{Role: role, Content: schemas.Text(text)}
	}
	return msgs
}

// Issue 17: ten thousand tiny messages through the real map-reduce, with a model that
// refuses every request over its window: it completes, merging in as many levels as it
// takes, no request is over the window, and every message reached the model.
func TestTinyMessagesAreSummarizedWithinTheWindow(t *testing.T) {
	for _, window := range []int{128000, 16000, 5000} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			s := policy.Defaults()
			s.SummarizerContextWindow = window
			w, sum := newWindowLLM(t, window)
			msgs := messages(10000, 12, "m")
			in := summarizer.Input{Conversation: "c", Messages: msgs, SystemPrompt: "You are a helpful agent.",
				PreviousSummary: "## Goal\nearlier facts", MaxSummaryTokens: s.Budget().SummaryCap() * 85 / 100}
			out, err := summarizer.SummarizeToFit(context.Background(), sum, in, window)
			if err != nil {
				t.Fatal(err)
			}
			n, refused, largest := w.stats()
			if refused > 0 || largest > window {
				t.Fatalf("%d of %d requests refused, the largest %d tokens in a window of %d", refused, n, largest, window)
			}
			if out.Summary == "" {
				t.Fatal("empty summary")
			}
			for _, i := range []int{0, 1, 4999, 9998, 9999} {
				if !strings.Contains(w.text.String(), fmt.Sprintf("m-%d ", i)) {
					t.Fatalf("message %d never reached the model", i)
				}
			}
			if !strings.Contains(w.text.String(), "earlier facts") {
				t.Fatal("the previous summary never reached the model")
			}
			t.Logf("%d requests, the largest %d tokens", n, largest)
		})
	}
}

// Issue 3: a 1M-token agent window beside a 5,000-token summarizer. The summary cap
// the worker asks for comes from the settings (Budget().SummaryCap(), the same the
// guard checks), and the summarizer fits it beside its input.
func TestSmallSummarizerBesideALargeAgentWindow(t *testing.T) {
	r, err := policy.NewResolver(policy.Layer{"context_window": "1000000", "summarizer_context_window": "5000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := r.Base()
	w, sum := newWindowLLM(t, s.SummarizerContextWindow)
	in := summarizer.Input{Conversation: "c", Messages: messages(300, 400, "needle"),
		PreviousSummary: strings.Repeat("an earlier fact. ", 200), MaxSummaryTokens: s.Budget().SummaryCap() * 85 / 100}
	out, err := summarizer.SummarizeToFit(context.Background(), sum, in, s.SummarizerContextWindow)
	if err != nil {
		t.Fatal(err)
	}
	n, refused, largest := w.stats()
	if refused > 0 || largest > s.SummarizerContextWindow {
		t.Fatalf("%d of %d requests refused, the largest %d tokens", refused, n, largest)
	}
	if out.Summary == "" {
		t.Fatal("empty summary")
	}
}

// Issue 13: the endpoint's real window is smaller than the one configured. Every
// retry after context_length_exceeded sends strictly less than the request refused,
// also when the input is one message; when even the floor does not fit, the error is
// ErrNothingFits, which the worker does not retry. Issue 18: a refusal that names the
// window is the last one (refusals at most); one that names nothing halves the request.
func TestContextLengthRetriesSendLess(t *testing.T) {
	tests := []struct {
		name     string
		msgs     []schemas.Message
		real     int // the endpoint's window
		silent   bool
		wantErr  error
		refusals int // at least
		most     int // at most (0: no bound)
	}{
		{"many messages", messages(40, 1600, "needle"), 3000, false, nil, 1, 1},
		{"one large message", messages(1, 28000, "needle"), 3000, false, nil, 1, 1},
		{"many messages, silent refusals", messages(40, 1600, "needle"), 3000, true, nil, 2, 0},
		{"one large message, silent refusals", messages(1, 28000, "needle"), 3000, true, nil, 2, 0},
		{"nothing fits", messages(40, 1600, "needle"), 1000, false, summarizer.ErrNothingFits, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, sum := newWindowLLM(t, tc.real)
			w.silent = tc.silent
			in := summarizer.Input{Conversation: "c", Messages: tc.msgs, MaxSummaryTokens: 200}
			out, err := summarizer.SummarizeToFit(context.Background(), sum, in, 128000)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v; want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && out.Summary == "" {
				t.Fatal("empty summary")
			}
			if got := w.refusedThenSmaller(t); got < tc.refusals || (tc.most > 0 && got > tc.most) {
				t.Fatalf("%d refusals; want %d to %d", got, tc.refusals, tc.most)
			}
			if tc.wantErr != nil && !errors.Is(err, summarizer.ErrContextLength) {
				t.Fatalf("%v does not say the context length was exceeded", err)
			}
			n, _, _ := w.stats()
			t.Logf("%d requests: %v", n, w.sizes)
		})
	}
}

// A previous summary larger than a whole request (say, written under a larger cap
// before the summarizer's window shrank) is merged in pieces like a part: nothing of it
// is cut, and no request is over the window.
func TestPreviousSummaryLargerThanARequest(t *testing.T) {
	w, sum := newWindowLLM(t, 5000)
	var prev strings.Builder
	for i := range 800 {
		fmt.Fprintf(&prev, "- earlier fact %d: the build id is B-%05d\n", i, i)
	}
	in := summarizer.Input{Conversation: "c", Messages: messages(6, 200, "new"), PreviousSummary: prev.String(), MaxSummaryTokens: 500}
	out, err := summarizer.SummarizeToFit(context.Background(), sum, in, 5000)
	if err != nil {
		t.Fatal(err)
	}
	n, refused, largest := w.stats()
	if refused > 0 || largest > 5000 || out.Summary == "" {
		t.Fatalf("%d of %d requests refused, the largest %d tokens", refused, n, largest)
	}
	for _, want := range []string{"B-00000", "B-00400", "B-00799", "new-0 ", "new-5 "} {
		if !strings.Contains(w.text.String(), want) {
			t.Fatalf("%q never reached the model", want)
		}
	}
}

// Issue 18: an endpoint whose model has a 2,000-token window, configured as 128,000,
// with everything that crowds a request: a long agent system prompt, operator
// instructions, a previous summary larger than a request and a message larger than a
// chunk. After the one refusal that names the window, every request fits it, the
// summary is the LLM's, and everything reached the model.
func TestTwoThousandTokenWindowWithACrowdedRequest(t *testing.T) {
	w, sum := newWindowLLM(t, 2000)
	var prev strings.Builder
	for i := range 200 {
		fmt.Fprintf(&prev, "- earlier fact %d: the build id is B-%05d\n", i, i)
	}
	msgs := append(messages(30, 1200, "new"), messages(1, 20000, "huge")...)
	in := summarizer.Input{Conversation: "c", Messages: msgs, PreviousSummary: prev.String(),
		SystemPrompt: "You are Ops Bot. " + strings.Repeat("Follow the runbook to the letter. ", 300),
		Instructions: strings.Repeat("Keep every build id and every host name. ", 8), MaxSummaryTokens: 850}
	out, err := summarizer.SummarizeToFit(context.Background(), sum, in, 128000)
	if err != nil {
		t.Fatal(err)
	}
	if out.Summary == "" || out.Model != "small-local-model" {
		t.Fatalf("summary %q by %q", out.Summary, out.Model)
	}
	if refused := w.refusedThenSmaller(t); refused != 1 {
		t.Fatalf("%d refusals; want the one that names the window", refused)
	}
	for _, want := range []string{"B-00000", "B-00199", "new-0 ", "new-29 ", "huge-0 ", "You are Ops Bot.", "Keep every build id"} {
		if !strings.Contains(w.text.String(), want) {
			t.Fatalf("%q never reached the model", want)
		}
	}
	n, _, _ := w.stats()
	t.Logf("%d requests: %v", n, w.sizes)
}
