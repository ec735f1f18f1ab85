package jetstream_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// A trigger with nothing to read keeps its pin: its pulls expire, and are renewed,
// within the pinned TTL. With the client's default 30 s pull expiry, a trigger that got
// fewer messages than half its batch in a pinned TTL sent no pull in it, lost its pin
// ("nats: pin ID mismatch"), and counted every conversation again.
func TestAQuietTriggerKeepsItsPin(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPinnedTTL = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	var errs atomic.Int32
	c, err := st.Chat().Consume(ctx, func(d *jetstream.Delivery) { got.Add(1); _ = d.Ack() }, func(error) { errs.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Drain()
	if _, err := st.Chat().Publish(ctx, "quiet", []byte(`{"role":"user","content":"hello"}`), ""); err != nil {
		t.Fatal(err)
	}
	waitUntilTrue(t, "the first delivery", func() bool { return got.Load() == 1 })
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pin := func() natsjs.PriorityGroupState {
		cons, err := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
		if err != nil {
			t.Fatal(err)
		}
		groups := cons.CachedInfo().PriorityGroups
		if len(groups) != 1 {
			t.Fatalf("priority groups %+v; want one", groups)
		}
		return groups[0]
	}
	first := pin()
	if first.PinnedClientID == "" {
		t.Fatal("the consumer pinned no client after a delivery")
	}
	// Quiet for well over the pinned TTL: the property under test is what a span of
	// time without messages does to the pin.
	quiet := time.Now().Add(3 * cfg.TriggerPinnedTTL)
	for time.Now().Before(quiet) {
		if p := pin(); p.PinnedClientID != first.PinnedClientID {
			t.Fatalf("the pin moved from %s to %q after %s without messages; want it kept",
				first.PinnedClientID, p.PinnedClientID, time.Since(first.PinnedTS).Round(time.Millisecond))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := st.Chat().Publish(ctx, "quiet", []byte(`{"role":"user","content":"again"}`), ""); err != nil {
		t.Fatal(err)
	}
	waitUntilTrue(t, "the second delivery, to the same client", func() bool { return got.Load() == 2 })
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d consumer errors (a pin ID mismatch is one); want none", n)
	}
}

func waitUntilTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
