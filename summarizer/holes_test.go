package summarizer_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// counting is the extractive summarizer, counting its calls.
type counting struct{ calls atomic.Int32 }

func (c *counting) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	c.calls.Add(1)
	return extractive.New().Summarize(ctx, in)
}

// interleaved publishes n messages of conv, one of another conversation after every
// second, and one bare message of conv (a client that sets none of Compactor's fields,
// no headers) as its fourth; it returns conv's sequences.
func interleaved(t *testing.T, ctx context.Context, nc *nats.Conn, st *jetstream.Store, conv string, n int) []uint64 {
	t.Helper()
	subj, err := st.Config().ChatSubject(conv)
	if err != nil {
		t.Fatal(err)
	}
	js := testJetStream(t, nc)
	var seqs []uint64
	for i := range n {
		if i == 3 {
			ack, err := js.Publish(ctx, subj, []byte(`{"role":"user","content":"`+strings.Repeat("b", 1600)+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, ack.Sequence)
			continue
		}
		seqs = append(seqs, seed(t, ctx, st, conv, 1))
		if i%2 == 1 {
			seed(t, ctx, st, conv+"-other", 1)
		}
	}
	return seqs
}

// witnessed queues a budget request of conv carrying what a trigger saw: seqs.
func witnessedRequest(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, seqs []uint64) schemas.Request {
	t.Helper()
	w := holes.Of(seqs[0], seqs[len(seqs)-1], seqs)
	req := schemas.Request{RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerBudget,
		Reason: "test", RequestedAt: time.Now().UTC(), UpToSeq: seqs[len(seqs)-1], Witness: &w}
	if _, err := st.Queue().Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	return req
}

func holesPool(t *testing.T, st *jetstream.Store, sum summarizer.Summarizer) {
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers = 1
	pcfg.BackoffBase, pcfg.BackoffMax = 100*time.Millisecond, time.Second
	pcfg.FetchWait = 200 * time.Millisecond
	runPool(t, st, pcfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return sum, nil }})
}

// A message deleted from the middle of a conversation's history directly on the
// stream (as a lost or corrupted record looks to a reader) after the trigger saw it:
// the worker declines, naming its sequence, in the reason and the event; nothing is
// summarized; the value records the hole, and a later request (without a witness, as a
// manual one) is declined for it again. The deleted message is the bare one of a
// client that sets none of Compactor's fields.
func TestAHoleIsDeclinedNamingItsSequence(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seqs := interleaved(t, ctx, nc, st, "holed", 10)
	lost := seqs[3]
	chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.SecureDeleteMsg(ctx, lost); err != nil {
		t.Fatal(err)
	}
	sum := &counting{}
	req := witnessedRequest(t, ctx, st, "holed", seqs)
	holesPool(t, st, sum)
	ev, err := st.Events().WaitOutcome(ctx, "holed", req.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventDeclined || len(ev.Holes) != 1 || !slices.Equal(ev.Holes[0].Seqs, []uint64{lost}) {
		t.Fatalf("outcome %s %q holes %+v; want declined naming seq %d", ev.Type, ev.Error, ev.Holes, lost)
	}
	if !strings.Contains(ev.Error, "hole") || !strings.Contains(ev.Error, "seq "+itoa(lost)) {
		t.Errorf("reason %q does not name the hole's sequence %d", ev.Error, lost)
	}
	v, _, err := st.Results().Get(ctx, "holed", true)
	if err != nil || v == nil {
		t.Fatalf("value %v, %v", v, err)
	}
	if v.Generation != 0 || v.Summary != "" || len(v.Holes) != 1 || !slices.Equal(v.Holes[0].Seqs, []uint64{lost}) {
		t.Fatalf("value generation %d summary %q holes %+v; want a decline marker recording the hole", v.Generation, v.Summary, v.Holes)
	}
	// Later, more messages and a request with no witness: declined for the same hole.
	last := seed(t, ctx, st, "holed", 4)
	again := request(t, ctx, st, "holed", last)
	ev, err = st.Events().WaitOutcome(ctx, "holed", again.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventDeclined || len(ev.Holes) != 1 || !slices.Equal(ev.Holes[0].Seqs, []uint64{lost}) {
		t.Fatalf("second outcome %s %q holes %+v; want declined for the recorded hole", ev.Type, ev.Error, ev.Holes)
	}
	if n := sum.calls.Load(); n != 0 {
		t.Fatalf("the summarizer was called %d times; want never across the hole", n)
	}
}

// Messages forgotten (below the tombstone) or gone with the stream's oldest ones (a
// purge of CHAT up to a sequence, which is what its age limit leaves a reader) after
// the trigger saw them are not holes: the compaction goes on. Nor are many producers'
// messages interleaved with other conversations'.
func TestForgottenOrAgedOutMessagesAreNotHoles(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sum := &counting{}
	holesPool(t, st, sum)
	completes := func(t *testing.T, conv string, req schemas.Request) {
		t.Helper()
		ev, err := st.Events().WaitOutcome(ctx, conv, req.RequestID, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != schemas.EventCompleted || len(ev.Holes) > 0 {
			t.Fatalf("outcome %s %q holes %+v; want completed", ev.Type, ev.Error, ev.Holes)
		}
		v, _, err := st.Results().Get(ctx, conv, true)
		if err != nil || v == nil || len(v.Holes) > 0 || len(v.Witnessed) == 0 {
			t.Fatalf("value %+v, %v: want no hole, and what it read witnessed", v, err)
		}
	}

	t.Run("interleaved producers", func(t *testing.T) {
		seqs := interleaved(t, ctx, nc, st, "busy", 12)
		completes(t, "busy", witnessedRequest(t, ctx, st, "busy", seqs))
	})

	t.Run("forgotten", func(t *testing.T) {
		before := interleaved(t, ctx, nc, st, "forgot", 3)
		if _, err := st.Forget(ctx, "forgot"); err != nil {
			t.Fatal(err)
		}
		after := interleaved(t, ctx, nc, st, "forgot", 10)
		// A trigger that saw both sides of the forget.
		completes(t, "forgot", witnessedRequest(t, ctx, st, "forgot", append(before, after...)))
	})

	t.Run("aged out", func(t *testing.T) {
		seqs := interleaved(t, ctx, nc, st, "aged", 12)
		chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
		if err != nil {
			t.Fatal(err)
		}
		if err := chat.Purge(ctx, natsjs.WithPurgeSequence(seqs[2])); err != nil {
			t.Fatal(err)
		}
		completes(t, "aged", witnessedRequest(t, ctx, st, "aged", seqs))
	})
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// An operator's accepted loss (compactor verify --accept records it on the value):
// the next request, though its witness still counts the lost message, is summarized
// across it, and the value keeps the mark; a message lost later, above the mark, is a
// hole again.
func TestAnAcceptedLossIsSummarizedAcross(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seqs := interleaved(t, ctx, nc, st, "accepted", 10)
	lost := seqs[3]
	chat, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.SecureDeleteMsg(ctx, lost); err != nil {
		t.Fatal(err)
	}
	sum := &counting{}
	req := witnessedRequest(t, ctx, st, "accepted", seqs)
	holesPool(t, st, sum)
	if ev, err := st.Events().WaitOutcome(ctx, "accepted", req.RequestID, time.Time{}); err != nil || ev.Type != schemas.EventDeclined {
		t.Fatalf("first outcome %+v, %v; want declined for the hole", ev, err)
	}
	// The operator accepts the loss, as verify --accept writes it.
	v, rev, err := st.Results().Get(ctx, "accepted", true)
	if err != nil || v == nil || len(v.Holes) != 1 {
		t.Fatalf("value %+v, %v; want the recorded hole", v, err)
	}
	v.Holes, v.LossAcceptedThroughSeq = nil, v.Holes[0].ThroughSeq
	if _, err := st.Results().Put(ctx, v, rev); err != nil {
		t.Fatal(err)
	}
	seqs = append(seqs, seed(t, ctx, st, "accepted", 1))
	again := witnessedRequest(t, ctx, st, "accepted", seqs) // still counts the lost one
	ev, err := st.Events().WaitOutcome(ctx, "accepted", again.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventCompleted || len(ev.Holes) != 0 {
		t.Fatalf("outcome after the accepted loss %s %q holes %+v; want completed across it", ev.Type, ev.Error, ev.Holes)
	}
	if sum.calls.Load() == 0 {
		t.Fatal("the summarizer was not called after the loss was accepted")
	}
	v, _, err = st.Results().Get(ctx, "accepted", true)
	if err != nil || v == nil || v.Generation != 1 || v.LossAcceptedThroughSeq != seqs[len(seqs)-2] {
		t.Fatalf("value %+v, %v; want generation 1 keeping the accepted mark %d", v, err, seqs[len(seqs)-2])
	}
	// A message lost later, above the mark, is a hole again.
	more := []uint64{}
	for range 6 {
		more = append(more, seed(t, ctx, st, "accepted", 1))
	}
	if err := chat.SecureDeleteMsg(ctx, more[2]); err != nil {
		t.Fatal(err)
	}
	third := witnessedRequest(t, ctx, st, "accepted", more)
	ev, err = st.Events().WaitOutcome(ctx, "accepted", third.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventDeclined || len(ev.Holes) != 1 || !slices.Equal(ev.Holes[0].Seqs, []uint64{more[2]}) {
		t.Fatalf("outcome for a later loss %s %q holes %+v; want declined naming seq %d", ev.Type, ev.Error, ev.Holes, more[2])
	}
}
