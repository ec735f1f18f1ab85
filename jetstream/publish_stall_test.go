package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/jetstream/jstest"
)

// syncingStore provisions the contract on a server that syncs every write, as the
// shipped one does, reached through a relay the test can pause.
func syncingStore(t *testing.T) (*jetstream.Store, *embedded.Server, *jstest.Relay) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if !srv.SyncsEveryWrite() {
		t.Fatal("the embedded server does not sync every write")
	}
	relay := jstest.NewRelay(t, srv.NATS().Addr().String())
	nc, err := nats.Connect(relay.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return jstest.Provision(t, nc), srv, relay
}

// A burst of asynchronous publishes larger than the connection's limit of publishes in
// flight (4000), against a server that syncs every write: each publish past the limit
// waits for room, and every message is stored. (nats.go's own stall wait, 200 ms, failed
// the burst with "stalled with too many outstanding async published messages".)
func TestPublishAsyncBurstAgainstASyncingServer(t *testing.T) {
	st, _, _ := syncingStore(t)
	const burst = 4200
	futures := make([]jetstream.PubAckFuture, 0, burst)
	for i := range burst {
		f, err := st.Chat().PublishAsync("burst", []byte(`{"role":"user","content":"x"}`), "")
		if err != nil {
			t.Fatalf("publish %d of %d: %v", i+1, burst, err)
		}
		futures = append(futures, f)
	}
	select {
	case <-st.Chat().PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		t.Fatal("the burst was not acknowledged")
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %d: %v", i+1, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range st.Status(ctx).Streams {
		if s.Name == st.Config().ChatStream && s.Messages != burst {
			t.Fatalf("CHAT holds %d messages (%s); want %d", s.Messages, s.Error, burst)
		}
	}
}

// Back-pressure: with the connection's publishes in flight at the limit and no ack
// coming (the network holds what the client sends), the next publish waits for room
// instead of failing, and goes through once the acks come.
func TestPublishAsyncWaitsForRoomUnderBackPressure(t *testing.T) {
	st, _, relay := syncingStore(t)
	relay.Pause(true)
	const limit = 4000 // nats.go's default publishes in flight
	done := make(chan error, 1)
	go func() {
		for range limit + 1 {
			if _, err := st.Chat().PublishAsync("held", []byte(`{"role":"user","content":"x"}`), ""); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	deadline := time.Now().Add(30 * time.Second)
	for st.Chat().PublishAsyncPending() < limit {
		if time.Now().After(deadline) {
			t.Fatalf("%d publishes in flight; want %d", st.Chat().PublishAsyncPending(), limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The last publish waits for room: held well past nats.go's own 200 ms stall wait,
	// it has not failed.
	select {
	case err := <-done:
		t.Fatalf("the publish past the limit returned while no ack could come: %v", err)
	case <-time.After(time.Second):
	}
	relay.Pause(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the publish past the limit, once acks came: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the publish past the limit never got room")
	}
}
