package summarizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// Issue 18: a worker that takes a request and then freezes (a SIGSTOP, a lost machine:
// it never acks, naks or sends a heartbeat again) holds it only for the default ack
// wait, a few seconds: another worker gets it and completes it. The time is what the
// outcome's arrival shows, not a sleep.
func TestFrozenWorkersRequestReturnsWithinSeconds(t *testing.T) {
	srv := jstest.Server(t)
	st := jstest.Provision(t, jstest.Conn(t, srv)) // the default config, ack wait included
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := seed(t, ctx, st, "frozen", 8)
	req := request(t, ctx, st, "frozen", last)

	frozen, err := st.Queue().Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, err := frozen.Next(ctx, 5*time.Second)
	if err != nil || d == nil {
		t.Fatalf("the frozen worker took nothing: %v", err)
	}
	took := time.Now() // from here on it does nothing with d

	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	waitCtx, stop := context.WithTimeout(ctx, 3*jetstream.DefaultConfig().WorkerAckWait/2)
	defer stop()
	ev, err := st.Events().WaitOutcome(waitCtx, "frozen", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("after %s: outcome %+v, %v; want completed by the other worker within the ack wait", time.Since(took).Round(time.Millisecond), ev, err)
	}
	if after := time.Since(took); after > 10*time.Second {
		t.Fatalf("the frozen worker's request came back after %s; want a few seconds", after)
	}
	t.Logf("the frozen worker's request was completed by another %s after it was taken", time.Since(took).Round(time.Millisecond))
}

// The pool's default heartbeat leaves room for two lost ones within the default ack
// wait, so only a dead or frozen worker loses its request.
func TestDefaultHeartbeatFitsTheDefaultAckWait(t *testing.T) {
	hb, ack := summarizer.DefaultConfig().InProgressEvery, jetstream.DefaultConfig().WorkerAckWait
	if 3*hb > ack {
		t.Fatalf("heartbeat every %s, ack wait %s: want at least three heartbeats per ack wait", hb, ack)
	}
}

// A process whose heartbeat is slower than the ack wait of the consumer it finds
// (provisioned by another process, with another setting) beats as often as that ack
// wait needs: a job that spends three ack waits before it reaches the summarizer keeps
// its request.
func TestHeartbeatFollowsTheConsumersAckWait(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.WorkerAckWait = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := seed(t, ctx, st, "slow", 8)
	pcfg := summarizer.DefaultConfig() // a 2 s heartbeat: over the consumer's 1.5 s ack wait
	pcfg.Workers = 2                   // a free worker would take a redelivered request
	pcfg.FetchWait = 200 * time.Millisecond
	req := request(t, ctx, st, "slow", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: slowPolicy{pause: 3 * cfg.WorkerAckWait},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	ev, err := st.Events().WaitOutcome(ctx, "slow", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed", ev, err)
	}
	q, err := st.Queue().Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if aw := q.AckWait(); aw != cfg.WorkerAckWait {
		t.Fatalf("the consumer's ack wait reads %s; want %s", aw, cfg.WorkerAckWait)
	}
	deliveredOnce(t, ctx, nc, cfg)
}
