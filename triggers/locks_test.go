package triggers_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/triggers"
)

// gated resolves settings like fixed, but holds the calls for one conversation until
// released: a policy read that hangs (a slow or partitioned KV).
type gated struct {
	fixed
	conv    string
	entered chan struct{}
	release chan struct{}
}

func (g *gated) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	if conv == g.conv {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return g.fixed.Settings(ctx, conv)
}

// Crack 4: a conversation whose state is being rebuilt over a network call that hangs
// holds no lock the others need. While it hangs, a failed event for another
// conversation is applied and that conversation is asked for again when its backoff
// ends.
func TestAHangingConversationHoldsNoLockOthersNeed(t *testing.T) {
	_, st := setup(t)
	cfg := testConfig()
	cfg.FailureBackoff = 200 * time.Millisecond
	g := &gated{conv: "hangs", entered: make(chan struct{}, 1), release: make(chan struct{})}
	tr, err := triggers.New(cfg, st, g, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() {
		close(g.release)
		cancel()
		<-done
	})
	for range 15 { // over the threshold
		publish(t, st, "busy", text(800))
	}
	req := takeRequest(t, st)
	publish(t, st, "hangs", text(10))
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the hanging conversation's rebuild never started")
	}
	// The chat handler now hangs in the other conversation's rebuild.
	if err := st.PublishEvent(context.Background(), failed(req)); err != nil {
		t.Fatal(err)
	}
	next := takeRequest(t, st)
	if next.Conversation != "busy" {
		t.Fatalf("next request for %q; want busy asked for again after its backoff", next.Conversation)
	}
}

// Crack 8: a rebuild after a policy change keeps the request in flight: the next
// message does not queue a second request while the first is being worked on.
func TestRebuildKeepsTheRequestInFlight(t *testing.T) {
	nc, st := setup(t)
	start(t, st)
	for range 15 { // over the threshold
		publish(t, st, "inflight", text(800))
	}
	takeRequest(t, st) // a worker has it now, no outcome yet
	first := stored(t, nc, st)
	// The policy changes (the state goes stale), then the conversation speaks.
	if err := st.PutPolicy(context.Background(), "inflight", []byte(`{"threshold":"0.7"}`), 0); err != nil {
		t.Fatal(err)
	}
	// The ack floor of the next message shows the trigger handled it, over the rebuilt
	// state (with the rebuild dropping the request in flight, this queues a second one).
	seq := publish(t, st, "inflight", text(800))
	handled(t, nc, st, seq)
	if n := stored(t, nc, st); n != first {
		t.Fatalf("%d requests stored after the rebuild; want still %d (one is in flight)", n, first)
	}
}
