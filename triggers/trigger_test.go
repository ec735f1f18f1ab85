package triggers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/triggers"
)

func testConfig() triggers.Config {
	c := triggers.DefaultConfig()
	c.RetryDelay = 100 * time.Millisecond
	return c
}

// fixed gives every conversation the same settings: a 4,000-token window, changed by
// the functions given.
type fixed []func(*policy.Settings)

func (f fixed) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = 4000
	for _, fn := range f {
		fn(&s)
	}
	return s, s.Validate()
}

// setup provisions the contract with a short pinned TTL, so a standby takes over fast.
func setup(t *testing.T) (*nats.Conn, *jetstream.Store) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPinnedTTL = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

type running struct {
	b      *triggers.Trigger
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, st *jetstream.Store, settings ...func(*policy.Settings)) *running {
	t.Helper()
	return startWith(t, st, testConfig(), settings...)
}

func startWith(t *testing.T, st *jetstream.Store, cfg triggers.Config, settings ...func(*policy.Settings)) *running {
	t.Helper()
	b, err := triggers.New(cfg, st, fixed(settings), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{b: b, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
		<-r.done
	}
}

func publish(t *testing.T, st *jetstream.Store, conv string, m schemas.Message) uint64 {
	t.Helper()
	b, _ := m.Encode()
	seq, err := st.Chat().Publish(context.Background(), conv, b, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func text(n int) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", n))}
}

// requests records every request the trigger published, by conversation: each publish
// on a request subject, including one the queue refused because a request is pending.
type requests struct {
	nc    *nats.Conn
	syncs string // the subject of sync's markers: matched by the subscription, kept by no stream

	mu     sync.Mutex
	got    []schemas.Request
	synced int
}

// watchRequests subscribes on nc, the connection the trigger under test publishes on
// (setup gives the store nc), so sync can order its marker after the trigger's publishes.
func watchRequests(t *testing.T, nc *nats.Conn, st *jetstream.Store) *requests {
	prefix := st.Config().RequestPrefix
	r := &requests{nc: nc, syncs: prefix + ".sync.marker"}
	sub, err := nc.Subscribe(prefix+".>", func(m *nats.Msg) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if m.Subject == r.syncs {
			r.synced++
			return
		}
		var req schemas.Request
		if json.Unmarshal(m.Data, &req) == nil {
			r.got = append(r.got, req)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return r
}

func (r *requests) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// sync returns once the subscription has seen everything published on nc before it
// was called: it publishes a marker on nc and waits for it, and NATS delivers one
// connection's messages to a subscriber in order. After the trigger demonstrably
// handled a message (TokensOf, or handled), count then includes any request that
// handling published.
func (r *requests) sync(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	want := r.synced + 1
	r.mu.Unlock()
	if err := r.nc.Publish(r.syncs, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the request watcher to catch up", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.synced >= want
	})
}

// testJS is a JetStream context of the test's own, to look at what the trigger did.
func testJS(t testing.TB, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// handled waits until the active trigger acknowledged every chat message through seq
// (its consumer's ack floor reached seq). The trigger acknowledges a message only after
// counting it and queueing the request it called for, if any: a request it queued is
// in the work queue when handled returns.
func handled(t *testing.T, nc *nats.Conn, st *jetstream.Store, seq uint64) {
	t.Helper()
	acked(t, nc, st.Config().ChatStream, st.Config().TriggerConsumer, seq)
}

// acked waits until a consumer's ack floor reached seq.
func acked(t *testing.T, nc *nats.Conn, stream, consumer string, seq uint64) {
	t.Helper()
	cons, err := testJS(t, nc).Consumer(context.Background(), stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("%s to acknowledge %s seq %d", consumer, stream, seq), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream >= seq
	})
}

// stored is how many requests the work queue ever stored (its last sequence): the
// trigger tests run no worker, so a stored request stays until the test takes it.
func stored(t *testing.T, nc *nats.Conn, st *jetstream.Store) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := testJS(t, nc).Stream(ctx, st.Config().RequestsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// noRequest fails the test when a request was queued or attempted by now: callers
// first wait until the trigger demonstrably handled the messages in question.
func noRequest(t *testing.T, nc *nats.Conn, st *jetstream.Store, reqs *requests, why string) {
	t.Helper()
	reqs.sync(t)
	if n, q := reqs.count(), stored(t, nc, st); n != 0 || q != 0 {
		t.Fatalf("%s: %d requests published, %d stored; want none", why, n, q)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBudgetTriggerQueuesAtTheThreshold(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st)
	m := text(800) // ~204 tokens each
	per := tokens.Message(&m)
	n := 0
	for ; (n+1)*per < 3000; n++ {
		publish(t, st, "c", m)
	}
	// TokensOf takes the conversation's lock, which the trigger holds while it counts a
	// message and queues what it calls for: once the count shows message n, the
	// decision on it was made.
	waitFor(t, "the trigger to count every message", func() bool { got, _ := tr.b.TokensOf("c"); return got == n*per })
	noRequest(t, nc, st, reqs, fmt.Sprintf("under the threshold (%d tokens)", n*per))
	last := publish(t, st, "c", m)
	waitFor(t, "a request", func() bool { return reqs.count() == 1 })
	req := reqs.got[0]
	if req.Trigger != schemas.TriggerBudget || req.UpToSeq != last || !strings.Contains(req.Reason, "threshold 3000") {
		t.Fatalf("request = %+v", req)
	}
	// Pending: more messages do not queue, nor try to queue, a second request.
	more := publish(t, st, "c", m)
	handled(t, nc, st, more)
	waitFor(t, "the trigger to count the later message", func() bool { got, _ := tr.b.TokensOf("c"); return got == (n+2)*per })
	reqs.sync(t)
	if got, q := reqs.count(), stored(t, nc, st); got != 1 || q != 1 {
		t.Fatalf("%d requests published, %d stored while one is pending; want 1", got, q)
	}
}

func TestNoRequestWhileToolCallsAreOpen(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st)
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}},
		{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	publish(t, st, "tools", call)
	publish(t, st, "tools", schemas.Message{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(strings.Repeat("r", 16000))})
	waitFor(t, "the result to be counted", func() bool { got, _ := tr.b.TokensOf("tools"); return got > 3000 })
	noRequest(t, nc, st, reqs, "while call b is unanswered")
	publish(t, st, "tools", schemas.Message{Role: schemas.RoleTool, ToolCallID: "b", Content: schemas.Text("ok")})
	waitFor(t, "a request once the round is complete", func() bool { return reqs.count() == 1 })
}

func TestStandbyTakesOverWithoutDoubleCounting(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	first := start(t, st)
	second := start(t, st)
	m := text(800) // 15 of them cross the threshold, 10 do not
	per := tokens.Message(&m)
	for i := 0; i < 5; i++ {
		publish(t, st, "f", m)
	}
	var active, standby *running
	waitFor(t, "one trigger to count the messages", func() bool {
		a, _ := first.b.TokensOf("f")
		b, _ := second.b.TokensOf("f")
		switch {
		case a == 5*per && b == 0:
			active, standby = first, second
		case b == 5*per && a == 0:
			active, standby = second, first
		}
		return active != nil
	})
	active.stop() // the active process dies
	for i := 0; i < 5; i++ {
		publish(t, st, "f", m)
	}
	// The standby rebuilds from the stream: every message once, none twice.
	waitFor(t, "the standby to take over", func() bool { got, _ := standby.b.TokensOf("f"); return got == 10*per })
	for i := 0; i < 5; i++ {
		publish(t, st, "f", m)
	}
	waitFor(t, "the standby to count new messages", func() bool { got, _ := standby.b.TokensOf("f"); return got == 15*per })
	waitFor(t, "a request from the standby", func() bool { return reqs.count() == 1 })
}

func TestInvalidMessagesAreSkippedWithoutStoppingTheTrigger(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st)
	ctx := context.Background()
	for _, raw := range []string{"{", `{"role":"alien","content":"x"}`} {
		if _, err := st.Chat().Publish(ctx, "bad", []byte(raw), ""); err != nil {
			t.Fatal(err)
		}
	}
	m := text(4000)
	per := tokens.Message(&m)
	for i := 0; i < 3; i++ {
		publish(t, st, "bad", m)
	}
	waitFor(t, "valid messages to be counted", func() bool { got, _ := tr.b.TokensOf("bad"); return got == 3*per })
	waitFor(t, "a request", func() bool { return reqs.count() == 1 })
}

func TestUsageOfTheCurrentGenerationWins(t *testing.T) {
	_, st := setup(t)
	tr := start(t, st)
	m := text(400)
	per := tokens.Message(&m)
	publish(t, st, "u", m)
	gen0, stale := uint64(0), uint64(7)
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("ok"),
		Usage: &schemas.Usage{PromptTokens: 1500, CompletionTokens: 20}, ContextGeneration: &gen0}
	publish(t, st, "u", reply)
	waitFor(t, "the reported usage to replace the estimate", func() bool { got, _ := tr.b.TokensOf("u"); return got == 1520 })
	publish(t, st, "u", m)
	waitFor(t, "newer messages to add their estimate", func() bool { got, _ := tr.b.TokensOf("u"); return got == 1520+per })
	old := reply
	old.ContextGeneration = &stale
	publish(t, st, "u", old)
	want := 1520 + per + tokens.Message(&old)
	waitFor(t, "usage of another generation to be ignored", func() bool { got, _ := tr.b.TokensOf("u"); return got == want })
}
