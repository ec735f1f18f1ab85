package summarizer_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// seed publishes n messages of 1,600 characters (400 tokens each), user and assistant in
// turn, and returns the last one's sequence. Eight are over the threshold of a
// 4,000-token window (3,000) and under its hard limit (3,800).
func seed(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		m := schemas.Message{Role: role, Content: schemas.Text(strings.Repeat("w", 1600))}
		data, _ := m.Encode()
		var err error
		if last, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// runPool runs a pool on st until the test ends; opts.Fallback and opts.Logger default
// to the extractive summarizer and errors only.
func runPool(t *testing.T, st *jetstream.Store, cfg summarizer.Config, opts summarizer.Options) {
	t.Helper()
	if opts.Fallback == nil {
		opts.Fallback = extractive.New()
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	pool, err := summarizer.NewPool(cfg, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// request queues a manual compaction of conv through upTo.
func request(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, upTo uint64) schemas.Request {
	t.Helper()
	req := schemas.Request{RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerManual,
		Reason: "test", RequestedAt: time.Now().UTC(), UpToSeq: upTo}
	if _, err := st.Queue().Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	return req
}

// stoppableStore provisions a store on a server of its own, which the test may stop
// (jstest.Stop) to stand for a cluster that does not answer.
func stoppableStore(t *testing.T) (*server.Server, *jetstream.Store) {
	t.Helper()
	ns := jstest.ServerWith(t, nil)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return ns, jstest.Provision(t, nc)
}

// A pool started while JetStream does not answer (a cluster electing the leader of the
// workers' consumer, a server restarting) waits for its consumer, logging each attempt,
// instead of returning an error that stops the whole process; once JetStream answers,
// it works.
func TestPoolWaitsForItsConsumer(t *testing.T) {
	ns, st := stoppableStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	request(t, ctx, st, "late", seed(t, ctx, st, "late", 8))
	restart := jstest.Stop(t, ns)
	logs := &lockedBuffer{}
	pool, err := summarizer.NewPool(summarizer.DefaultConfig(), st, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil },
		Fallback:    extractive.New(), Logger: zerolog.New(logs).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = pool.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	for !strings.Contains(logs.String(), "retrying") {
		select {
		case <-done:
			t.Fatalf("the pool returned while JetStream was away: %v", runErr)
		case <-ctx.Done():
			t.Fatal("no retry logged")
		case <-time.After(20 * time.Millisecond):
		}
	}
	restart()
	for {
		if v, _, err := st.Results().Get(ctx, "late", true); err == nil && v != nil && v.Generation == 1 {
			return
		}
		select {
		case <-done:
			t.Fatalf("the pool returned: %v", runErr)
		case <-ctx.Done():
			t.Fatal("no compaction once JetStream answered")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockedBuffer collects log lines; safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A drain that times out while NATS answers nothing (a stream electing its leader, the
// server gone) still returns within DrainTimeout + HandBackTimeout: the naks handing the
// requests back give up then (the requests wait for the ack wait instead), so the
// process exits within COMPACTOR_DRAIN_TIMEOUT. Before, each nak had its own 10 s of
// retries, one after another, and the cluster soak saw serve exit 1 past its timeout.
func TestDrainTimeoutHandBackIsBoundedWhenNATSDoesNotAnswer(t *testing.T) {
	ns, st := stoppableStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const jobs = 3
	for i := range jobs {
		conv := "unanswered-" + string(rune('a'+i))
		request(t, ctx, st, conv, seed(t, ctx, st, conv, 8))
	}
	h := newHeld()
	logs := &lockedBuffer{}
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = jobs, 200*time.Millisecond
	cfg.DrainTimeout, cfg.HandBackTimeout = 300*time.Millisecond, time.Second
	pool, err := summarizer.NewPool(cfg, st, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return h, nil },
		Fallback:    extractive.New(), Logger: zerolog.New(logs).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(runCtx) }()
	for range jobs {
		select {
		case <-h.entered:
		case <-ctx.Done():
			t.Fatal("the jobs did not reach their summarizer calls")
		}
	}
	restart := jstest.Stop(t, ns)
	defer restart()
	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the pool did not return")
	}
	// The bound is the point of the test; the slack covers a loaded machine.
	if took, bound := time.Since(start), cfg.DrainTimeout+cfg.HandBackTimeout+2*time.Second; took > bound {
		t.Fatalf("the pool returned %s after it was stopped; want within %s (drain %s + hand-back %s + slack)",
			took, bound, cfg.DrainTimeout, cfg.HandBackTimeout)
	}
	out := logs.String()
	if n := strings.Count(out, "hand back unfinished request"); n != jobs || !strings.Contains(out, "drain timed out") {
		t.Fatalf("%d unanswered hand-backs logged; want %d, and the drain's timeout\n%s", n, jobs, out)
	}
}
