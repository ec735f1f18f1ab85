package jetstream_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// PublishExpecting stores a message only where the conversation's newest message is
// the one expected: of two writers that read the same newest message, the second
// stores nothing, and neither does a retry once the conversation moved on.
func TestPublishExpectingStoresOnlyAfterTheExpectedMessage(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx, ch := ctxT(t), st.Chat()
		first := []byte(`{"role":"user","content":"first"}`)
		s1, err := ch.PublishExpecting(ctx, "exp", first, "id-1", jetstream.TraceHeader{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.PublishExpecting(ctx, "exp", []byte(`{"role":"user","content":"other"}`), "id-x", jetstream.TraceHeader{}, 0); !errors.Is(err, jetstream.ErrWrongLastSeq) {
			t.Fatalf("a second first message: %v; want ErrWrongLastSeq", err)
		}
		// The server checks the expectation before the id: a retry once the conversation
		// moved past it is refused too, and stores nothing.
		if _, err := ch.PublishExpecting(ctx, "exp", first, "id-1", jetstream.TraceHeader{}, 0); !errors.Is(err, jetstream.ErrWrongLastSeq) {
			t.Fatalf("a retry of the first message: %v; want ErrWrongLastSeq", err)
		}
		if seq, err := ch.LastSeq(ctx, "exp"); err != nil || seq != s1 {
			t.Fatalf("last seq %d, %v; want %d", seq, err, s1)
		}
		if _, err := ch.PublishExpecting(ctx, "exp", []byte(`{"role":"assistant","content":"second"}`), "id-2", jetstream.TraceHeader{}, s1); err != nil {
			t.Fatalf("after the expected message: %v", err)
		}
		if seq, err := ch.LastSeq(ctx, "exp"); err != nil || seq == s1 {
			t.Fatalf("last seq %d, %v", seq, err)
		}
	})
}

// The expectation holds across a change of the trigger's partitions: the stream's
// subject transform stores the conversation's messages on another subject after it
// (chat.<conv>.msg, then chat.<conv>.msg.<N>.<p>), and the newest message of the
// conversation is the newest of every layout, not of the new subject (which has none):
// a writer expecting it stores, and one expecting something older does not.
func TestPublishExpectingAcrossAPartitionChange(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	ctx := ctxT(t)
	cfg := jetstream.DefaultConfig()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := st.Chat().PublishExpecting(ctx, "moved", []byte(`{"role":"user","content":"first"}`), "id-1", jetstream.TraceHeader{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TriggerPartitions, cfg.UpdateExisting = 4, true
	st4, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := st4.Chat().PublishExpecting(ctx, "moved", []byte(`{"role":"assistant","content":"second"}`), "id-2", jetstream.TraceHeader{}, s1)
	if err != nil {
		t.Fatalf("after the partition change, expecting the conversation's newest message (seq %d): %v", s1, err)
	}
	if _, err := st4.Chat().PublishExpecting(ctx, "moved", []byte(`{"role":"user","content":"stale"}`), "id-3", jetstream.TraceHeader{}, s1); !errors.Is(err, jetstream.ErrWrongLastSeq) {
		t.Fatalf("expecting seq %d after %d was stored: %v; want ErrWrongLastSeq", s1, s2, err)
	}
	if _, err := st4.Chat().PublishExpecting(ctx, "other", []byte(`{"role":"user","content":"new"}`), "id-4", jetstream.TraceHeader{}, 0); err != nil {
		t.Fatalf("a new conversation's first message, expecting none: %v", err)
	}
}
