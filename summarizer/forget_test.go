package summarizer_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// held is a summarizer whose calls wait until the test releases them; its summary
// keeps every needle of its input, so a value written from a forgotten conversation
// would hold its bytes.
type held struct {
	entered chan struct{}
	release chan struct{}
	fail    error
}

func newHeld() *held { return &held{entered: make(chan struct{}, 16), release: make(chan struct{})} }

var needleRE = regexp.MustCompile(`NEEDLE-[0-9a-z]+`)

func (h *held) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	h.entered <- struct{}{}
	select {
	case <-h.release:
	case <-ctx.Done():
		return summarizer.Output{}, ctx.Err()
	}
	if h.fail != nil {
		return summarizer.Output{}, h.fail
	}
	text := in.PreviousSummary
	for _, m := range in.Messages {
		text += " " + m.Content.String()
	}
	return summarizer.Output{Summary: "Facts: " + strings.Join(needleRE.FindAllString(text, -1), " ")}, nil
}

// waitEntered waits until the summarizer holds a call.
func (h *held) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not reach the summarizer")
	}
}

// settings gives every conversation a 4,000-token window, changed by fn.
type settings func(*policy.Settings)

func (f settings) Settings(context.Context, string) (policy.Settings, error) {
	s := policy.Defaults()
	s.ContextWindow = 4000
	if f != nil {
		f(&s)
	}
	return s, s.Validate()
}

// startPool runs a pool of one worker; stop cancels it and returns once the job in
// flight has finished (the pool drains), the barrier after which nothing more is written.
func startPool(t *testing.T, st *jetstream.Store, sum summarizer.Summarizer, s settings, attempts int) (stop func()) {
	t.Helper()
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.MaxAttempts, cfg.FetchWait = 1, attempts, 200*time.Millisecond
	cfg.BackoffBase, cfg.BackoffMax = 100*time.Millisecond, time.Second
	pool, err := summarizer.NewPool(cfg, st, summarizer.Options{Policies: s, Fallback: extractive.New(),
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil },
		Logger:      zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the pool did not drain")
		}
	}
	t.Cleanup(stop)
	return stop
}

// needles publishes n messages of 1,600 characters, each with a needle of tag, and
// returns the last sequence. Eight are over the 4,000-token window's threshold.
func needles(t *testing.T, st *jetstream.Store, conv, tag string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		text := fmt.Sprintf("NEEDLE-%s%02d ", tag, i) + strings.Repeat("w", 1580)
		m := schemas.Message{Role: role, Content: schemas.Text(text)}
		data, _ := m.Encode()
		var err error
		if last, err = st.Chat().Publish(context.Background(), conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// noTrace fails when any stored message still holds the conversation.
func noTrace(t *testing.T, nc *nats.Conn, conv, tag string) {
	t.Helper()
	if found, read := jstest.Scan(t, nc, conv, "NEEDLE-"+tag); len(found) > 0 {
		t.Fatalf("%d of %d stored messages hold the forgotten conversation:\n%v", len(found), read, found)
	}
}

// A job in flight when its conversation is forgotten does not bring it back, whatever
// it writes when released: a first value (create), a next generation (compare-and-set
// on a revision the forget deleted), a declined first compaction (a generation-0
// marker), or a failure (no retry, dead letter or failed event). No event of it stays.
func TestJobInFlightDoesNotBringAForgottenConversationBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		previous bool // a value exists before the job
		settings settings
		fail     error // the summarizer's answer once released
		attempts int
		msgs     int // 8: over the threshold, under the hard limit
	}{
		{name: "first value", attempts: 3},
		{name: "next generation", previous: true, attempts: 3},
		{name: "declined first compaction", settings: func(s *policy.Settings) { s.MinProgress = 0.99 }, attempts: 3},
		{name: "failure on the last attempt", fail: errors.New("model down"), attempts: 1},
		{name: "failure to retry", fail: errors.New("model down"), attempts: 5},
		{name: "fallback past the hard limit", fail: errors.New("model down"), attempts: 5, msgs: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := jstest.Server(t)
			nc := jstest.Conn(t, srv)
			st := jstest.Provision(t, nc)
			ctx := ctxFor(t)
			last := needles(t, st, "gone", "g", cmp.Or(tc.msgs, 8))
			if tc.previous {
				v := &schemas.Result{SchemaVersion: 1, Conversation: "gone", Generation: 1, Summary: "Facts: NEEDLE-gold",
					TailStartSeq: 3, CoveredThroughSeq: 2, FirstSeq: 1, CreatedAt: time.Now()}
				if _, err := st.Results().Put(ctx, v, 0); err != nil {
					t.Fatal(err)
				}
			}
			sum := newHeld()
			sum.fail = tc.fail
			stop := startPool(t, st, sum, tc.settings, tc.attempts)
			request(t, ctx, st, "gone", last)
			sum.waitEntered(t)

			if _, err := st.Forget(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			close(sum.release)
			stop() // the job has finished: all it will ever write is written

			noTrace(t, nc, "gone", "g")
			if v, _, err := st.Results().Get(ctx, "gone", true); v != nil || err != nil {
				t.Fatalf("value after the forget: %+v, %v", v, err)
			}
		})
	}
}

// A request made before a forget but worked on after it (queued by a trigger that
// still held the conversation) is dropped, with nothing written; a value of the
// forgotten conversation that a dead process left behind is removed by the next job of
// the new conversation, which compacts from scratch, reading nothing at or below the
// tombstone.
func TestJobsAfterAForget(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxFor(t)
	last := needles(t, st, "again", "o", 10)
	out, err := st.Forget(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	sum := newHeld()
	close(sum.release)
	stop := startPool(t, st, sum, nil, 3)
	request(t, ctx, st, "again", last) // up_to_seq at or below the tombstone
	waitDrained(t, nc, st)
	if len(sum.entered) != 0 {
		t.Fatal("a request made before the forget reached the summarizer")
	}
	noTrace(t, nc, "again", "o")

	// A leftover: a value of the forgotten conversation, written after the forget by a
	// process that died before taking it back.
	left := &schemas.Result{SchemaVersion: 1, Conversation: "again", Generation: 4, Summary: "Facts: NEEDLE-oleft",
		TailStartSeq: last, CoveredThroughSeq: last - 1, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, left, 0); err != nil {
		t.Fatal(err)
	}
	newLast := needles(t, st, "again", "n", 10)
	request(t, ctx, st, "again", newLast)
	waitDrained(t, nc, st)
	stop()
	v, _, err := st.Results().Get(ctx, "again", true)
	if err != nil || v == nil {
		t.Fatalf("the new conversation was not compacted: %+v, %v", v, err)
	}
	if v.Generation != 1 || v.FirstSeq <= out.ThroughSeq || strings.Contains(v.Summary, "NEEDLE-o") || !strings.Contains(v.Summary, "NEEDLE-n00") {
		t.Fatalf("the new conversation's value: generation %d, first_seq %d (forgotten through %d), summary %q; want generation 1 of the new messages only",
			v.Generation, v.FirstSeq, out.ThroughSeq, v.Summary)
	}
	noTrace(t, nc, "NEEDLE-o", "o")
}

// waitDrained waits until the work queue holds nothing, worked on or not.
func waitDrained(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := jsOf(t, nc).Stream(ctx, st.Config().RequestsStream)
		cancel()
		if err == nil && info.CachedInfo().State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the work queue did not drain")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func jsOf(t *testing.T, nc *nats.Conn) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// tombstoneOnly writes the tombstone of a forget through seq and nothing else: a forget
// in progress, whose purges have not come yet.
func tombstoneOnly(t *testing.T, nc *nats.Conn, st *jetstream.Store, conv string, seq uint64) {
	t.Helper()
	ctx := ctxFor(t)
	kv, err := jsOf(t, nc).KeyValue(ctx, st.Config().ForgetBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(schemas.Tombstone{ThroughSeq: seq, ForgottenAt: time.Now()})
	if _, err := kv.Put(ctx, schemas.ForgetKey(conv), data); err != nil {
		t.Fatal(err)
	}
}

// While a forget is in progress (its tombstone written, its purges not yet done), a job
// of the new conversation reads nothing of the forgotten one: not its messages, not its
// value, which it removes.
func TestJobDuringAForgetReadsOnlyTheNewConversation(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxFor(t)
	old := needles(t, st, "mid", "o", 8)
	v := &schemas.Result{SchemaVersion: 1, Conversation: "mid", Generation: 2, Summary: "Facts: NEEDLE-ovalue",
		TailStartSeq: 5, CoveredThroughSeq: 4, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	tombstoneOnly(t, nc, st, "mid", old)
	last := needles(t, st, "mid", "n", 8)
	sum := newHeld()
	close(sum.release)
	stop := startPool(t, st, sum, nil, 3)
	request(t, ctx, st, "mid", last)
	waitDrained(t, nc, st)
	stop()
	got, _, err := st.Results().Get(ctx, "mid", true)
	if err != nil || got == nil {
		t.Fatalf("the new conversation was not compacted: %+v, %v", got, err)
	}
	if got.Generation != 1 || got.FirstSeq <= old || strings.Contains(got.Summary, "NEEDLE-o") || !strings.Contains(got.Summary, "NEEDLE-n00") {
		t.Fatalf("value during the forget: generation %d, first_seq %d (tombstone through %d), summary %q; want generation 1 of the new messages only",
			got.Generation, got.FirstSeq, old, got.Summary)
	}
}
