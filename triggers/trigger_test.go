package triggers_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	b, err := triggers.New(testConfig(), st, fixed(settings), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
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
	seq, err := st.PublishMessage(context.Background(), conv, b, "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func text(n int) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", n))}
}

// requests records every request queued, by conversation.
type requests struct {
	mu  sync.Mutex
	got []schemas.Request
}

func watchRequests(t *testing.T, nc *nats.Conn, st *jetstream.Store) *requests {
	r := &requests{}
	sub, err := nc.Subscribe(st.Config().RequestPrefix+".*", func(m *nats.Msg) {
		var req schemas.Request
		if json.Unmarshal(m.Data, &req) == nil {
			r.mu.Lock()
			r.got = append(r.got, req)
			r.mu.Unlock()
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
	waitFor(t, "the trigger to count every message", func() bool { got, _ := tr.b.TokensOf("c"); return got == n*per })
	time.Sleep(200 * time.Millisecond)
	if reqs.count() != 0 {
		t.Fatalf("queued under the threshold (%d tokens)", n*per)
	}
	last := publish(t, st, "c", m)
	waitFor(t, "a request", func() bool { return reqs.count() == 1 })
	req := reqs.got[0]
	if req.Trigger != schemas.TriggerBudget || req.UpToSeq != last || !strings.Contains(req.Reason, "threshold 3000") {
		t.Fatalf("request = %+v", req)
	}
	// Pending: more messages do not queue a second request.
	publish(t, st, "c", m)
	time.Sleep(300 * time.Millisecond)
	if reqs.count() != 1 {
		t.Fatalf("%d requests while one is pending; want 1", reqs.count())
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
	time.Sleep(300 * time.Millisecond)
	if reqs.count() != 0 {
		t.Fatal("queued while call b is unanswered")
	}
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
		if _, err := st.PublishMessage(ctx, "bad", []byte(raw), ""); err != nil {
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
