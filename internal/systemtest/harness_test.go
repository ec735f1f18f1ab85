package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/internal/fakellm"
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
	// one: a test may have set others for itself (rolestest.Server's passwords).
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
		RetryDelay: 200 * time.Millisecond, AckWait: jetstream.DefaultWorkerAckWait,
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
func startStack(t *testing.T, env stackEnv, llm *fakellm.LLM) *stack {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	return runStack(t, nc, st, env, llm)
}

func runStack(t *testing.T, nc *nats.Conn, st *jetstream.Store, env stackEnv, llm *fakellm.LLM) *stack {
	t.Helper()
	if llm != nil {
		env.Policy["llm_base_url"] = llm.URL()
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
