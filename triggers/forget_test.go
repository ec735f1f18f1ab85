package triggers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A trigger asking again and again for a conversation (its request refused while
// another one waits, so it retries every RetryDelay) stops when the conversation is
// forgotten: its state and retry timer are dropped, nothing of the conversation is
// queued or stored, and a message published afterwards is counted from scratch.
func TestForgetStopsTheTriggerAsking(t *testing.T) {
	nc, st := setup(t)
	r := start(t, st)
	ctx := context.Background()
	const conv = "asks"
	// A request already waits: the trigger's own is refused and retried.
	if _, err := st.Queue().Enqueue(ctx, schemas.Request{RequestID: "first", Conversation: conv, Trigger: schemas.TriggerManual,
		RequestedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 8 { // 8 × 400 tokens: over the threshold of the 4,000-token window
		last = publish(t, st, conv, text(1600))
	}
	handled(t, nc, st, last)
	waitFor(t, "the trigger to retry its refused request", func() bool { return r.b.RetryScheduled(conv) })

	if _, err := st.Forget(ctx, conv); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trigger to drop the forgotten conversation's state and timer", func() bool {
		toks, _ := r.b.TokensOf(conv)
		return toks == 0 && !r.b.RetryScheduled(conv)
	})
	if found, _ := jstest.Scan(t, nc, conv); len(found) > 0 {
		t.Fatalf("after the forget the trigger left: %v", found)
	}
	seq := publish(t, st, conv, text(400))
	handled(t, nc, st, seq)
	if toks, ok := r.b.TokensOf(conv); !ok || toks != 104 { // 400/4 + 4
		t.Fatalf("after the forget a new message counts %d tokens (tracked %v); want 104: the new conversation alone", toks, ok)
	}
}

// A value that outlived a forget (written after the tombstone by a worker that gave up
// its check or crashed before it, for an old generation) is removed by a trigger that
// meets the conversation (here one started after the forget, as after a restart or a
// handover), and not counted: the new conversation counts alone.
func TestTriggerRemovesAValueTheTombstoneCovers(t *testing.T) {
	nc, st := setup(t)
	ctx := context.Background()
	const conv = "late-value"
	publish(t, st, conv, text(400))
	out, err := st.Forget(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	late := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 3, Summary: strings.Repeat("forgotten ", 400),
		TailStartSeq: out.ThroughSeq, CoveredThroughSeq: out.ThroughSeq - 1, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
	r := start(t, st)
	seq := publish(t, st, conv, text(400))
	handled(t, nc, st, seq)
	waitFor(t, "the trigger to remove the late value", func() bool {
		v, _, err := st.Results().Get(ctx, conv, true)
		return err == nil && v == nil
	})
	if toks, ok := r.b.TokensOf(conv); !ok || toks != 104 { // 400/4 + 4
		t.Fatalf("after the forget a new message counts %d tokens (tracked %v); want 104: the new conversation alone", toks, ok)
	}
}
