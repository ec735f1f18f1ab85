package triggers_test

import (
	"context"
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
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
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

// startGated runs a trigger (cfg) whose policy reads for conv hang until release is
// called (at most once; the cleanup calls it when the test did not, then stops the
// trigger).
func startGated(t *testing.T, st *jetstream.Store, cfg triggers.Config, conv string) (r *running, g *gated, release func()) {
	t.Helper()
	g = &gated{conv: conv, entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := triggers.New(cfg, st, g, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r = &running{b: b, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	var once sync.Once
	release = func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(func() {
		release()
		r.stop()
	})
	return r, g, release
}

// Crack 4: a conversation whose state is being rebuilt over a network call that hangs
// holds no lock the others need. While it hangs, a failed event for another
// conversation is applied and that conversation is asked for again when its backoff
// ends.
func TestAHangingConversationHoldsNoLockOthersNeed(t *testing.T) {
	_, st := setup(t)
	cfg := testConfig()
	cfg.FailureBackoff = 200 * time.Millisecond
	_, g, _ := startGated(t, st, cfg, "hangs")
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
	if err := st.Events().Publish(context.Background(), failed(req)); err != nil {
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
	fetchRequest(t, st) // a worker has it now, no outcome yet
	first := stored(t, nc, st)
	// The policy changes (the state goes stale), then the conversation speaks.
	if err := st.Policies().Put(context.Background(), "inflight", []byte(`{"threshold":"0.7"}`), 0); err != nil {
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

// A message redelivered after later ones were counted (its request could not be
// queued, so it was not acknowledged) rebuilds a stale state without forgetting them.
func TestARedeliveryDoesNotForgetLaterMessages(t *testing.T) {
	nc, st := setup(t)
	cfg := testConfig()
	cfg.RetryDelay = 300 * time.Millisecond
	tr := startWith(t, st, cfg)
	if err := testJS(t, nc).DeleteStream(context.Background(), st.Config().RequestsStream); err != nil {
		t.Fatal(err)
	}
	m := text(800)
	for range 20 { // past the threshold from the 15th on: those are naked, the queue is gone
		publish(t, st, "redelivered", m)
	}
	per := tokens.Message(&m)
	waitFor(t, "every message to be counted", func() bool { got, _ := tr.b.TokensOf("redelivered"); return got == 20*per })
	if err := st.Policies().Put(context.Background(), "redelivered", []byte(`{"threshold":"0.7"}`), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the policy change to be signalled", func() bool { return tr.b.SignalPending("redelivered") })
	// No new message: the next handler is a redelivery of a naked message.
	waitFor(t, "a redelivery to rebuild the state", func() bool { return !tr.b.SignalPending("redelivered") })
	if got, _ := tr.b.TokensOf("redelivered"); got != 20*per {
		t.Fatalf("%d tokens after the rebuild; want %d (every message counted, not only those before the redelivered one)", got, 20*per)
	}
}

// A large tool output that is the first message after a compaction (its state rebuilt
// on it) calls for a structural compaction.
func TestStructuralTriggerRightAfterARebuild(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st, func(s *policy.Settings) { s.ToolOutputTriggerTokens = 500 })
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function",
		Function: schemas.FunctionCall{Name: "read_file", Arguments: `{"path":"big.log"}`}}}}
	seq := publish(t, st, "structural", call)
	handled(t, nc, st, seq)
	if err := st.Policies().Put(context.Background(), "structural", []byte(`{"threshold":"0.7"}`), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the policy change to be signalled", func() bool { return tr.b.SignalPending("structural") })
	out := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat("log line ", 400))}
	publish(t, st, "structural", out)
	waitFor(t, "a structural request", func() bool { return reqs.count() == 1 })
	reqs.mu.Lock()
	got := reqs.got[0]
	reqs.mu.Unlock()
	if got.Trigger != schemas.TriggerStructural {
		t.Fatalf("request %+v; want a structural one", got)
	}
}

// A message whose first delivery was lost in transit (sent while the trigger's
// connection died: its server was killed, a cluster failed over), and that comes back
// only after later messages were counted, is counted too: the gap in the deliveries
// makes the trigger count the conversation again from the stream. Before, the
// redelivery, older than the watermark, was taken as counted already, and the estimate
// stayed short of the conversation.
func TestRedeliveryOfAMessageLostInTransitIsCounted(t *testing.T) {
	rt := relayedTrigger(t, 5*time.Second) // the lost delivery comes back after it
	ctx, nc, st, cfg, r, tnc, tr := rt.ctx, rt.nc, rt.st, rt.cfg, rt.relay, rt.tnc, rt.tr
	w, x, y := text(400), text(800), text(1200)
	tw, tx, ty := tokens.Message(&w), tokens.Message(&x), tokens.Message(&y)
	publish(t, st, "lost", w)
	waitFor(t, "the first message to be counted", func() bool { got, _ := tr.b.TokensOf("lost"); return got == tw })

	r.Mute(true)
	xs := publish(t, st, "lost", x)
	cons, err := testJS(t, nc).Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second message to be sent to the trigger", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= xs
	})
	r.Break()
	waitFor(t, "the trigger to reconnect", func() bool { return tnc.Stats().Reconnects > 0 && tnc.IsConnected() })
	ys := publish(t, st, "lost", y)
	// The third message is delivered before the lost one comes back (after the ack
	// wait), and counted; handled waits for the lost one too.
	waitFor(t, "the third message to be counted", func() bool {
		got, _ := tr.b.TokensOf("lost")
		return got >= tw+ty
	})
	handled(t, nc, st, ys)
	if got, _ := tr.b.TokensOf("lost"); got != tw+tx+ty {
		t.Fatalf("%d tokens counted; want %d (all three messages)", got, tw+tx+ty)
	}
}

// A message whose first delivery was lost in transit, and that a compaction covered
// before it came back, is not counted again when it does: it is older than the tail
// of the value the trigger's state is built on, so it is in the summary. Counted
// again, such messages made the trigger ask for compactions with nothing to compact
// (the cluster soak's declined events), and a decline holds the conversation until it
// grows.
func TestARedeliveryACompactionCoveredIsNotCountedAgain(t *testing.T) {
	rt := relayedTrigger(t, 3*time.Second)
	ctx, nc, st, cfg, r, _, tr := rt.ctx, rt.nc, rt.st, rt.cfg, rt.relay, rt.tnc, rt.tr
	handled(t, nc, st, publish(t, st, "warm", text(40))) // the trigger is pinned and reading

	r.Mute(true)
	seq := publish(t, st, "covered", text(800))
	cons, err := testJS(t, nc).Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the message to be sent to the trigger", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= seq
	})
	// Meanwhile a compaction summarized it.
	v := &schemas.Result{SchemaVersion: 1, Conversation: "covered", Generation: 1, Summary: "what it said",
		TailStartSeq: seq + 1, CoveredThroughSeq: seq, LoadedThroughSeq: seq, CreatedAt: time.Now().UTC()}
	if _, err := st.Results().Put(ctx, v, 0); err != nil {
		t.Fatal(err)
	}
	r.Break()
	handled(t, nc, st, seq) // redelivered after the ack wait, and acknowledged
	sm := assemble.SummaryMessage(v)
	if got, want := func() int { n, _ := tr.b.TokensOf("covered"); return n }(), tokens.Message(&sm); got != want {
		t.Fatalf("%d tokens counted; want %d (the summary alone)", got, want)
	}
}

// Messages another trigger process was given while it held the pin for a moment (a
// failover, or the pin moving when a consumer leader changed) are counted by this one
// once it is given messages again: the gap in its deliveries tells it that every state
// it holds may lack messages, and each is rebuilt from the stream before it is used.
// Before, the two processes each counted part of the conversation, neither reached
// the threshold, and the cluster soak found conversations left over it.
func TestMessagesAnotherTriggerHandledAreCounted(t *testing.T) {
	rt := relayedTrigger(t, 0)
	nc, st, tr := rt.nc, rt.st, rt.tr
	m := text(800)
	per := tokens.Message(&m)
	for range 3 {
		publish(t, st, "split", m)
	}
	waitFor(t, "three messages to be counted", func() bool { got, _ := tr.b.TokensOf("split"); return got == 3*per })

	// This process's pulls are held while another client takes the pin and handles two
	// messages.
	var last uint64
	anotherClientTakes(t, rt, 2, func() {
		publish(t, st, "split", m)
		last = publish(t, st, "split", m)
	}, func(msg natsjs.Msg) {
		if err := msg.DoubleAck(rt.ctx); err != nil {
			t.Fatal(err)
		}
	})
	handled(t, nc, st, last)
	seq := publish(t, st, "split", m)
	handled(t, nc, st, seq)
	if got, _ := tr.b.TokensOf("split"); got != 6*per {
		t.Fatalf("%d tokens counted; want %d (six messages, two of them handled by another process)", got, 6*per)
	}
}

// relayedRun is a trigger whose connection goes through a relay that can lose what the
// server sends it, next to the test's own connection to the same server.
type relayedRun struct {
	ctx   context.Context
	nc    *nats.Conn // the test's
	st    *jetstream.Store
	cfg   jetstream.Config
	relay *jstest.Relay
	tnc   *nats.Conn // the trigger's, through the relay
	tr    *running
}

// relayedTrigger provisions a server (the trigger's pin expiring after 1 s, its ack
// wait ackWait unless 0) and starts a trigger on a connection through a relay.
func relayedTrigger(t *testing.T, ackWait time.Duration) relayedRun {
	t.Helper()
	return relayedTriggerWith(t, ackWait, func(st *jetstream.Store) *running { return start(t, st) })
}

// relayedTriggerWith is relayedTrigger with the trigger that run starts on the relayed
// store.
func relayedTriggerWith(t *testing.T, ackWait time.Duration, run func(*jetstream.Store) *running) relayedRun {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPinnedTTL = time.Second
	if ackWait > 0 {
		cfg.TriggerAckWait = ackWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := jstest.NewRelay(t, srv.NATS().Addr().String())
	tnc, err := nats.Connect(r.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tnc.Close)
	tst, err := jetstream.Open(ctx, tnc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return relayedRun{ctx: ctx, nc: nc, st: st, cfg: cfg, relay: r, tnc: tnc, tr: run(tst)}
}
