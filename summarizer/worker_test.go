package summarizer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
)

type window4000 struct{}

func (window4000) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = 4000
	return s, s.Validate()
}

// down is a summarizer that always fails. At each call it records when, and how many
// deliveries the work-queue consumer has made so far (the request's NumDelivered, as
// there is only one request).
type down struct {
	cons natsjs.Consumer

	mu        sync.Mutex
	at        []time.Time
	delivered []uint64
}

var errDown = errors.New("the summarizer is down")

func (d *down) Summarize(ctx context.Context, _ summarizer.Input) (summarizer.Output, error) {
	now := time.Now()
	var n uint64
	if info, err := d.cons.Info(ctx); err == nil {
		n = info.Delivered.Consumer
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at = append(d.at, now)
	d.delivered = append(d.delivered, n)
	return summarizer.Output{}, errDown
}

func (d *down) calls() ([]time.Time, []uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.at...), append([]uint64(nil), d.delivered...)
}

// Invariant 4, in the worker: a failing summarizer gets the request redelivered after
// the backoff of Config.BackoffBase (doubling, ±25% jitter), each delivery counted, and
// after MaxAttempts it is terminated with a dead letter and a failed event; no value is
// written and nothing more is delivered.
func TestFailingSummarizerIsRetriedWithBackoffThenDeadLettered(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	cfg := st.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	last := seed(t, ctx, st, "w", 8) // over the threshold, under the hard limit
	sum := &down{cons: cons}
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.MaxAttempts = 1, 3
	pcfg.BackoffBase, pcfg.BackoffMax = 400*time.Millisecond, 5*time.Second
	pcfg.FetchWait = 200 * time.Millisecond
	req := request(t, ctx, st, "w", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})

	ev, err := st.Events().WaitOutcome(ctx, "w", req.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventFailed || !strings.Contains(ev.Error, errDown.Error()) {
		t.Fatalf("outcome = %+v; want failed with the summarizer's error", ev)
	}
	at, delivered := sum.calls()
	if len(at) != pcfg.MaxAttempts {
		t.Fatalf("%d summarizer calls; want one per attempt, %d", len(at), pcfg.MaxAttempts)
	}
	for i := range at {
		if delivered[i] != uint64(i+1) {
			t.Fatalf("attempt %d ran at delivery %d; want NumDelivered to grow by one per attempt (%v)", i+1, delivered[i], delivered)
		}
		if i == 0 {
			continue
		}
		// The nak's delay is the floor of the next delivery: BackoffBase × 2^(attempt-1)
		// less the jitter's 25%. The ceiling only shows the nak, not the consumer's ack
		// wait, brought it back.
		floor := pcfg.BackoffBase << (i - 1) * 3 / 4
		if gap := at[i].Sub(at[i-1]); gap < floor || gap >= cfg.WorkerAckWait/2 {
			t.Fatalf("attempt %d came %s after attempt %d; want ≥ %s (the backoff) and well under the ack wait %s", i+1, gap, i, floor, cfg.WorkerAckWait)
		}
	}
	dead, err := js.Stream(ctx, cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := cfg.DeadSubject("w")
	m, err := dead.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	var dl schemas.DeadLetter
	if err := json.Unmarshal(m.Data, &dl); err != nil {
		t.Fatal(err)
	}
	if dl.Attempts != uint64(pcfg.MaxAttempts) || dl.Request.RequestID != req.RequestID || !strings.Contains(dl.Error, errDown.Error()) {
		t.Fatalf("dead letter = %+v; want the request, %d attempts and the error", dl, pcfg.MaxAttempts)
	}
	// Terminated: the consumer holds nothing more to deliver, now or later.
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("after the last attempt the consumer has %d pending, %d unacknowledged, %d to redeliver; want none",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	if at, _ := sum.calls(); len(at) != pcfg.MaxAttempts {
		t.Fatalf("%d summarizer calls after the dead letter; want %d", len(at), pcfg.MaxAttempts)
	}
	if v, _, err := st.Results().Get(ctx, "w", true); err != nil || v != nil {
		t.Fatalf("a failed compaction wrote a value: %+v, %v", v, err)
	}
}
