package e2etest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

// summarizerKey is the summarizer's own credential: no client's key may reach the
// summarizer, and this one no agent request.
const summarizerKey = "sk-summarizer-operator"

// stack is one proxy as a user runs it: `compactor serve` with every role and the
// proxy, against an in-process nats-server, with the fake upstream as the agent's
// provider (both APIs) and as the summarizer's LLM.
type stack struct {
	up    *fakeupstream.Server
	proc  *proctest.Proc
	proxy string // the proxy's root URL, http://127.0.0.1:port
	nc    *nats.Conn
	pc    *pipeline.Client
	env   []string // the process's environment: a test starts it again with it
}

// startStack starts a stack; env (COMPACTOR_ variables) comes on top of the defaults.
func startStack(t *testing.T, env ...string) *stack {
	t.Helper()
	s := &stack{up: fakeupstream.New(t)}
	srv := jstest.Server(t)
	port := proctest.FreePort(t)
	s.proxy = fmt.Sprintf("http://127.0.0.1:%d", port)
	base := []string{
		"COMPACTOR_NATS_URL=" + srv.ClientURL(),
		fmt.Sprintf("COMPACTOR_PROXY_LISTEN=127.0.0.1:%d", port),
		"COMPACTOR_PROXY_UPSTREAM=" + s.up.URL(),
		"COMPACTOR_PROXY_ANTHROPIC_UPSTREAM=" + s.up.URL(),
		"COMPACTOR_PROXY_GEMINI_UPSTREAM=" + s.up.URL(),
		"COMPACTOR_LLM_BASE_URL=" + s.up.URL(),
		"COMPACTOR_LLM_MODEL=" + fakeupstream.SummarizerModel,
		"COMPACTOR_LLM_API_KEY=" + summarizerKey,
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=",
	}
	s.env = append(base, env...)
	s.proc = proctest.Start(t, "compactor serve (proxy)", proctest.Compactor(t), []string{"serve"}, s.env)
	s.nc = jstest.Conn(t, srv)
	s.waitReady(t)
	pc, err := pipeline.New(ctxFor(t, 10*time.Second), s.nc)
	if err != nil {
		t.Fatalf("pipeline client: %v", err)
	}
	s.pc = pc
	return s
}

// waitReady waits until the compactor service answers and the proxy passes a request
// through, failing at once if the process exits.
func (s *stack) waitReady(t *testing.T) {
	t.Helper()
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

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// stored is every message CHAT holds of conv, in order, read from the stream with the
// filter every reader of a conversation uses.
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

// waitStored waits until CHAT holds n messages of conv and returns them; it fails
// when it holds more.
func (s *stack) waitStored(t *testing.T, conv string, n int) []schemas.Message {
	t.Helper()
	var got []schemas.Message
	proctest.WaitFor(t, 20*time.Second, fmt.Sprintf("%d messages of %s in CHAT", n, conv), func() error {
		got = s.stored(t, conv)
		if len(got) > n {
			t.Fatalf("CHAT holds %d messages of %s, want %d:\n%s", len(got), conv, n, dump(got))
		}
		if len(got) < n {
			return fmt.Errorf("%d stored", len(got))
		}
		return nil
	})
	return got
}

// dump is messages one a line, for failures.
func dump(msgs []schemas.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		j, _ := json.Marshal(m)
		fmt.Fprintf(&b, "%3d %s\n", i, j)
	}
	return b.String()
}

// headerTransport adds headers to every request and keeps the last response's headers.
type headerTransport struct {
	set  http.Header
	last http.Header
	sent [][]byte // every request body, as the client sent it
}

func (h *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header[k] = v
	}
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		h.sent = append(h.sent, b)
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		h.last = resp.Header.Clone()
	}
	return resp, err
}

// goClient is a go-openai client of root (the proxy's or the fake's) with key,
// sending the conversation header conv ("" for none).
func goClient(root, key, conv string) (*openai.Client, *headerTransport) {
	tr := &headerTransport{set: http.Header{}}
	if conv != "" {
		tr.set.Set("X-Compactor-Conversation", conv)
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = root + "/v1"
	cfg.HTTPClient = &http.Client{Transport: tr}
	return openai.NewClientWithConfig(cfg), tr
}

// nodeResult is what a script of js/ printed.
type nodeResult struct {
	OK      bool              `json:"ok"`
	Message json.RawMessage   `json:"message"`
	Usage   map[string]any    `json:"usage"`
	Finish  string            `json:"finish"`
	Headers map[string]string `json:"headers"`
	Status  int               `json:"status"`
	Error   json.RawMessage   `json:"error"`
	Kind    string            `json:"kind"`
}

// jsDir is the directory of the scripts, with node and their modules: without them the
// test skips, except in CI (CI=true), where it fails.
func jsDir(t *testing.T) (node, dir string) {
	t.Helper()
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	dir, _ = filepath.Abs("js")
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed (CI=true: fails)")
	}
	for _, m := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			skip("run npm ci in internal/proxy/e2etest/js to enable this test (CI=true: fails)")
		}
	}
	return node, dir
}

// runNode runs script (openai.mjs or anthropic.mjs) with the request req against base,
// with key and the conversation header conv.
func runNode(t *testing.T, script, base, key, conv string, req any) nodeResult {
	t.Helper()
	node, dir := jsDir(t)
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctxFor(t, 60*time.Second), node, script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2E_BASE_URL="+base, "E2E_API_KEY="+key, "E2E_CONVERSATION="+conv)
	cmd.Stdin = bytes.NewReader(body)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s%s", script, err, out.String(), errOut.String())
	}
	var res nodeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("node %s printed %q: %v\n%s", script, out.String(), err, errOut.String())
	}
	return res
}
