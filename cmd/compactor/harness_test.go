package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// fakeLLM is an OpenAI-compatible endpoint for tests, spoken to by the real go-openai
// client. Its summary keeps every needle (NEEDLE-…) it finds in its input, so a test can
// follow facts across generations.
type fakeLLM struct {
	srv *httptest.Server

	mu     sync.Mutex
	inputs []string // the user message of every request
	calls  int
	delay  time.Duration
	// jitter, when non-zero, adds a random part of up to jitter to every delay.
	jitter   time.Duration
	failures int // the next failures requests answer 500
	status   int // when non-zero, every request answers this status
	// maxChars, when non-zero, refuses requests whose messages hold more characters,
	// as an endpoint does with context_length_exceeded.
	maxChars int
	refused  int
	// hook, when set, runs at the start of every request (outside the lock).
	hook func()
	// pad, when non-zero, appends that many characters to every summary (a model that
	// ignores its length cap).
	pad int
	// block, when set, holds every request until it is closed (see release); held
	// counts the requests that reached it.
	block chan struct{}
	held  int
}

var needleRE = regexp.MustCompile(`NEEDLE-[0-9a-z]+`)

func newFakeLLM(t *testing.T) *fakeLLM {
	f := &fakeLLM{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
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
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	f.mu.Lock()
	f.calls++
	delay, status, pad := f.delay, f.status, f.pad
	if f.jitter > 0 {
		delay += mrand.N(f.jitter)
	}
	if f.failures > 0 {
		f.failures--
		status = http.StatusInternalServerError
	}
	// What the model is given, in either request shape: the text of every message and
	// the arguments of its tool calls.
	var input string
	for _, m := range req.Messages {
		input += contentText(m.Content)
		for _, tc := range m.ToolCalls {
			input += tc.Function.Arguments
		}
	}
	total := len(input)
	tooLong := f.maxChars > 0 && total > f.maxChars
	if tooLong {
		f.refused++
	} else {
		f.inputs = append(f.inputs, input)
	}
	block := f.block
	if block != nil && !tooLong {
		f.held++
	}
	f.mu.Unlock()
	if tooLong {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d characters; your messages resulted in %d.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, f.maxChars, total)
		return
	}
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"fake failure","type":"server_error","code":"%d"}}`, status)
		return
	}
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
		"id": "cmpl-1", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model + "-fake",
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

func (f *fakeLLM) set(fn func(f *fakeLLM)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// heldCount is how many requests reached block so far.
func (f *fakeLLM) heldCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

// release lets every request held so far answer; later ones are held again when
// holdAgain, and not at all otherwise.
func (f *fakeLLM) release(holdAgain bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.block != nil {
		close(f.block)
	}
	f.block = nil
	if holdAgain {
		f.block = make(chan struct{})
	}
}

func (f *fakeLLM) allInputs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.inputs, "\n")
}

func (f *fakeLLM) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// testEnv is the defaults of every COMPACTOR_ variable with a small window.
func testEnv(t *testing.T, window int) Env {
	t.Helper()
	// The nats CLI's own variables go too (the commands read them), but not every NATS_
	// one: a test may have set others for itself (rolesServer's passwords).
	natsCLI := map[string]bool{"NATS_CONTEXT": true}
	for _, k := range natsconn.NATSEnvVars {
		natsCLI[k] = true
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, envPrefix+"_") || strings.HasPrefix(k, "OPENAI_") || natsCLI[k] {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	// No nats CLI context of the machine's user: the commands would connect with it.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	e, err := loadEnv(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	e.Policy["context_window"] = strconv.Itoa(window)
	e.RetryDelay = 200 * time.Millisecond
	e.LogLevel = "warn"
	return e
}

// build is the node of env's roles on nc and st, as serve builds it, without telemetry.
func build(env Env, nc *nats.Conn, st *jetstream.Store, log zerolog.Logger) (*node.Node, error) {
	cfg, err := env.node(log, telemetry.Telemetry{})
	if err != nil {
		return nil, err
	}
	return node.New(cfg, nc, st)
}

// stack is a running compactor (trigger and workers) on a real in-process NATS.
type stack struct {
	nc     *nats.Conn
	st     *jetstream.Store
	client *pipeline.Client
	cancel context.CancelFunc
	done   chan error
}

// startStack provisions the contract on a fresh server and runs the roles of env with
// the fake LLM (nil: the extractive summarizer).
func startStack(t *testing.T, env Env, llm *fakeLLM) *stack {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	return runStack(t, nc, st, env, llm)
}

func runStack(t *testing.T, nc *nats.Conn, st *jetstream.Store, env Env, llm *fakeLLM) *stack {
	t.Helper()
	if llm != nil {
		env.Policy["llm_base_url"] = llm.srv.URL
		env.lookup = func(k string) (string, bool) { return "test-key", k == "COMPACTOR_LLM_API_KEY" }
	}
	if err := env.validate(); err != nil {
		t.Fatal(err)
	}
	nd, err := build(env, nc, st, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{nc: nc, st: st, client: pipeline.NewWithStore(nc, st), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- nd.Run(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop cancels the roles and waits until they drained.
func (s *stack) stop(t *testing.T) {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	for i := 0; i < cap(s.done); i++ {
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("component stopped with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("components did not drain within 30s")
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// must returns a subject a builder made of a valid conversation id.
func must(subject string, err error) string {
	if err != nil {
		panic(err)
	}
	return subject
}

// jsFor is a JetStream context of the test's own, to look at what the pipeline did.
func jsFor(t *testing.T, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// idleWorkers reports whether no request waits in the work queue or is being worked on.
func idleWorkers(t *testing.T, s *stack) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cfg := s.st.Config()
	cons, err := jsFor(t, s.nc).Consumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer)
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// The helpers below are shared with the system tests of internal/systemtest, which
// keep their own copies (a package cannot use another's test files): synthetic
// conversations, the binaries and their processes, the roles' server.

// needleConversation is a synthetic agent run: every user message carries a needle,
// every turn calls a tool with a bulky result.
func needleConversation(turns int) ([]schemas.Message, []string) {
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

// buildCompactor returns this directory's binary.
func buildCompactor(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary("compactor", ".")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildBinary runs `go build -o <dir>/name pkg` in this module (so a dependency's
// version is the one go.mod pins) the first time name is asked for, and returns the
// path, or the build's error, every time.
func buildBinary(name, pkg string) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if b, ok := binaries.built[name]; ok {
		return b.path, b.err
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "compactor-test-bin-")
		if err != nil {
			return "", err
		}
		binaries.dir, binaries.built = dir, map[string]builtBinary{}
	}
	b := builtBinary{path: filepath.Join(binaries.dir, name)}
	if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	binaries.built[name] = b
	return b.path, b.err
}

// binaries are built once per test run, into one directory TestMain removes.
var binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]builtBinary
}

type builtBinary struct {
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	binaries.mu.Lock()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	binaries.mu.Unlock()
	os.Exit(code)
}

// freePort returns a port of 127.0.0.1 that was free a moment ago: a server that must
// come back on the same port after a crash needs one it is given, not -1.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startProc starts bin with args and env (added to this process's environment); it is
// killed at cleanup if still running, and its output is logged when the test failed.
func startProc(t *testing.T, name, bin string, args, env []string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			p.stopping.Store(true)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d, %v):\n%s", name, p.cmd.Process.Pid, p.err, p.logs.tail(24<<10))
		}
	})
	return p
}

// proc is a child process whose output is kept, and whose exit is expected only when
// the test stopped it.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
	err  error // set when done is closed
	// stopping is set before the test signals the process: an exit without it is
	// unexpected.
	stopping atomic.Bool
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// unexpectedExit describes the exit of a process the test did not stop, "" when it
// runs or was stopped.
func (p *proc) unexpectedExit() string {
	if !p.exited() || p.stopping.Load() {
		return ""
	}
	return fmt.Sprintf("%s (pid %d) exited on its own: %v\n%s", p.name, p.cmd.Process.Pid, p.err, p.logs.tail(16<<10))
}

// signal sends sig, the exit that follows being expected.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.stopping.Store(true)
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		t.Fatalf("%s %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit, failing t after d.
func (p *proc) wait(t *testing.T, d time.Duration, after string) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s still running %s after %s", p.name, d, after)
		return nil
	}
}

// tail is the last n bytes of the log, from a line start.
func (b *logBuffer) tail(n int) string {
	s := b.String()
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "[…]\n" + s
}

// replay publishes msgs one by one, reading its own write after each (invariant 8).
func replay(t *testing.T, s *stack, conv string, msgs []schemas.Message, pace time.Duration) []uint64 {
	t.Helper()
	ctx := ctxFor(t, 5*time.Minute)
	var seqs []uint64
	for i, m := range msgs {
		seq, err := s.client.Publish(ctx, conv, m)
		if err != nil {
			t.Fatalf("publish message %d: %v", i, err)
		}
		seqs = append(seqs, seq)
		cx, err := s.client.Context(ctx, conv, pipeline.AtLeastSeq(seq))
		if err != nil {
			t.Fatalf("read after publishing seq %d: %v", seq, err)
		}
		if seq >= cx.TailStartSeq && !slices.Contains(cx.Seqs, seq) && !(m.HasToolCalls() || m.Role == schemas.RoleTool) {
			t.Fatalf("read-your-writes: seq %d missing from the context (tail from %d)", seq, cx.TailStartSeq)
		}
		if pace > 0 {
			time.Sleep(pace)
		}
	}
	return seqs
}

// rolesServer starts a nats-server from accounts.conf with a fresh password per user
// (the file reads them from the environment) and returns a function that connects as
// a user, through the same natsconn.Auth the commands use.
func rolesServer(t *testing.T) (url string, connect func(user string) *roleConn) {
	t.Helper()
	passwords := map[string]string{}
	for _, u := range []string{"sys", "admin", "trigger", "worker", "api", "producer", "reader"} {
		passwords[u] = "pw-" + u + "-" + rand.Text()
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", passwords[u])
	}
	// A small max payload, so the roles' test of messages over it stays small.
	ns := jstest.ServerFromFile(t, accountsConf, jstest.MaxPayload(rolesMaxPayload))
	url = ns.ClientURL()
	return url, func(user string) *roleConn {
		t.Helper()
		c := &roleConn{user: user}
		nc, err := nats.Connect(url, nats.Name("compactor-"+user),
			// Each user's replies come on its own prefix, the only inbox it may read.
			natsconn.Auth{User: user, Password: passwords[user], InboxPrefix: "_INBOX_" + user}.Option(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.errs = append(c.errs, err.Error())
			}))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		c.nc = nc
		return c
	}
}

// roleConn is a connection as one user of accounts.conf, with the asynchronous errors
// the server sent it (a refused publish or subscription arrives only there).
type roleConn struct {
	user string
	nc   *nats.Conn
	mu   sync.Mutex
	errs []string
}

// accountsConf is the configuration deploy/nats ships, tested as it is.
const accountsConf = "../../deploy/nats/accounts.conf"

// rolesMaxPayload is the max payload of the roles' server.
const rolesMaxPayload = 16 << 10

// violations returns the permissions violations the server reported so far.
func (c *roleConn) violations() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

// natsServerBinary returns a standalone nats-server built from the module go.mod pins.
// A test that needs it skips when it cannot be built, and fails instead in CI
// (CI=true).
func natsServerBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: a test that needs nats-server fails instead of skipping)", err)
		}
		t.Skipf("cannot build nats-server: %v", err)
	}
	return bin
}

// waitFor polls cond until it returns nil, failing the test with cond's last error
// after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
