package fakeupstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// SummarizerModel is the model name the summarizer is configured with in tests: a
// request for it is answered with a summary, not from the script.
const SummarizerModel = "fake-summarizer"

// API names the wire a request came on.
const (
	// OpenAI is Chat Completions: POST /v1/chat/completions.
	OpenAI = "openai"
	// Anthropic is Messages: POST /v1/messages (and /v1/messages/count_tokens).
	Anthropic = "anthropic"
	// Responses is the OpenAI Responses API: POST /v1/responses.
	Responses = "responses"
	// Gemini is the Gemini API: POST /v1beta/models/<model>:generateContent,
	// :streamGenerateContent (?alt=sse) and :countTokens.
	Gemini = "gemini"
)

// Request is one request the server received, as received.
type Request struct {
	// API is OpenAI, Anthropic, Responses or Gemini ("" for a path none speaks).
	API string
	// Method and Path are the request's.
	Method, Path string
	// Query is the request's query (Gemini's key=, alt=sse).
	Query url.Values
	// Header is the request's headers.
	Header http.Header
	// Body is the body as sent.
	Body []byte
	// Model is the body's model field (Gemini: the model of the path).
	Model string
	// Stream is the body's stream field (Gemini: the path's :streamGenerateContent).
	Stream bool
	// Summarizer says the request was the summarizer's (model SummarizerModel).
	Summarizer bool
	// Messages is the conversation, each entry as sent, in every API: the body's
	// messages (OpenAI, Anthropic), input items (Responses; a string input is one
	// entry, the JSON string) or contents (Gemini). Text reads any entry's text.
	Messages []json.RawMessage
	// System is the system prompt as sent outside Messages (nil when none): the
	// body's system (Anthropic), instructions (Responses) or systemInstruction
	// (Gemini).
	System json.RawMessage
	// Fields is every top-level field of the body, as sent.
	Fields map[string]json.RawMessage
	// Compaction names the agent whose compaction prompt the request's last user
	// message is (see CompactionPrompts), "" when it is none.
	Compaction string
	// Usage is the usage the server answered with (nil for an error or a summary).
	Usage *Usage
	// Signatures are the opaque reasoning tokens the server answered with, which a
	// client must send back as they are: Gemini's thoughtSignature of each
	// function-call part, the Responses API's encrypted_content of a reasoning item.
	Signatures []string
	// Gone says the client went away before the answer was written whole.
	Gone bool
}

// ToolCall is one tool call of a scripted reply.
type ToolCall struct {
	// ID is the call's id (generated when empty).
	ID string
	// Name is the function's (tool's) name.
	Name string
	// Namespace, on the Responses API, is the namespace tool the function is declared
	// in (an MCP server's tools: Codex declares them so); "" for a top-level function.
	Namespace string
	// Arguments is the arguments, a JSON object as text.
	Arguments string
}

// Reply is how the server answers one agent request.
type Reply struct {
	// Text is the assistant's text.
	Text string
	// ToolCalls are the tool calls the assistant makes, after the text.
	ToolCalls []ToolCall
	// Status, when not 0 or 200, answers with that status and an error body.
	Status int
	// RetryAfter is the retry-after header of an error answer ("" for none).
	RetryAfter string
	// ErrorBody is the error answer's body (empty: the API's own error shape).
	ErrorBody string
	// BreakAfter, when not 0, closes the connection of a streamed answer after that
	// many events, with no end and no error event.
	BreakAfter int
	// ErrorEventAfter, when not 0, ends a streamed answer with the API's error event
	// after that many events.
	ErrorEventAfter int
	// StallAfter, when not 0, holds a streamed answer after that many events until the
	// client goes away or Release is closed; Stalled is closed when it gets there.
	StallAfter int
	// Stalled, when set, is closed when the answer reaches StallAfter.
	Stalled chan struct{}
	// Release, when set, lets a stalled answer go on when closed.
	Release chan struct{}
}

// Server is the fake provider: an http.Handler. New serves it for a test on a local
// port; NewHandler makes one to serve with any http.Server (compactor fake-model).
type Server struct {
	url string

	mu          sync.Mutex
	requests    []*Request
	script      []Reply
	last        map[string][]byte // the conversation bytes of the last request per key
	seq         int
	compactions int

	// Respond, when set, answers the agent's requests the script has no reply left
	// for; when nil they are answered "ok". AgentModel is one (s.Respond =
	// s.AgentModel). Set it before the first request.
	Respond func(r *Request) Reply
	// Key, when set, names the conversation a request belongs to, for the cached
	// prefix; when nil it is the X-Compactor-Conversation header, else the model.
	Key func(r *Request) string
	// Answered, when set, is called after each agent request is answered, with the
	// reply it got (a log). Set it before the first request.
	Answered func(r *Request, rep Reply)
}

// Cleanuper is what New needs of its test: testing.TB is one.
type Cleanuper interface {
	Cleanup(func())
}

// New starts a server on a local port; it is closed at t's cleanup.
func New(t Cleanuper) *Server {
	s := NewHandler()
	srv := httptest.NewServer(s)
	s.url = srv.URL
	t.Cleanup(srv.Close)
	return s
}

// NewHandler is a server that listens nowhere: serve it (ServeHTTP) with an
// http.Server of your own, and SetURL to where it listens.
func NewHandler() *Server {
	return &Server{last: map[string][]byte{}}
}

// URL is the server's base URL (the client adds /v1/...).
func (s *Server) URL() string { return s.url }

// SetURL sets what URL returns, for a server served by NewHandler's caller.
func (s *Server) SetURL(u string) { s.url = u }

// Push queues replies for the next agent requests, in order.
func (s *Server) Push(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// Script replaces the queue of replies with replies: what an earlier test left
// unanswered is dropped.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append([]Reply(nil), replies...)
}

// Requests is every request received so far, in order of arrival.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// Agent is the requests that were not the summarizer's, in order.
func (s *Server) Agent() []*Request {
	var out []*Request
	for _, r := range s.Requests() {
		if !r.Summarizer && r.API != "" {
			out = append(out, r)
		}
	}
	return out
}

// Compactions is how many agent compaction prompts AgentModel answered with a
// summary.
func (s *Server) Compactions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compactions
}

// Summaries is how many summarizer requests were received.
func (s *Server) Summaries() int {
	n := 0
	for _, r := range s.Requests() {
		if r.Summarizer {
			n++
		}
	}
	return n
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r := &Request{Method: hr.Method, Path: hr.URL.Path, Query: hr.URL.Query(), Header: hr.Header.Clone(), Body: body}
	var geminiMethod string
	switch hr.URL.Path {
	case "/v1/chat/completions":
		r.API = OpenAI
	case "/v1/messages", "/v1/messages/count_tokens":
		r.API = Anthropic
	case "/v1/responses":
		r.API = Responses
	default:
		if m := geminiPath.FindStringSubmatch(hr.URL.Path); m != nil {
			r.API, r.Model, geminiMethod = Gemini, m[1], m[2]
			r.Stream = geminiMethod == "streamGenerateContent"
		}
	}
	if (r.API == Responses || r.API == Gemini) && hr.Method != http.MethodPost {
		r.API = "" // GET /v1/responses/<id> and the like: not the fake's
	}
	var bad error
	if r.API != "" {
		bad = parse(r) // before r is recorded: a reader of Requests sees it whole
	}
	s.record(r)
	if r.API == "" {
		s.serveOther(w, r)
		return
	}
	if bad != nil {
		writeError(w, r.API, http.StatusBadRequest, bad.Error())
		return
	}
	switch {
	case r.Path == "/v1/messages/count_tokens":
		s.countTokens(w, r)
	case geminiMethod == "countTokens":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"totalTokens":%d}`+"\n", tokens(len(conversationBytes(r))))
	case r.Summarizer:
		writeSummary(w, r)
	default:
		s.answer(w, hr, r)
	}
}

// record keeps r.
func (s *Server) record(r *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// serveOther answers the paths neither API rewrites: GET /v1/models lists one model;
// anything else is 404, recorded like the rest.
func (s *Server) serveOther(w http.ResponseWriter, r *Request) {
	if r.Method == http.MethodGet && r.Path == "/v1/models" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model","created":1700000000,"owned_by":"fakeupstream"}]}`)
		return
	}
	http.NotFound(w, nil)
}

// geminiPath is a Gemini API method's path: the model and the method.
var geminiPath = regexp.MustCompile(`^/v1(?:beta|alpha)?/models/([^:/]+):(generateContent|streamGenerateContent|countTokens)$`)

// parse reads the fields of r's body the server answers from.
func parse(r *Request) error {
	if err := json.Unmarshal(r.Body, &r.Fields); err != nil {
		return fmt.Errorf("body is not a JSON object: %v", err)
	}
	switch r.API {
	case Responses:
		if err := parseResponses(r); err != nil {
			return err
		}
	case Gemini:
		if err := parseGemini(r); err != nil {
			return err
		}
	default:
		_ = json.Unmarshal(r.Fields["model"], &r.Model)
		_ = json.Unmarshal(r.Fields["stream"], &r.Stream)
		if err := json.Unmarshal(r.Fields["messages"], &r.Messages); err != nil || len(r.Messages) == 0 {
			return fmt.Errorf("messages: must be a non-empty array")
		}
		r.System = r.Fields["system"]
	}
	r.Summarizer = r.API == OpenAI && r.Model == SummarizerModel
	if !r.Summarizer {
		r.Compaction = compactionAgent(r)
	}
	return nil
}

// present is raw unless it is absent or null.
func present(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// next is the reply to the agent request r: the script's next, else Respond's, else
// "ok".
func (s *Server) next(r *Request) Reply {
	s.mu.Lock()
	if len(s.script) > 0 {
		rep := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		return rep
	}
	respond := s.Respond
	s.mu.Unlock()
	if respond != nil {
		return respond(r)
	}
	return Reply{Text: "ok"}
}

// answer writes the reply to the agent request r.
func (s *Server) answer(w http.ResponseWriter, hr *http.Request, r *Request) {
	rep := s.next(r)
	if rep.Status != 0 && rep.Status != http.StatusOK {
		if rep.RetryAfter != "" {
			w.Header().Set("Retry-After", rep.RetryAfter)
		}
		if rep.ErrorBody != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rep.Status)
			io.WriteString(w, rep.ErrorBody)
			return
		}
		writeErrorRetry(w, r.API, rep.Status, "scripted failure", rep.RetryAfter)
		s.answered(r, rep)
		return
	}
	u := s.usage(r, rep)
	s.mu.Lock()
	r.Usage = u
	s.seq++
	id := s.seq
	s.mu.Unlock()
	w.Header().Set("X-Request-Id", fmt.Sprintf("req_fake_%d", id))
	out := &writer{w: w, hr: hr, r: r, rep: rep, s: s}
	switch r.API {
	case OpenAI:
		s.answerOpenAI(out, id, u)
	case Anthropic:
		s.answerAnthropic(out, id, u)
	case Responses:
		s.answerResponses(out, id, u)
	case Gemini:
		s.answerGemini(out, id, u)
	}
	s.answered(r, rep)
}

// answered calls Answered, when set.
func (s *Server) answered(r *Request, rep Reply) {
	if s.Answered != nil {
		s.Answered(r, rep)
	}
}

// setSignatures records the opaque reasoning tokens r was answered with.
func (s *Server) setSignatures(r *Request, sigs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Signatures = sigs
}

// markGone records that r's client went away before its answer was whole.
func (s *Server) markGone(r *Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Gone = true
}

// writer writes one answer, streamed or not, counting its events for the reply's
// break, error and stall points.
type writer struct {
	w      http.ResponseWriter
	hr     *http.Request
	r      *Request
	rep    Reply
	s      *Server
	events int
	ended  bool // the answer was cut short (a break, an error event, a gone client)
}

// sse is one server-sent event: its name ("" for none) and data.
type sse struct {
	name string
	data any
}

// one is errorEvent of one event.
func one(name string, data any) []sse { return []sse{{name, data}} }

// event writes one server-sent event (name "" for none) unless the answer already
// ended; it applies the reply's break, error and stall points before writing: at the
// error point it writes errorEvent's events instead, and ends.
func (o *writer) event(name string, data any, errorEvent func() []sse) {
	if o.ended {
		return
	}
	if o.rep.BreakAfter > 0 && o.events == o.rep.BreakAfter {
		o.ended = true
		panic(http.ErrAbortHandler) // the server drops the connection: no end, no error
	}
	if o.rep.ErrorEventAfter > 0 && o.events == o.rep.ErrorEventAfter {
		o.ended = true
		for _, e := range errorEvent() {
			o.write(e.name, e.data)
		}
		return
	}
	if o.rep.StallAfter > 0 && o.events == o.rep.StallAfter && !o.stall() {
		o.ended = true
		return
	}
	o.write(name, data)
}

// stall holds the answer until Release is closed (true) or the client goes away
// (false, recorded).
func (o *writer) stall() bool {
	if o.rep.Stalled != nil {
		close(o.rep.Stalled)
	}
	select {
	case <-o.rep.Release:
		return true
	case <-o.hr.Context().Done():
		o.s.markGone(o.r)
		return false
	}
}

// write sends one event and flushes it.
func (o *writer) write(name string, data any) {
	o.events++
	var b bytes.Buffer
	if name != "" {
		fmt.Fprintf(&b, "event: %s\n", name)
	}
	switch d := data.(type) {
	case string:
		fmt.Fprintf(&b, "data: %s\n\n", d)
	default:
		j, _ := json.Marshal(d)
		fmt.Fprintf(&b, "data: %s\n\n", j)
	}
	if _, err := o.w.Write(b.Bytes()); err != nil {
		o.s.markGone(o.r)
		o.ended = true
		return
	}
	if f, ok := o.w.(http.Flusher); ok {
		f.Flush()
	}
}

// startStream writes the headers of a streamed answer.
func (o *writer) startStream() {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	o.w.WriteHeader(http.StatusOK)
}

// writeJSON writes a non-streamed answer.
func (o *writer) writeJSON(v any) {
	o.w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(o.w).Encode(v)
}

// factRE is a planted fact: FACT- and the letters, digits and -_=:. that follow.
var factRE = regexp.MustCompile(`FACT-[A-Za-z0-9_=:.-]+`)

// Facts is every planted fact in text, each once, sorted.
func Facts(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range factRE.FindAllString(text, -1) {
		f = strings.TrimRight(f, ".:-")
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// writeSummary answers a summarizer request (OpenAI wire, not streamed) with a summary
// that keeps every planted fact of its messages.
func writeSummary(w http.ResponseWriter, r *Request) {
	var text strings.Builder
	for _, m := range r.Messages {
		text.Write(m)
		text.WriteByte('\n')
	}
	summary := "## Goal\nContinue the task.\n## Facts\n" + strings.Join(Facts(text.String()), "\n")
	resp := map[string]any{
		"id": "chatcmpl-summary", "object": "chat.completion", "created": time.Now().Unix(), "model": r.Model,
		"choices": []map[string]any{{"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": summary, "refusal": nil}}},
		"usage": map[string]any{"prompt_tokens": text.Len() / 4, "completion_tokens": len(summary) / 4,
			"total_tokens": (text.Len() + len(summary)) / 4},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// countTokens answers POST /v1/messages/count_tokens.
func (s *Server) countTokens(w http.ResponseWriter, r *Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, len(conversationBytes(r))/4)
}

// writeError writes the API's own error body with status.
func writeError(w http.ResponseWriter, api string, status int, message string) {
	writeErrorRetry(w, api, status, message, "")
}

// writeErrorRetry writes the API's own error body with status; Gemini's carries
// retryAfter (seconds) as its RetryInfo detail, as Gemini's 429 does.
func writeErrorRetry(w http.ResponseWriter, api string, status int, message, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var body any
	switch api {
	case Anthropic:
		body = map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": message}}
	case Gemini:
		body = geminiError(status, message, retryAfter)
	default:
		body = map[string]any{"error": map[string]any{"message": message, "type": openAIErrorType(status), "param": nil, "code": nil}}
	}
	_ = json.NewEncoder(w).Encode(body)
}

func anthropicErrorType(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusBadRequest:
		return "invalid_request_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func openAIErrorType(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "requests"
	case http.StatusBadRequest:
		return "invalid_request_error"
	}
	return "server_error"
}
