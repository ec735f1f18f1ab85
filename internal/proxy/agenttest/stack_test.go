package agenttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

// summarizerKey is the summarizer's own credential.
const summarizerKey = "sk-summarizer-operator"

// stack is `compactor serve` with the proxy, against an in-process nats-server, with
// the fake upstream (agent-like, behind a usage rewriter) as the agent's model and as
// the summarizer's LLM, and a recording reverse proxy in front of the proxy, which
// is where the agent is pointed.
type stack struct {
	t      *testing.T
	fake   *fakeupstream.Server
	upURL  string
	nats   *embedded.Server
	nc     *nats.Conn
	pc     *pipeline.Client
	env    []string
	proc   *proctest.Proc
	proxy  string // the proxy's root URL
	rec    *recorder
	huge   atomic.Pointer[func(path string, body []byte) bool] // the next request it matches reports a huge usage
	hugeN  atomic.Int32
	fail   atomic.Pointer[func(path string, body []byte) bool] // the next request it matches is answered 429
	window int
}

// startStack starts a stack with the context window w; output is the shell command
// the fake model asks the agent's shell tool to run.
func startStack(t *testing.T, w int, command string, env ...string) *stack {
	t.Helper()
	s := &stack{t: t, fake: fakeupstream.NewHandler(), window: w}
	s.fake.Respond = func(r *fakeupstream.Request) fakeupstream.Reply { return agentReply(s.fake, r, command) }
	up := httptest.NewServer(http.HandlerFunc(s.serveUpstream))
	t.Cleanup(up.Close)
	s.upURL = up.URL
	s.fake.SetURL(up.URL)
	s.nats = jstest.Server(t)
	port := proctest.FreePort(t)
	s.proxy = fmt.Sprintf("http://127.0.0.1:%d", port)
	s.env = append([]string{
		"COMPACTOR_NATS_URL=" + s.nats.ClientURL(),
		fmt.Sprintf("COMPACTOR_PROXY_LISTEN=127.0.0.1:%d", port),
		"COMPACTOR_PROXY_UPSTREAM=" + up.URL,
		"COMPACTOR_PROXY_ANTHROPIC_UPSTREAM=" + up.URL,
		"COMPACTOR_PROXY_GEMINI_UPSTREAM=" + up.URL,
		"COMPACTOR_LLM_BASE_URL=" + up.URL,
		"COMPACTOR_LLM_MODEL=" + fakeupstream.SummarizerModel,
		"COMPACTOR_LLM_API_KEY=" + summarizerKey,
		fmt.Sprintf("COMPACTOR_CONTEXT_WINDOW=%d", w),
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=",
	}, env...)
	s.nc = jstest.Conn(t, s.nats)
	s.startProxy()
	pc, err := pipeline.New(ctxFor(t, 10*time.Second), s.nc)
	if err != nil {
		t.Fatalf("pipeline client: %v", err)
	}
	s.pc = pc
	s.rec = newRecorder(t, s.proxy)
	return s
}

// startProxy starts compactor serve and waits until it answers.
func (s *stack) startProxy() {
	t := s.t
	t.Helper()
	s.proc = proctest.Start(t, "compactor serve (proxy)", proctest.Compactor(t), []string{"serve"}, s.env)
	proctest.WaitFor(t, 60*time.Second, "the compactor service and the proxy to answer", func() error {
		if msg := s.proc.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
		m, err := s.nc.Request("compactor.status", []byte(`{}`), time.Second)
		if err != nil {
			return err
		}
		if e := m.Header.Get("Nats-Service-Error"); e != "" {
			return errors.New(e)
		}
		resp, err := http.Get(s.proxy + "/v1/models")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

// restartProxy stops the compactor serve process (SIGTERM) and starts another with
// the same settings, on the same NATS and port.
func (s *stack) restartProxy() {
	t := s.t
	t.Helper()
	s.proc.Signal(t, syscall.SIGTERM)
	if err := s.proc.Wait(t, 30*time.Second, "SIGTERM"); err != nil {
		t.Logf("compactor serve exited: %v", err)
	}
	s.startProxy()
}

// usageRE is an input-token (or total) count of a usage report, on any of the wires.
var usageRE = regexp.MustCompile(`"(input_tokens|prompt_tokens|promptTokenCount|total_tokens|totalTokenCount)":\s*\d+`)

// hugeUsage is the input tokens reported when an agent is to compact on its own.
const hugeUsage = "990000"

// armHuge makes the next upstream request match accepts report a huge usage.
func (s *stack) armHuge(match func(path string, body []byte) bool) { s.huge.Store(&match) }

// arm429 makes the next upstream request match accepts be answered 429 with
// Retry-After: 1, in the API's own error shape.
func (s *stack) arm429(match func(path string, body []byte) bool) { s.fail.Store(&match) }

// serveUpstream serves the fake, rewriting the usage of the one armed request.
func (s *stack) serveUpstream(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	summarizer := bytes.Contains(body, []byte(`"`+fakeupstream.SummarizerModel+`"`))
	if m := s.fail.Load(); m != nil && !summarizer && (*m)(r.URL.Path, body) && s.fail.CompareAndSwap(m, nil) {
		s.t.Logf("upstream: %s answered 429 (Retry-After: 1)", r.URL.Path)
		s.fake.Push(fakeupstream.Reply{Status: http.StatusTooManyRequests, RetryAfter: "1"})
	}
	if m := s.huge.Load(); m != nil && !summarizer && (*m)(r.URL.Path, body) {
		if s.huge.CompareAndSwap(m, nil) {
			s.hugeN.Add(1)
			s.t.Logf("upstream: %s answered with a huge usage (%s input tokens)", r.URL.Path, hugeUsage)
			s.fake.ServeHTTP(&usageWriter{ResponseWriter: w}, r)
			return
		}
	}
	s.fake.ServeHTTP(w, r)
}

// usageWriter rewrites every usage count it writes to hugeUsage.
type usageWriter struct{ http.ResponseWriter }

func (u *usageWriter) Write(p []byte) (int, error) {
	q := usageRE.ReplaceAll(p, []byte(`"$1":`+hugeUsage))
	if _, err := u.ResponseWriter.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (u *usageWriter) Flush() {
	if f, ok := u.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// agentReply is the fake's AgentModel, with the shell command replaced by command
// (a larger output than AgentModel's, to fill the window), and a JSON answer for a
// structured-output side request (Gemini CLI's router and next-speaker checks).
func agentReply(f *fakeupstream.Server, r *fakeupstream.Request, command string) fakeupstream.Reply {
	if r.API == fakeupstream.Gemini && bytes.Contains(r.Fields["generationConfig"], []byte(`application/json`)) {
		return fakeupstream.Reply{Text: `{"complexity_reasoning":"a simple shell task","complexity_score":1,"reasoning":"the model answered","next_speaker":"user"}`}
	}
	rep := f.AgentModel(r)
	for i, tc := range rep.ToolCalls {
		for _, st := range fakeupstream.ShellTools {
			if st.Name == tc.Name {
				rep.ToolCalls[i].Arguments = st.Args(command)
				break
			}
		}
	}
	return rep
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// exchange is one request the agent sent through the recorder, and the proxy's answer.
type exchange struct {
	At     time.Time
	Method string
	Path   string
	Status int
	Header http.Header // the proxy's response headers
	Size   int         // request body bytes
	Body   []byte      // request body
}

// recorder is a reverse proxy in front of the compactor proxy that keeps each
// exchange.
type recorder struct {
	URL string
	mu  sync.Mutex
	ex  []exchange
}

func newRecorder(t *testing.T, target string) *recorder {
	rec := &recorder{}
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		req := resp.Request
		body, _ := req.Context().Value(bodyKey{}).([]byte)
		rec.mu.Lock()
		rec.ex = append(rec.ex, exchange{At: time.Now(), Method: req.Method, Path: req.URL.RequestURI(), Status: resp.StatusCode,
			Header: resp.Header.Clone(), Size: len(body), Body: body})
		rec.mu.Unlock()
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		rec.mu.Lock()
		rec.ex = append(rec.ex, exchange{At: time.Now(), Method: r.Method, Path: r.URL.RequestURI(), Status: 502})
		rec.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)))
	}))
	t.Cleanup(srv.Close)
	rec.URL = srv.URL
	return rec
}

type bodyKey struct{}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.ex...)
}

// refuser is an HTTP(S) proxy that refuses everything: CONNECT and proxied requests
// get 403; it counts the hosts asked for.
type refuser struct {
	URL   string
	mu    sync.Mutex
	hosts map[string]int
}

func newRefuser(t *testing.T) *refuser {
	f := &refuser{hosts: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.URL = "http://" + ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return f
}

func (f *refuser) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	host := req.Host
	if req.Method != http.MethodConnect && req.URL != nil && req.URL.Host != "" {
		host = req.URL.Host
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	f.mu.Lock()
	f.hosts[req.Method+" "+h]++
	f.mu.Unlock()
	io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

func (f *refuser) seen() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.hosts {
		out[k] = v
	}
	return out
}

// stored is every message CHAT holds of conv, in order.
func (s *stack) stored(t *testing.T, conv string) []schemas.Message {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	names := jetstream.DefaultNames()
	filter, err := names.ChatFilter(conv)
	if err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, names.ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, n := range info.State.Subjects {
		want += int(n)
	}
	if want == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		t.Fatal(err)
	}
	var out []schemas.Message
	for len(out) < want {
		batch, err := cons.Fetch(want-len(out), natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			msg, err := schemas.DecodeMessage(m.Data())
			if err != nil {
				t.Fatalf("CHAT holds a message that does not decode: %v\n%s", err, m.Data())
			}
			out = append(out, msg)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// conversations is every conversation CHAT holds, with its message count.
func (s *stack) conversations(t *testing.T) map[string]int {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	names := jetstream.DefaultNames()
	js, err := natsjs.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, names.ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(names.ChatPrefix+".>"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for subj, n := range info.State.Subjects {
		if c, ok := names.ConversationOf(subj); ok {
			out[c] += int(n)
		}
	}
	return out
}

// dump is messages one a line, for failures.
func dump(msgs []schemas.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		j, _ := json.Marshal(m)
		if len(j) > 300 {
			j = append(j[:300], "…"...)
		}
		fmt.Fprintf(&b, "%3d %s\n", i, j)
	}
	return b.String()
}

// requestTokens is the fake's token count of r: tools, system and messages as sent,
// four bytes a token.
func requestTokens(r *fakeupstream.Request) int {
	n := len(r.Fields["tools"]) + len(r.System)
	for _, m := range r.Messages {
		n += len(m)
	}
	return (n + 3) / 4
}

// sortedKeys is m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeFile writes a file, failing t.
func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
