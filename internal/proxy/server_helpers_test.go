package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/telemetry"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// testWire is a small API of the tests' own: a JSON body {"messages": [...], "stream":
// bool, "max_tokens": n}; a reply {"reply": "text", "usage": {"in": n, "out": n}}; a
// stream of data events {"text": "..."} ended by "data: [DONE]", whose "error" event is
// the upstream's own failure.
type testWire struct{ name string }

func (w testWire) Name() string { return w.name }

// ErrorBody is the real wires' shapes: Anthropic's for "anthropic", OpenAI's for the rest.
func (w testWire) ErrorBody(_ int, kind, msg string) []byte {
	var body any = map[string]any{"error": map[string]any{"message": msg, "type": kind, "param": nil, "code": nil}}
	if w.name == "anthropic" {
		body = map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}}
	}
	b, _ := wire.MarshalNoEscape(body)
	return b
}

func (w testWire) Parse(body []byte) (*Request, error) {
	var b struct {
		Messages  []schemas.Message `json:"messages"`
		Stream    bool              `json:"stream"`
		MaxTokens int               `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: body is not JSON: %v", ErrBadRequest, err)
	}
	if len(b.Messages) == 0 {
		return nil, fmt.Errorf("%w: messages: at least one is required", ErrBadRequest)
	}
	return &Request{Body: body, Messages: b.Messages, Stream: b.Stream, MaxOutput: b.MaxTokens}, nil
}

func (w testWire) Build(req *Request, cx *assemble.Context) ([]byte, error) {
	var b map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &b); err != nil {
		return nil, err
	}
	m, err := json.Marshal(cx.Messages)
	if err != nil {
		return nil, err
	}
	b["messages"] = m
	return json.Marshal(b)
}

func (w testWire) Reply(body []byte) (schemas.Message, *Usage, error) {
	var b struct {
		Reply string `json:"reply"`
		Usage *struct {
			In  int `json:"in"`
			Out int `json:"out"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return schemas.Message{}, nil, err
	}
	var u *Usage
	if b.Usage != nil {
		u = &Usage{Input: b.Usage.In, Output: b.Usage.Out}
	}
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(b.Reply)}, u, nil
}

func (w testWire) NewStream() Stream { return &testStream{} }

func (w testWire) StreamError(message string) []byte {
	b, _ := json.Marshal(map[string]string{"message": message})
	return []byte("event: error\ndata: " + string(b) + "\n\n")
}

type testStream struct {
	text         strings.Builder
	done, failed bool
}

func (s *testStream) Event(name string, data []byte) error {
	switch {
	case name == "error":
		s.failed = true
	case string(data) == "[DONE]":
		s.done = true
	default:
		var e struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		s.text.WriteString(e.Text)
	}
	return nil
}

func (s *testStream) Done() bool   { return s.done }
func (s *testStream) Failed() bool { return s.failed }
func (s *testStream) Result() (schemas.Message, *Usage, error) {
	return schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(s.text.String())}, nil, nil
}

// prepared is one call of Prepare.
type prepared struct {
	conv string
	msgs []schemas.Message
	opts TurnOptions
}

// finished is one call of Finish.
type finished struct {
	conv  string
	reply schemas.Message
	usage *Usage
}

// memConvs is a Conversations of the tests' own, in memory: the turn's context is the
// client's last message only (generation 7), so a test sees the rewrite upstream. It
// records every call; prepareErr, when set, is what Prepare returns.
type memConvs struct {
	mu         sync.Mutex
	prepares   []prepared
	finishes   []finished
	prepareErr error
	branch     string
	finishedCh chan struct{}
	// onFinish, when set, runs inside Finish, on the handler's goroutine.
	onFinish func()
}

func newMemConvs() *memConvs { return &memConvs{finishedCh: make(chan struct{}, 16)} }

func (c *memConvs) Prepare(_ context.Context, conv string, msgs []schemas.Message, opts TurnOptions) (*Turn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prepares = append(c.prepares, prepared{conv, msgs, opts})
	if c.prepareErr != nil {
		return nil, c.prepareErr
	}
	last := msgs[len(msgs)-1]
	cx := &assemble.Context{Messages: []schemas.Message{last}, Seqs: []uint64{1}, Generation: 7, Tokens: 11}
	return &Turn{Conv: conv, Branch: c.branch, Context: cx, ClientTokens: 100 * len(msgs), Published: len(msgs)}, nil
}

func (c *memConvs) Finish(_ context.Context, t *Turn, reply schemas.Message, usage *Usage) error {
	c.mu.Lock()
	c.finishes = append(c.finishes, finished{t.Conv, reply, usage})
	c.mu.Unlock()
	if c.onFinish != nil {
		c.onFinish()
	}
	c.finishedCh <- struct{}{}
	return nil
}

func (c *memConvs) calls() ([]prepared, []finished) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]prepared(nil), c.prepares...), append([]finished(nil), c.finishes...)
}

// received is one request the fake upstream received.
type received struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// fakeUpstream records what it receives and answers with handle.
type fakeUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	handle http.HandlerFunc
}

func newFakeUpstream(t *testing.T, handle http.HandlerFunc) *fakeUpstream {
	f := &fakeUpstream{handle: handle}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, received{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		f.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.handle(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeUpstream) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.got...)
}

// replyJSON answers a whole reply of testWire's.
func replyJSON(text string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-1")
		fmt.Fprintf(w, `{"reply":%q,"usage":{"in":5,"out":2}}`, text)
	}
}

// testProxy is a proxy of testWire's two APIs in front of an upstream.
type testProxy struct {
	srv   *Server
	http  *httptest.Server
	convs *memConvs
	up    *fakeUpstream
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newTestProxy serves a proxy with cfg changed by configure, in front of up (both
// upstreams), with a memConvs.
func newTestProxy(t *testing.T, up *fakeUpstream, configure func(*Config, *Options)) *testProxy {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Listen = ""
	cfg.Upstream = up.URL + "/base"
	cfg.AnthropicUpstream = up.URL + "/anthropic"
	cfg.GeminiUpstream = up.URL + "/gemini"
	logs := &syncBuffer{}
	opts := Options{Logger: zerolog.New(logs).Level(zerolog.DebugLevel)}
	if configure != nil {
		configure(&cfg, &opts)
	}
	convs := newMemConvs()
	wires := map[string]Wire{}
	for _, api := range []string{APIOpenAI, APIAnthropic, APIResponses, APIGemini} {
		wires[api] = testWire{api}
	}
	s, err := New(cfg, wires, convs, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testProxy{srv: s, http: hs, convs: convs, up: up, logs: logs}
}

// post sends body to path with the headers (name, value pairs).
func (p *testProxy) post(t *testing.T, path, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := p.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"},{"role":"user","content":"again"}],"temperature":0.5}`

// reportsOf is an Observer whose reports a test waits for (a report is made after
// the response is written, so the client may read the response first).
type reportsOf chan telemetry.ProxyReport

func (c reportsOf) ProxyRequest(r telemetry.ProxyReport) { c <- r }

func (c reportsOf) next(t *testing.T) telemetry.ProxyReport {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
		return telemetry.ProxyReport{}
	}
}
