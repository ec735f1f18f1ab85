package summarizer_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// strict is window4000 with a progress no compaction reaches: every result is declined.
type strict struct{}

func (strict) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	s, err := window4000{}.Settings(ctx, conv)
	s.MinProgress = 0.99
	return s, err
}

// racing summarizes like the extractive summarizer, but the first time it is called
// another writer changes the conversation's value meanwhile.
type racing struct {
	st   *jetstream.Store
	once sync.Once
	err  error
}

func (r *racing) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	r.once.Do(func() {
		cur, rev, err := r.st.Results().Get(ctx, in.Conversation, true)
		if err != nil {
			r.err = err
			return
		}
		next := &schemas.Result{SchemaVersion: 1, Conversation: in.Conversation, Generation: 1, Summary: "written meanwhile",
			TailStartSeq: 1, CreatedAt: time.Now().UTC()}
		if cur != nil {
			next.Generation = cur.Generation + 1
		}
		_, r.err = r.st.Results().Put(ctx, next, rev)
	})
	return extractive.New().Summarize(ctx, in)
}

// Crack 8: a decline whose compare-and-set loses to another writer records nothing,
// publishes no declined event and is tried again on the new value, where it is declined
// and recorded.
func TestDeclineAfterARevisionMismatchIsTriedAgain(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := seed(t, ctx, st, "raced", 8)
	sum := &racing{st: st}
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers = 1
	pcfg.BackoffBase, pcfg.BackoffMax = 100*time.Millisecond, time.Second
	pcfg.FetchWait = 200 * time.Millisecond
	var mu sync.Mutex
	var declined []schemas.Event
	sub, err := st.Events().Subscribe("raced", func(ev schemas.Event) {
		if ev.Type == schemas.EventDeclined {
			mu.Lock()
			declined = append(declined, ev)
			mu.Unlock()
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	req := request(t, ctx, st, "raced", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: strict{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	ev, err := st.Events().WaitOutcome(ctx, "raced", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventDeclined {
		t.Fatalf("outcome %+v, %v; want declined", ev, err)
	}
	if sum.err != nil {
		t.Fatalf("the competing write failed: %v", sum.err)
	}
	v, _, err := st.Results().Get(ctx, "raced", true)
	if err != nil || v == nil {
		t.Fatal(err)
	}
	if v.Summary != "written meanwhile" || v.DeclinedAtSeq != last {
		t.Fatalf("value summary %q declined_at_seq %d; want the competing value, with the decline recorded on it at %d", v.Summary, v.DeclinedAtSeq, last)
	}
	// The subscription's callback runs on its own: wait until it has had the outcome's
	// event. A declined event of the decline that lost the race would have come before it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		seen := slices.ContainsFunc(declined, func(d schemas.Event) bool { return d.At.Equal(ev.At) })
		n := len(declined)
		mu.Unlock()
		if seen {
			if n != 1 {
				t.Fatalf("%d declined events; want 1 (none for the decline that lost the race)", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outcome's declined event did not reach the subscription within 10s (%d others did)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A value with a newer schema_version than this worker knows is not overwritten: the
// request fails at once (no retry can help) with a dead letter and a failed event that
// say to upgrade, and the value stays as it was.
func TestNewerSchemaIsNotOverwritten(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := seed(t, ctx, st, "future", 1)
	newer := []byte(`{"schema_version":9,"conversation":"future","generation":"g-12"}`)
	js := testJetStream(t, nc)
	kv, err := js.KeyValue(ctx, st.Config().ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "future", newer); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	req := request(t, ctx, st, "future", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) {
			calls.Add(1)
			return extractive.New(), nil
		}})
	ev, err := st.Events().WaitOutcome(ctx, "future", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventFailed || !strings.Contains(ev.Error, "schema_version 9") {
		t.Fatalf("outcome %+v, %v; want failed, naming the newer schema_version", ev, err)
	}
	e, err := kv.Get(ctx, "future")
	if err != nil || string(e.Value()) != string(newer) {
		t.Fatalf("value after the request: %s, %v; want it untouched", e.Value(), err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a summarizer was made %d times for a value this worker cannot read", n)
	}
}

// testJetStream is a JetStream context of the test's own, to look at and change what
// the pool works on behind its back.
func testJetStream(t *testing.T, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// A request is never terminated without its dead letter: when the record cannot be
// written, the request comes back and is dead-lettered once the record can be.
func TestNoTermWithoutADeadLetter(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	cfg := st.Config()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := testJetStream(t, nc)
	if err := js.DeleteStream(ctx, cfg.DeadStream); err != nil {
		t.Fatal(err)
	}
	last := seed(t, ctx, st, "unrecorded", 8)
	cons, err := js.Consumer(ctx, cfg.RequestsStream, cfg.WorkerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	sum := &down{cons: cons}
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.MaxAttempts = 1, 1
	pcfg.BackoffBase, pcfg.BackoffMax = 100*time.Millisecond, time.Second
	pcfg.FetchWait = 200 * time.Millisecond
	req := request(t, ctx, st, "unrecorded", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
	// The last attempt failed and its dead letter could not be written: the request is
	// delivered again rather than terminated.
	for {
		if at, _ := sum.calls(); len(at) >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the request was not delivered again after its dead letter failed")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := jetstream.Provision(ctx, nc, cfg); err != nil { // COMPACT_DEAD is back
		t.Fatal(err)
	}
	ev, err := st.Events().WaitOutcome(ctx, "unrecorded", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventFailed {
		t.Fatalf("outcome %+v, %v; want failed", ev, err)
	}
	subj, _ := cfg.DeadSubject("unrecorded")
	dead, err := js.Stream(ctx, cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dead.GetLastMsgForSubject(ctx, subj); err != nil {
		t.Fatalf("no dead letter once the stream was back: %v", err)
	}
}

// Issue 18: a decline marker does not carry stale fields of the value before it: a
// pinned and kept message gone from CHAT is dropped with its override (as a compaction
// drops it), and repair_of, the audit of the write before, is not carried; what the
// next compaction builds on stays.
func TestDeclineMarkerCarriesNothingStale(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := seed(t, ctx, st, "stale", 8)
	before := &schemas.Result{SchemaVersion: 1, Conversation: "stale", Generation: 2, Summary: "the summary",
		TailStartSeq: 5, CoveredThroughSeq: 4, PinnedSeqs: []uint64{1, 3}, KeptSeqs: []uint64{3},
		Overrides: []schemas.Override{{Seq: 3, KeepHead: 10, KeepTail: 10, Note: "[cut]"}},
		RepairOf:  1, LLMBaseGeneration: 2, FirstSeq: 1, RequestID: "earlier", TokensBefore: 3500, TokensAfter: 2000,
		CreatedAt: time.Now().UTC()}
	if _, err := st.Results().Put(ctx, before, 0); err != nil {
		t.Fatal(err)
	}
	chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.DeleteMsg(ctx, 3); err != nil { // the kept message left CHAT
		t.Fatal(err)
	}
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers, pcfg.FetchWait = 1, 200*time.Millisecond
	req := request(t, ctx, st, "stale", last)
	runPool(t, st, pcfg, summarizer.Options{Policies: strict{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	ev, err := st.Events().WaitOutcome(ctx, "stale", req.RequestID, time.Time{})
	if err != nil || ev.Type != schemas.EventDeclined {
		t.Fatalf("outcome %+v, %v; want declined", ev, err)
	}
	v, _, err := st.Results().Get(ctx, "stale", true)
	if err != nil || v == nil {
		t.Fatal(v, err)
	}
	if v.DeclinedAtSeq != last || v.Generation != 2 || v.Summary != "the summary" || v.TailStartSeq != 5 || v.LLMBaseGeneration != 2 {
		t.Fatalf("marker %+v; want the value before, declined at %d", v, last)
	}
	if !slices.Equal(v.PinnedSeqs, []uint64{1}) || len(v.KeptSeqs) != 0 || len(v.Overrides) != 0 {
		t.Fatalf("marker pinned %v kept %v overrides %v; want the message gone from CHAT dropped", v.PinnedSeqs, v.KeptSeqs, v.Overrides)
	}
	if v.RepairOf != 0 {
		t.Fatalf("marker repair_of %d; a decline repairs nothing", v.RepairOf)
	}
}
