package summarizer_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// gatedPolicy is window4000 that, once armed, holds the next job in its settings read
// (after the job's first tombstone check, before it decides anything) until released.
type gatedPolicy struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGatedPolicy() *gatedPolicy {
	return &gatedPolicy{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gatedPolicy) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		select {
		case <-g.release:
		case <-ctx.Done():
			return policy.Settings{}, ctx.Err()
		}
	}
	return window4000{}.Settings(ctx, conv)
}

// gatedPool runs a pool of one worker with the gated policy, its warnings in logs.
func gatedPool(t *testing.T, st *jetstream.Store, g *gatedPolicy, sum summarizer.Summarizer, logs *lockedBuffer) {
	t.Helper()
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, 2, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, 10*time.Second
	cfg.DrainTimeout, cfg.HandBackTimeout = time.Second, time.Second // a job asking a bucket that is gone
	pool, err := summarizer.NewPool(cfg, st, summarizer.Options{Policies: g, Fallback: extractive.New(),
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil },
		Logger:      zerolog.New(logs).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// ackedOnlyAfterTheCheck takes the forget bucket away while the held job is in its
// settings read, releases it, waits for the value the job writes (written says it is
// there), and checks that the job asks the bucket before it acknowledges the request:
// the request stays pending while the bucket cannot answer. With the bucket back and a
// tombstone through the conversation, the value is taken back and the request acked.
func ackedOnlyAfterTheCheck(t *testing.T, ctx context.Context, nc *nats.Conn, st *jetstream.Store, g *gatedPolicy, logs *lockedBuffer,
	conv string, through uint64, written func(*schemas.Result) bool) {
	t.Helper()
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("no job reached its settings")
	}
	if err := jsOf(t, nc).DeleteStream(ctx, "KV_"+st.Config().ForgetBucket); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	waitValue(t, ctx, st, conv, "the job's value", written)
	for !strings.Contains(logs.String(), "cannot tell yet whether the conversation was forgotten meanwhile") {
		select {
		case <-ctx.Done():
			t.Fatalf("the job never asked the forget bucket after its write; logs:\n%s", logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if p, err := st.Queue().Pending(ctx, conv); err != nil || p == nil {
		t.Fatalf("pending request while the tombstone check cannot answer: %+v, %v; want it unacknowledged until the check answers", p, err)
	}
	jstest.Provision(t, nc)
	tombstoneOnly(t, nc, st, conv, through)
	for {
		v, _, verr := st.Results().Get(ctx, conv, true)
		p, perr := st.Queue().Pending(ctx, conv)
		if verr == nil && perr == nil && v == nil && p == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after the forget: value %+v (%v), pending %+v (%v); want both gone", v, verr, p, perr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A decline writes its marker, then checks the tombstone, then acknowledges (the
// guarantee the commit path keeps): before the fix it acknowledged first, so a crash
// between the ack and the check left the marker of a forgotten conversation.
func TestDeclineChecksTheTombstoneBeforeItsAck(t *testing.T) {
	summarizer.SetForgetCheckWait(t, 300*time.Millisecond)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := needleMessages(t, ctx, st, "dq", "d", 0, 2, map[uint64]string{}) // nothing to compact
	g, logs := newGatedPolicy(), &lockedBuffer{}
	g.armed.Store(true)
	gatedPool(t, st, g, extractive.New(), logs)
	request(t, ctx, st, "dq", last)
	ackedOnlyAfterTheCheck(t, ctx, nc, st, g, logs, "dq", last, func(v *schemas.Result) bool { return v.DeclinedAtSeq == last })
}

// A repair that finds the fallback's messages gone from CHAT marks the value
// repair_gap, then checks the tombstone, then acknowledges: before the fix it
// acknowledged first.
func TestRepairGapChecksTheTombstoneBeforeItsAck(t *testing.T) {
	summarizer.SetForgetCheckWait(t, 300*time.Millisecond)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, sum := newOutageLLM(t)
	last := needleMessages(t, ctx, st, "gq", "g", 0, 10, map[uint64]string{}) // past the hard limit
	g, logs := newGatedPolicy(), &lockedBuffer{}
	gatedPool(t, st, g, sum, logs)
	req := request(t, ctx, st, "gq", last)
	if ev, err := st.Events().WaitOutcome(ctx, "gq", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed with the fallback", ev, err)
	}
	v1, _, err := st.Results().Get(ctx, "gq", true)
	if err != nil || v1 == nil || !v1.BuiltOnFallback {
		t.Fatalf("value %+v, %v; want a fallback", v1, err)
	}
	g.armed.Store(true) // the next repair delivery
	chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.DeleteMsg(ctx, v1.FirstSeq); err != nil { // as the age limit would
		t.Fatal(err)
	}
	ackedOnlyAfterTheCheck(t, ctx, nc, st, g, logs, "gq", last, func(v *schemas.Result) bool { return v.RepairGap })
}
