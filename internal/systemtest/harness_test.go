package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/triggers"
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
		delay += rand.N(f.jitter)
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

// inputsWith is allInputs of the requests whose input holds marker.
func (f *fakeLLM) inputsWith(marker string) string {
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

func (f *fakeLLM) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// stackEnv is the settings of a test's stack: node.Settings, which serve builds its
// node from too (cmd/compactor maps its COMPACTOR_ variables onto them), at the
// defaults of those variables and the values testEnv sets.
type stackEnv struct {
	node.Settings
}

// testEnv clears the process's COMPACTOR_, OPENAI_ and nats CLI variables (the
// processes and commands a test starts inherit its environment) and returns the
// defaults of every COMPACTOR_ variable with a small window, a retry delay of 200ms
// and log level warn, as cmd/compactor's tests had them.
func testEnv(t *testing.T, window int) stackEnv {
	t.Helper()
	// The nats CLI's own variables go too (the commands read them), but not every NATS_
	// one: a test may have set others for itself (rolesServer's passwords).
	natsCLI := map[string]bool{"NATS_CONTEXT": true}
	for _, k := range natsconn.NATSEnvVars {
		natsCLI[k] = true
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "COMPACTOR_") || strings.HasPrefix(k, "OPENAI_") || natsCLI[k] {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	// No nats CLI context of the machine's user: the commands would connect with it.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	// The defaults of cmd/compactor's COMPACTOR_ variables, but the retry delay.
	return stackEnv{node.Settings{
		Policy:  policy.Layer{"context_window": strconv.Itoa(window)},
		Roles:   "trigger,worker,api",
		Workers: 4, MaxAttempts: 5,
		BackoffBase: 2 * time.Second, BackoffMax: 2 * time.Minute,
		RetryDelay: 200 * time.Millisecond, AckWait: 30 * time.Second,
		DrainTimeout: 3 * time.Minute, ForgetTTL: 24 * time.Hour,
		TriggerHeartbeat: 2 * time.Second,
		Replicas:         1, TriggerPartitions: 1,
		MaxObject: 16 << 20,
		Counters:  counters,
	}}
}

// counters are the token counters every stack of the test binary shares.
var counters = node.NewCounters()

// resolver is the policy resolver of the environment tier and profiles.
func (e stackEnv) resolver() (*policy.Resolver, error) { return e.Resolver() }

// budget is the budget of a conversation without a policy.
func (e stackEnv) budget() budget.Budget {
	r, err := e.resolver()
	if err != nil {
		return budget.Default()
	}
	s, err := r.Resolve(nil)
	if err != nil {
		return r.Base().Budget()
	}
	return s.Budget()
}

// jetstream is the streams' configuration of e.
func (e stackEnv) jetstream() jetstream.Config { return e.JetStream() }

// triggers is the trigger's configuration of e.
func (e stackEnv) triggers() triggers.Config { return e.Trigger() }

// build is the node of env's roles on nc and st, as serve builds it, without telemetry.
func build(env stackEnv, nc *nats.Conn, st *jetstream.Store, log zerolog.Logger) (*node.Node, error) {
	cfg, err := env.Config(log, telemetry.Telemetry{})
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
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
func startStack(t *testing.T, env stackEnv, llm *fakeLLM) *stack {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	return runStack(t, nc, st, env, llm)
}

func runStack(t *testing.T, nc *nats.Conn, st *jetstream.Store, env stackEnv, llm *fakeLLM) *stack {
	t.Helper()
	if llm != nil {
		env.Policy["llm_base_url"] = llm.srv.URL
		env.Lookup = func(k string) (string, bool) { return "test-key", k == "COMPACTOR_LLM_API_KEY" }
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

// loadCorpus returns the n largest conversations of the corpus, by name, skipping the
// test when the corpus is absent.
func loadCorpus(t *testing.T, n int) map[string][]schemas.Message {
	t.Helper()
	out := map[string][]schemas.Message{}
	for _, c := range corpustest.Largest(t, n) {
		out[c.Name] = c.Messages()
	}
	return out
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

// resultsFor is the results bucket, as the test sees it.
func resultsFor(t *testing.T, nc *nats.Conn, cfg jetstream.Config) natsjs.KeyValue {
	t.Helper()
	kv, err := jsFor(t, nc).KeyValue(ctxFor(t, 10*time.Second), cfg.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// triggerHandled waits until the trigger acknowledged every chat message through seq
// (the ack floor of its consumer). The trigger acknowledges a message after counting it
// and queueing the request it called for, whose requested event is then stored.
func triggerHandled(t *testing.T, s *stack, seq uint64) {
	t.Helper()
	cfg := s.st.Config()
	cons, err := jsFor(t, s.nc).Consumer(ctxFor(t, 10*time.Second), cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, fmt.Sprintf("the trigger to acknowledge seq %d", seq), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream >= seq
	})
}

// storedEvents counts the events of one type stored in COMPACT_EVENTS for conv: what
// was published, whether or not a subscription has seen it yet.
func storedEvents(t *testing.T, s *stack, conv, typ string) int {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	oc, err := jsFor(t, s.nc).OrderedConsumer(ctx, s.st.Config().EventsStream, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{must(s.st.Config().EventSubject(conv))}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		batch, err := oc.FetchNoWait(256)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var ev schemas.Event
			if json.Unmarshal(m.Data(), &ev) == nil && ev.Type == typ {
				n++
			}
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			return n
		}
	}
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

// viewToken is the web view's credential in the tests.
const viewToken = "view-token-for-tests-0123456789"
