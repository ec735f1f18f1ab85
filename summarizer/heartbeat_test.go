package summarizer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// slowPolicy resolves like window4000 after a pause: a job whose loading and planning
// take longer than the ack wait.
type slowPolicy struct{ pause time.Duration }

func (p slowPolicy) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	select {
	case <-time.After(p.pause):
	case <-ctx.Done():
	}
	return window4000{}.Settings(ctx, conv)
}

// The heartbeat covers the whole job, not only the LLM call: a job that spends three ack
// waits before it reaches the summarizer keeps its request, which no other worker gets.
func TestHeartbeatCoversTheWholeJob(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.WorkerAckWait = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	last := seed(t, ctx, st, "slow", 8)
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers = 2 // a free worker would take a redelivered request
	pcfg.InProgressEvery = 250 * time.Millisecond
	pcfg.FetchWait = 200 * time.Millisecond
	req := request(t, ctx, st, "slow", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: slowPolicy{pause: 3 * cfg.WorkerAckWait},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	ev, err := st.Events().WaitOutcome(ctx, "slow", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v, %v; want completed", ev, err)
	}
	deliveredOnce(t, ctx, nc, cfg)
}

// deliveredOnce fails t unless the workers' consumer delivered its one request once:
// a job whose heartbeat lapsed would have had it delivered again.
func deliveredOnce(t *testing.T, ctx context.Context, nc *nats.Conn, cfg jetstream.Config) {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Fatalf("the request was delivered %d times (%d redelivered); want once: the job's heartbeat lapsed", info.Delivered.Consumer, info.NumRedelivered)
	}
}
