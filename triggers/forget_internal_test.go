package triggers

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

type window4000 struct{}

func (window4000) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = 4000
	return s, s.Validate()
}

// A trigger that never hears the forgotten event (it was disconnected, or stood by
// when it was published) still stops asking: its next request finds the tombstone after
// writing, is taken back with its event, and the state is dropped; the next message
// starts the conversation from scratch. The trigger here consumes CHAT without the
// events subscription of Run.
func TestTriggerThatMissedTheForgetStopsAsking(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	cfg := DefaultConfig()
	cfg.RetryDelay = 100 * time.Millisecond
	tr, err := New(cfg, st, window4000{}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	chat, err := st.Chat().Consume(ctx, func(d *jetstream.Delivery) { tr.onMessage(ctx, d) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(chat.Drain)

	const conv = "deaf"
	if _, err := st.Queue().Enqueue(ctx, schemas.Request{RequestID: "first", Conversation: conv, Trigger: schemas.TriggerManual,
		RequestedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 8 {
		data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 1600))}).Encode()
		if last, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (tokens int, retry, forgotten bool) {
		e := tr.lookup(conv)
		if e == nil {
			return 0, false, false
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.st == nil {
			return 0, false, false
		}
		return e.st.tokens, e.st.retry != nil, e.st.forgotten
	}
	waitUntil(t, "the trigger to retry its refused request", func() bool { _, retry, _ := state(); return retry })

	if _, err := st.Forget(ctx, conv); err != nil {
		t.Fatal(err)
	}
	// The retry after the forget queues (the forget purged the pending request), finds
	// the tombstone and takes the request back.
	waitUntil(t, "the trigger to find the tombstone after asking", func() bool { _, retry, forgotten := state(); return forgotten && !retry })
	if found, _ := jstest.Scan(t, nc, conv); len(found) > 0 {
		t.Fatalf("after the forget the trigger left: %v", found)
	}
	data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 400))}).Encode()
	seq, err := st.Chat().Publish(ctx, conv, data, "")
	if err != nil || seq <= last {
		t.Fatal(err)
	}
	waitUntil(t, "the trigger to count the new conversation", func() bool { toks, _, _ := state(); return toks == 104 })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// While a forget is in progress (its tombstone written, its purges not yet done), a
// trigger that starts, or rebuilds a conversation's state, counts nothing of the
// forgotten conversation: not its messages still in CHAT, not its value.
func TestTriggerDuringAForgetCountsOnlyTheNewConversation(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const conv = "mid"
	var old uint64
	var err error
	for range 8 {
		data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 1600))}).Encode()
		if old, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: strings.Repeat("s", 2000),
		TailStartSeq: 3, CoveredThroughSeq: 2, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, st.Config().ForgetBucket)
	if err != nil {
		t.Fatal(err)
	}
	tomb, _ := json.Marshal(schemas.Tombstone{ThroughSeq: old, ForgottenAt: time.Now()})
	if _, err := kv.Put(ctx, schemas.ForgetKey(conv), tomb); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RetryDelay = 100 * time.Millisecond
	tr, err := New(cfg, st, window4000{}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 400))}).Encode()
	if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
		t.Fatal(err)
	}
	tokens := func() int {
		e := tr.lookup(conv)
		if e == nil {
			return -1
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.st == nil {
			return -1
		}
		return e.st.tokens
	}
	waitUntil(t, "the trigger to count the new message", func() bool { return tokens() >= 104 })
	if got := tokens(); got != 104 {
		t.Fatalf("the trigger counts %d tokens; want 104, the new message alone", got)
	}
	if r, err := st.Queue().Pending(ctx, conv); r != nil || err != nil {
		t.Fatalf("the trigger asked for a compaction of the forgotten conversation: %+v, %v", r, err)
	}
}

// A conversation seen for the first time is read from any replica, which may not have
// its tombstone yet: the trigger then counts the forgotten messages still in CHAT. The
// forgotten event, published after the tombstone, drops that state, and the rebuild that
// follows reads the tombstone from the leader: only the new conversation is counted.
func TestFirstSightThatMissedTheTombstoneIsCorrectedByTheForgottenEvent(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const conv = "lagging"
	var old uint64
	var err error
	for range 2 {
		data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 1600))}).Encode()
		if old, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	// The forget is under way: its tombstone is written, its purges not yet done.
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, st.Config().ForgetBucket)
	if err != nil {
		t.Fatal(err)
	}
	tomb, _ := json.Marshal(schemas.Tombstone{ThroughSeq: old, ForgottenAt: time.Now()})
	if _, err := kv.Put(ctx, schemas.ForgetKey(conv), tomb); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RetryDelay = 100 * time.Millisecond
	tr, err := New(cfg, st, window4000{}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	// A replica that has neither the tombstone nor a value yet answers the first sight.
	var sights atomic.Int32
	tr.firstSight = func(context.Context, string) (*schemas.Tombstone, *schemas.Result, uint64, error) {
		sights.Add(1)
		return nil, nil, 0, nil
	}
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 400))}).Encode()
	if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
		t.Fatal(err)
	}
	tokens := func() int {
		e := tr.lookup(conv)
		if e == nil {
			return -1
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.st == nil {
			return -1
		}
		return e.st.tokens
	}
	waitUntil(t, "the trigger to count the new message", func() bool { return tokens() >= 104 })
	if got := tokens(); got <= 104 {
		t.Fatalf("the lagging answer was not used: %d tokens counted", got)
	}
	if err := st.Events().Publish(ctx, schemas.Event{Type: schemas.EventForgotten, Conversation: conv,
		RequestID: schemas.NewRequestID(), At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the forgotten event to drop the forgotten messages", func() bool { return tokens() == 104 })
	if r, err := st.Queue().Pending(ctx, conv); r != nil || err != nil {
		t.Fatalf("the trigger asked for a compaction of the forgotten conversation: %+v, %v", r, err)
	}
	// A rebuild after a stale signal reads from the leaders too, not as a first sight.
	tr.onPolicy(conv)
	if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the trigger to count the next message", func() bool { return tokens() >= 208 })
	if got := tokens(); got != 208 {
		t.Fatalf("after the stale signal the trigger counts %d tokens; want 208", got)
	}
	if n := sights.Load(); n != 1 {
		t.Fatalf("%d first-sight reads; want 1, the first", n)
	}
}

// A conversation the trigger holds nothing of yet, but for which a signal came (a
// policy change, a value written: the events subscription found its entry), is read
// from the leaders: the signal may be of a write a replica lacks.
func TestFirstSightNotAfterASignal(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const conv = "signalled"
	tr, err := New(DefaultConfig(), st, window4000{}, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	var sights atomic.Int32
	tr.firstSight = func(context.Context, string) (*schemas.Tombstone, *schemas.Result, uint64, error) {
		sights.Add(1)
		return nil, nil, 0, nil
	}
	tr.get(conv)
	tr.onPolicy(conv)
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	data, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 400))}).Encode()
	if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the trigger to count the message", func() bool { n, ok := tr.TokensOf(conv); return ok && n == 104 })
	if n := sights.Load(); n != 0 {
		t.Fatalf("%d first-sight reads after a signal; want 0", n)
	}
}
