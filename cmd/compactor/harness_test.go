package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// testEnv is the defaults of every COMPACTOR_ variable with a small window.
func testEnv(t *testing.T, window int) Env {
	t.Helper()
	// The nats CLI's own variables go too (the commands read them), but not every NATS_
	// one: a test may have set others for itself (rolestest.Server's passwords).
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
func startStack(t *testing.T, env Env, llm *fakellm.LLM) *stack {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	return runStack(t, nc, st, env, llm)
}

func runStack(t *testing.T, nc *nats.Conn, st *jetstream.Store, env Env, llm *fakellm.LLM) *stack {
	t.Helper()
	if llm != nil {
		env.Policy["llm_base_url"] = llm.URL()
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
	if nd.Service() != nil {
		// The service subscribes in Run: a command sent before would find no responder
		// (a CI run on a busy machine did).
		eventually(t, 10*time.Second, "the compactor service to answer", func() bool {
			_, err := nc.Request(schemas.StatusSubject, nil, time.Second)
			return err == nil
		})
	}
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

// TestMain removes the binaries the tests built for this run.
func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }
