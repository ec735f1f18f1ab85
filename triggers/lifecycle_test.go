package triggers_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/triggers"
)

// The trigger's state is a cache: a conversation untouched for EvictAfter is dropped,
// unless a request is in flight for it, and rebuilt from KV and the stream on its next
// message, counting each message once.
func TestIdleStateIsEvictedAndRebuilt(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	cfg := testConfig()
	cfg.EvictAfter = 500 * time.Millisecond
	tr := startWith(t, st, cfg)
	m := text(800)
	per := tokens.Message(&m)
	// "held" crosses the threshold first: its request is in flight, so its state stays
	// although it is the older of the two.
	for range 15 {
		publish(t, st, "held", m)
	}
	waitFor(t, "held's request", func() bool { return reqs.count() == 1 })
	var seqs []uint64
	for range 3 {
		seqs = append(seqs, publish(t, st, "quiet", m))
	}
	waitFor(t, "quiet's messages to be counted", func() bool { got, _ := tr.b.TokensOf("quiet"); return got == 3*per })
	if n := tr.b.Tracked(); n != 2 {
		t.Fatalf("tracking %d conversations; want 2", n)
	}
	waitFor(t, "the quiet conversation to be evicted", func() bool { return tr.b.Tracked() == 1 })
	if _, ok := tr.b.TokensOf("quiet"); ok {
		t.Fatal("the evicted conversation is still tracked")
	}
	if got, ok := tr.b.TokensOf("held"); !ok || got != 15*per {
		t.Fatalf("held: %d tokens, tracked %v; want its state kept (%d) while its request is in flight", got, ok, 15*per)
	}
	// While it was evicted, a compaction covered its first two messages: the rebuild
	// starts from that value and counts the tail from the stream.
	v := &schemas.Result{SchemaVersion: 1, Conversation: "quiet", Generation: 1, Summary: "what the first two messages said",
		TailStartSeq: seqs[2], CoveredThroughSeq: seqs[1], LoadedThroughSeq: seqs[2], CreatedAt: time.Now().UTC()}
	if _, err := st.Results().Put(context.Background(), v, 0); err != nil {
		t.Fatal(err)
	}
	publish(t, st, "quiet", m)
	sm := assemble.SummaryMessage(v)
	want := tokens.Message(&sm) + 2*per // the summary, the third and the new message
	waitFor(t, "the state to be rebuilt from KV and the stream", func() bool { got, _ := tr.b.TokensOf("quiet"); return got == want })
	if n := tr.b.Tracked(); n != 2 {
		t.Fatalf("tracking %d conversations after the rebuild; want 2", n)
	}
	reqs.sync(t)
	if n := reqs.count(); n != 1 {
		t.Fatalf("%d requests; want only held's", n)
	}
}

// takeRequest takes the next request off the work queue as a worker whose attempts all
// failed does (Term), so the conversation's slot is free again.
func takeRequest(t *testing.T, st *jetstream.Store) schemas.Request {
	t.Helper()
	d, req := fetchRequest(t, st)
	if err := d.Term(context.Background(), "taken by the test"); err != nil {
		t.Fatal(err)
	}
	return req
}

// fetchRequest fetches the next request off the work queue, as a worker does; it stays
// in the queue until the caller settles it (or its ack wait passes).
func fetchRequest(t *testing.T, st *jetstream.Store) (*jetstream.Delivery, schemas.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := st.Queue().Requests(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		d, err := q.Next(ctx, time.Second)
		if ctx.Err() != nil {
			t.Fatal("timed out waiting for a request")
		}
		if err != nil || d == nil {
			continue
		}
		var req schemas.Request
		if err := json.Unmarshal(d.Data(), &req); err != nil {
			t.Fatal(err)
		}
		return d, req
	}
}

func failed(req schemas.Request) schemas.Event {
	return schemas.Event{Type: schemas.EventFailed, Conversation: req.Conversation, RequestID: req.RequestID,
		Trigger: req.Trigger, Error: "the summarizer is down", At: time.Now().UTC()}
}

// A failed compaction spaces the conversation's next request by FailureBackoff, doubled
// per failure in a row; the conversation, quiet meanwhile, is still asked for again
// when the backoff ends.
func TestFailedCompactionSpacesTheNextRequest(t *testing.T) {
	_, st := setup(t)
	cfg := testConfig()
	cfg.FailureBackoff = time.Second
	cfg.FailureBackoffMax = 10 * time.Second
	startWith(t, st, cfg)
	for range 15 { // over the threshold
		publish(t, st, "fb", text(800))
	}
	req := takeRequest(t, st)
	for i, want := range []time.Duration{cfg.FailureBackoff, 2 * cfg.FailureBackoff} {
		at := time.Now()
		if err := st.Events().Publish(context.Background(), failed(req)); err != nil {
			t.Fatal(err)
		}
		next := takeRequest(t, st)
		if gap := next.RequestedAt.Sub(at); gap < want {
			t.Fatalf("failure %d: the next request came %s after it; want ≥ %s", i+1, gap, want)
		}
		req = next
	}
}

// A failed event whose payload names another conversation than its subject is not
// acted on: it neither backs off the conversation its payload names nor the one its
// subject names.
func TestForeignFailedEventsAreIgnored(t *testing.T) {
	nc, st := setup(t)
	cfg := testConfig()
	cfg.FailureBackoff = time.Hour // a failure applied would hold the next request for the test's whole run
	cfg.FailureBackoffMax = time.Hour
	startWith(t, st, cfg)
	for range 15 {
		publish(t, st, "x", text(800))
	}
	first := takeRequest(t, st)
	pub := func(subject string, ev schemas.Event) {
		data, _ := json.Marshal(ev)
		if err := nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	cfgJS := st.Config()
	onY, onX := failed(first), failed(first)
	onX.Conversation = "y"
	pub(must(cfgJS.EventSubject("y")), onY) // names x in its payload only
	pub(must(cfgJS.EventSubject("x")), onX) // names x in its subject only
	// The request's real outcome: declined without a value, so no growth is owed.
	declined := schemas.Event{Type: schemas.EventDeclined, Conversation: "x", RequestID: first.RequestID, At: time.Now().UTC()}
	if err := st.Events().Publish(context.Background(), declined); err != nil {
		t.Fatal(err)
	}
	// The trigger learns of the outcome asynchronously: publish small messages until it
	// asks again. A failure applied from a foreign event would hold it for an hour.
	deadline := time.Now().Add(15 * time.Second)
	for stored(t, nc, st) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no request after the outcome: a foreign failed event backed the conversation off")
		}
		handled(t, nc, st, publish(t, st, "x", text(4)))
	}
}

func must(subject string, err error) string {
	if err != nil {
		panic(err)
	}
	return subject
}

// A request whose outcome event never reaches the trigger does not hold its
// conversation for InFlightTimeout. Events are plain NATS messages: one published while
// the trigger's connection is down (a NATS server restarting, a cluster failing over)
// is lost to it, and a worker that dies between its ack and its event never sends one.
// Once the request has left the queue, the trigger, finding nothing in flight, queues
// the next request the conversation needs, also when no message comes after.
func TestMissedOutcomeDoesNotHoldTheConversation(t *testing.T) {
	nc, st := setup(t)
	start(t, st) // InFlightTimeout is the default: 10 minutes
	// Over the threshold.
	for range 15 {
		publish(t, st, "missed", text(800))
	}
	d, _ := fetchRequest(t, st) // a worker has it
	first := stored(t, nc, st)
	// The conversation grows while the request is in flight, then goes quiet.
	handled(t, nc, st, publish(t, st, "missed", text(800)))
	if n := stored(t, nc, st); n != first {
		t.Fatalf("%d requests stored while one is in flight; want still %d", n, first)
	}
	// The worker finished (its ack frees the slot) and died before its event.
	if err := d.AckSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a request after the first one left the queue without an outcome event", func() bool {
		return stored(t, nc, st) > first
	})
}

// A trigger started while JetStream does not answer (a cluster still electing the
// leaders of its consumers, a server restarting) waits for its consumers, logging each
// attempt, instead of returning an error that stops the whole process; once JetStream
// answers, it runs.
func TestTriggerWaitsForItsConsumers(t *testing.T) {
	ns := jstest.ServerWith(t, nil)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st := jstest.Provision(t, nc)
	restart := jstest.Stop(t, ns)
	logs := &logLines{}
	b, err := triggers.New(testConfig(), st, fixed(nil), zerolog.New(logs).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { runErr = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the trigger to log a retry", func() bool {
		select {
		case <-done:
			t.Fatalf("the trigger returned while JetStream was away: %v", runErr)
		default:
		}
		return strings.Contains(logs.String(), "retrying")
	})
	restart()
	for range 15 { // over the threshold
		publish(t, st, "late", text(800))
	}
	waitFor(t, "a request once JetStream answers", func() bool { return stored(t, nc, st) > 0 })
}

// logLines collects log lines; safe for concurrent writers.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A trigger that is stopped settles the chat messages it has in hand, with a context
// of their own, instead of failing them all at once and leaving them to the consumer's
// ack wait, 30 s in which no trigger counts them (the soak's SIGTERMed trigger left
// dozens so): every message is acknowledged, and a request one calls for is queued.
func TestAStoppedTriggerSettlesTheMessagesInHand(t *testing.T) {
	nc, st := setup(t)
	g := &gated{conv: "first", entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := triggers.New(testConfig(), st, g, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	publish(t, st, "first", text(10)) // its handler hangs in the policy read
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the first handler never started")
	}
	var last uint64
	for range 15 { // over the threshold, in hand behind the hanging one
		last = publish(t, st, "behind", text(800))
	}
	cons, err := testJS(t, nc).Consumer(context.Background(), st.Config().ChatStream, st.Config().TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the messages to be in the trigger's hands", func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.Delivered.Stream >= last
	})
	cancel()
	close(g.release) // the policy read answers after the stop
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the trigger did not stop")
	}
	// Every ack has reached the server when Run returns (flushed), but the server applies
	// acks to its consumer on its own goroutine: wait for that, not for the ack wait (no
	// consumer runs any more, so an unsent ack would never come).
	var info *natsjs.ConsumerInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info, err = cons.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.AckFloor.Stream >= last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages left unacknowledged (ack floor %d of %d) by a stopped trigger", info.NumAckPending, info.AckFloor.Stream, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := stored(t, nc, st); n == 0 {
		t.Fatal("no request for the conversation over its threshold")
	}
}
