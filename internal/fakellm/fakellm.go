package fakellm

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
)

// LLM is the endpoint. Its exported fields are the knobs: set them in Set, which holds
// the lock the requests read them under.
type LLM struct {
	srv *httptest.Server

	mu     sync.Mutex
	inputs []string // what every accepted request gave the model
	calls  int
	// refused counts the requests over MaxChars.
	refused int
	// held counts the requests that reached Block.
	held int

	// Delay holds every answer that long.
	Delay time.Duration
	// Jitter, when non-zero, adds a random part of up to Jitter to every delay.
	Jitter time.Duration
	// Failures is how many of the next requests answer 500.
	Failures int
	// Status, when non-zero, is the status every request answers.
	Status int
	// MaxChars, when non-zero, refuses requests whose messages hold more characters,
	// as an endpoint does with context_length_exceeded.
	MaxChars int
	// Window, when non-zero, is the model's context window in tokens: a request whose
	// messages (a quarter of the characters of each one's text and tool call arguments,
	// plus 4 a message and 3 for the reply) and reserved completion tokens exceed it is
	// refused as OpenAI refuses one, with context_length_exceeded naming both sizes.
	Window int
	// Hook, when set, runs at the start of every request (outside the lock).
	Hook func()
	// Pad, when non-zero, appends that many characters to every summary (a model that
	// ignores its length cap).
	Pad int
	// Block, when set, holds every request until it is closed (see Release).
	Block chan struct{}
}

var needleRE = regexp.MustCompile(`NEEDLE-[0-9a-z]+`)

// New starts the endpoint; it is closed at t's cleanup.
func New(t testing.TB) *LLM {
	f := &LLM{}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the endpoint's base URL, for llm_base_url (the client adds /v1/…).
func (f *LLM) URL() string { return f.srv.URL }

// ServeHTTP answers POST /v1/chat/completions, for a server in front of the endpoint.
func (f *LLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	model, input, size, err := readRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	hook := f.Hook
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	c := f.take(input, size)
	if c.window > 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens. However, you requested %d tokens. Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, c.window, size)
		return
	}
	if c.tooLong {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d characters; your messages resulted in %d.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, c.maxChars, len(input))
		return
	}
	if !wait(r.Context(), c.block, c.delay) {
		return
	}
	if c.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c.status)
		fmt.Fprintf(w, `{"error":{"message":"fake failure","type":"server_error","code":"%d"}}`, c.status)
		return
	}
	writeSummary(w, model, input, c.pad)
}

// readRequest is the model asked for and what the model is given, in either request
// shape: the text of every message and the arguments of its tool calls; and the
// request's size in tokens, as Window counts it.
func readRequest(r *http.Request) (model, input string, size int, err error) {
	var req struct {
		Model               string `json:"model"`
		MaxTokens           int    `json:"max_tokens"`
		MaxCompletionTokens int    `json:"max_completion_tokens"`
		Messages            []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				Function struct {
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		return "", "", 0, err
	}
	size = 3 + req.MaxTokens + req.MaxCompletionTokens
	for _, m := range req.Messages {
		text := contentText(m.Content)
		for _, tc := range m.ToolCalls {
			text += tc.Function.Arguments
		}
		input += text
		size += 4 + (utf8.RuneCountInString(text)+3)/4
	}
	return req.Model, input, size, nil
}

// call is how the endpoint answers one request, decided under its lock.
type call struct {
	delay       time.Duration
	status, pad int
	tooLong     bool
	maxChars    int
	window      int // the window a request over Window is refused with (0: not refused)
	block       chan struct{}
}

// take counts a request of input and size tokens and decides its answer from the
// knobs: a failure while Failures lasts, a refusal over Window or MaxChars (else the
// input is recorded), a hold while Block is set.
func (f *LLM) take(input string, size int) call {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	c := call{delay: f.Delay, status: f.Status, pad: f.Pad, maxChars: f.MaxChars, block: f.Block}
	if f.Jitter > 0 {
		c.delay += rand.N(f.Jitter)
	}
	if f.Failures > 0 {
		f.Failures--
		c.status = http.StatusInternalServerError
	}
	c.tooLong = f.MaxChars > 0 && len(input) > f.MaxChars
	if f.Window > 0 && size > f.Window {
		c.tooLong, c.window = true, f.Window
	}
	if c.tooLong {
		f.refused++
	} else {
		f.inputs = append(f.inputs, input)
	}
	if c.block != nil && !c.tooLong {
		f.held++
	}
	return c
}

// wait holds a request until block is closed (when set), then for delay; false when
// the client went away first.
func wait(ctx context.Context, block chan struct{}, delay time.Duration) bool {
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return false
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// writeSummary answers with a summary that keeps every needle of input, sorted, padded
// with pad characters, and usage in proportion to the text.
func writeSummary(w http.ResponseWriter, model, input string, pad int) {
	seen := map[string]bool{}
	var needles []string
	for _, n := range needleRE.FindAllString(input, -1) {
		if !seen[n] {
			seen[n] = true
			needles = append(needles, n)
		}
	}
	sort.Strings(needles)
	summary := "## Goal\nContinue the task.\n## Facts and identifiers\n" + strings.Join(needles, "\n")
	if pad > 0 {
		summary += "\n" + strings.Repeat("padding ", pad/8+1)[:pad]
	}
	resp := map[string]any{
		"id": "cmpl-1", "object": "chat.completion", "created": time.Now().Unix(), "model": model + "-fake",
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": summary}}},
		"usage": map[string]any{"prompt_tokens": len(input) / 4, "completion_tokens": len(summary) / 4, "total_tokens": (len(input) + len(summary)) / 4,
			"prompt_tokens_details": map[string]int{"cached_tokens": len(input) / 8}},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// contentText is a message's content as text: a string, or its text parts joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	for _, p := range parts {
		s += p.Text
	}
	return s
}

// Set runs fn with the lock held, to turn the knobs.
func (f *LLM) Set(fn func(f *LLM)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// Held is how many requests reached Block so far.
func (f *LLM) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// Release lets every request held so far answer; later ones are held again when
// holdAgain, and not at all otherwise.
func (f *LLM) Release(holdAgain bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Block != nil {
		close(f.Block)
	}
	f.Block = nil
	if holdAgain {
		f.Block = make(chan struct{})
	}
}

// AllInputs is what every accepted request gave the model, one request a line.
func (f *LLM) AllInputs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.inputs, "\n")
}

// InputsWith is AllInputs of the requests whose input holds marker.
func (f *LLM) InputsWith(marker string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, in := range f.inputs {
		if strings.Contains(in, marker) {
			out = append(out, in)
		}
	}
	return strings.Join(out, "\n")
}

// Calls is how many requests arrived, refused ones included.
func (f *LLM) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Counts is how many requests arrived and how many of them were refused for holding
// more than MaxChars or Window, read together.
func (f *LLM) Counts() (calls, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.refused
}

// CloseClientConnections closes the connections of every request still open (one held
// by Delay or Block ends at once for its client); the endpoint goes on serving.
func (f *LLM) CloseClientConnections() { f.srv.CloseClientConnections() }

// NeedleConversation is a synthetic agent run of turns turns: every user message
// carries a needle (returned in order), every turn calls a tool with a bulky result.
func NeedleConversation(turns int) ([]schemas.Message, []string) {
	msgs := []schemas.Message{{Role: schemas.RoleSystem, Content: schemas.Text("You are Ada, a careful build engineer.")}}
	var needles []string
	filler := strings.Repeat("build log line with nothing of note in it. ", 40)
	for i := 0; i < turns; i++ {
		n := fmt.Sprintf("NEEDLE-%03dx", i)
		needles = append(needles, n)
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("Step %d: remember the code %s and run the build.", i, n))},
			schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function",
				Function: schemas.FunctionCall{Name: "run_build", Arguments: fmt.Sprintf(`{"step":%d}`, i)}}}},
			schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(filler)},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(fmt.Sprintf("Build %d passed.", i))},
		)
	}
	return msgs, needles
}
