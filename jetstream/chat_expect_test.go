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
