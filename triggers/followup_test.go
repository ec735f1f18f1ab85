package triggers_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/triggers"
)

// completeWithoutFollowUp does what a worker does up to its completed event and dies
// there: it writes a value covering only the first message with a long summary (the
// conversation stays over its threshold), acknowledges the request and publishes completed, and never queues
// the follow-up.
func completeWithoutFollowUp(t *testing.T, st *jetstream.Store, d *jetstream.Delivery, req schemas.Request, seqs []uint64) {
	t.Helper()
	ctx := context.Background()
	v := &schemas.Result{SchemaVersion: 1, Conversation: req.Conversation, Generation: 1, Summary: strings.Repeat("the first message ", 100),
		FirstSeq: seqs[0], TailStartSeq: seqs[1], CoveredThroughSeq: seqs[0], LoadedThroughSeq: seqs[len(seqs)-1],
		CreatedAt: time.Now().UTC()}
	if _, err := st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.AckSync(ctx); err != nil {
		t.Fatal(err)
	}
	ev := schemas.Event{Type: schemas.EventCompleted, Conversation: req.Conversation, RequestID: req.RequestID,
		Generation: 1, At: time.Now().UTC()}
	if err := st.Events().Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
}

// A completion that leaves the conversation over its threshold is followed up by the
// trigger when the worker did not queue the follow-up (it was killed right after its
// completed event), without waiting for the conversation's next message: a quiet
// conversation would otherwise stay over its budget with nothing queued (found by the
// cluster soak on a fresh clone).
func TestACompletionsLostFollowUpIsQueuedByTheTrigger(t *testing.T) {
	nc, st := setup(t)
	start(t, st)
	var seqs []uint64
	for range 15 { // over the threshold
		seqs = append(seqs, publish(t, st, "followed", text(800)))
	}
	d, req := fetchRequest(t, st)
	first := stored(t, nc, st)
	completeWithoutFollowUp(t, st, d, req, seqs)
	waitFor(t, "the trigger to queue the follow-up the worker did not", func() bool { return stored(t, nc, st) > first })
}

// flaky resolves settings like fixed, but fails the next fails calls: a policy bucket
// that does not answer for a while (its stream electing a leader).
type flaky struct {
	fixed
	fails atomic.Int32
}

func (f *flaky) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	if f.fails.Add(-1) >= 0 {
		return policy.Settings{}, errors.New("policy bucket not answering")
	}
	return f.fixed.Settings(ctx, conv)
}

// A conversation whose state cannot be rebuilt when its retry comes (the policy bucket
// does not answer for more than RebuildAttempts tries) is retried until it can be, and
// then asked for: it is not left for a next message that may never come.
func TestARebuildThatKeepsFailingIsRetriedUntilItWorks(t *testing.T) {
	nc, st := setup(t)
	cfg := testConfig()
	cfg.RebuildAttempts = 2
	cfg.BrokenRetry = 200 * time.Millisecond
	pol := &flaky{}
	b, err := triggers.New(cfg, st, pol, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for range 15 {
		publish(t, st, "flaky", text(800))
	}
	d, _ := fetchRequest(t, st)
	// A message while the request is in flight: the trigger looks for its end.
	handled(t, nc, st, publish(t, st, "flaky", text(800)))
	first := stored(t, nc, st)
	// The policy read fails for more retries than RebuildAttempts, then answers.
	pol.fails.Store(int32(3 * cfg.RebuildAttempts))
	// The request ends without an outcome event (its worker died after its ack): the
	// retry that finds it gone rebuilds the state.
	if err := d.AckSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a request once the state can be rebuilt", func() bool { return stored(t, nc, st) > first })
}

// With one partition, the trigger that takes over from another (its pin expired)
// adopts the requests in the queue, as a partition's new owner does: it watches their
// end, and asks again for a conversation whose request left the queue without an
// outcome, with no message of that conversation after the takeover.
func TestATakeOverAdoptsThePendingRequests(t *testing.T) {
	nc, st := setup(t) // pinned TTL 1 s
	old := start(t, st)
	for range 15 { // over the threshold: the old trigger queues a request
		publish(t, st, "adopted", text(800))
	}
	d, _ := fetchRequest(t, st) // a worker has it
	old.stop()
	start(t, st)
	// The new trigger becomes the active one with another conversation's message.
	handled(t, nc, st, publish(t, st, "other", text(10)))
	first := stored(t, nc, st)
	// The worker finished and died before its event: only a trigger that watches the
	// request finds it gone and asks again.
	if err := d.AckSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new trigger to ask again for the adopted conversation", func() bool { return stored(t, nc, st) > first })
}
