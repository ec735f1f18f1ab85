package triggers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/triggers"
)

// A partition whose trigger stops with an error (here its consumer is gone: deleted by
// an operator, or the old layout's consumers removed while a process with the old count
// still runs) is started again after a backoff from the heartbeat, not at once in a
// loop that writes the bucket and logs an error on every turn. (Found by review: 269
// restarts within one heartbeat.)
func TestAFailingPartitionIsRestartedWithABackoff(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 2
	cfg.TriggerHeartbeat = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := testJS(t, nc).DeleteConsumer(ctx, cfg.ChatStream, cfg.TriggerConsumerOf(jetstream.Partition{N: 2, P: 1})); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	ps, err := triggers.NewPartitions(testConfig(), st, fixed(nil), zerolog.New(logs).Level(zerolog.ErrorLevel), "solo")
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ps.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	// Three failures: after the first, backoffs of one and two heartbeats at least.
	var first time.Time
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := strings.Count(logs.String(), "partition trigger stopped")
		if n >= 1 && first.IsZero() {
			first = time.Now()
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d failures of the partition logged in 30s; want it retried", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(first); took < 2*cfg.TriggerHeartbeat {
		t.Fatalf("three failures within %s; want a backoff of at least a heartbeat between them", took)
	}
	if got := ps.Owned(); !slices.Contains(got, 0) {
		t.Fatalf("owned %v; want the healthy partition 0 running", got)
	}
}
