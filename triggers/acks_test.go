package triggers_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// countAcks counts the acknowledgements sent to the chat trigger consumer, as the
// server receives them: a core subscription on its ack subjects.
func countAcks(t *testing.T, nc *nats.Conn, st *jetstream.Store) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	subj := fmt.Sprintf("$JS.ACK.%s.%s.>", st.Config().ChatStream, st.Config().TriggerConsumer)
	sub, err := nc.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return &n
}

// The chat trigger consumer Provision creates acknowledges all below the message
// acknowledged, and the trigger acknowledges many messages at once: far fewer
// acknowledgements reach the server than messages, and every message is acknowledged.
func TestTriggerAcknowledgesInBatches(t *testing.T) {
	nc, st := setup(t)
	info, err := testJS(t, nc).Consumer(context.Background(), st.Config().ChatStream, st.Config().TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if p := info.CachedInfo().Config.AckPolicy; p != natsjs.AckAllPolicy {
		t.Fatalf("trigger consumer's ack policy %v; want all", p)
	}
	const n = 1000
	var last uint64
	for i := range n {
		last = publish(t, st, fmt.Sprintf("batched-%d", i%50), text(20))
	}
	acks := countAcks(t, nc, st)
	start(t, st)
	handled(t, nc, st, last)
	if got := acks.Load(); got*4 > n {
		t.Fatalf("%d acknowledgements for %d messages; want fewer than one for four", got, n)
	} else {
		t.Logf("%d acknowledgements for %d messages", got, n)
	}
}

// A trigger consumer made before acknowledgements were batched (explicit acks) is no
// conflict: Provision keeps it, and the trigger acknowledges each message on it.
func TestAnExplicitTriggerConsumerIsKeptAndAckedPerMessage(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := jetstream.Provision(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	// The consumer as an earlier version made it.
	js := testJS(t, nc)
	old, err := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	oc := old.CachedInfo().Config
	if err := js.DeleteConsumer(ctx, cfg.ChatStream, cfg.TriggerConsumer); err != nil {
		t.Fatal(err)
	}
	oc.AckPolicy = natsjs.AckExplicitPolicy
	if _, err := js.CreateConsumer(ctx, cfg.ChatStream, oc); err != nil {
		t.Fatal(err)
	}
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("provision over an explicit trigger consumer: %v", err)
	}
	const n = 40
	var last uint64
	for i := range n {
		last = publish(t, st, fmt.Sprintf("explicit-%d", i%5), text(20))
	}
	acks := countAcks(t, nc, st)
	start(t, st)
	handled(t, nc, st, last)
	waitFor(t, "an acknowledgement per message", func() bool { return acks.Load() == n })
	if c, _ := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer); c.CachedInfo().Config.AckPolicy != natsjs.AckExplicitPolicy {
		t.Fatal("provision changed the consumer's ack policy")
	}
}

// Messages another process took and left in hand (it crashed, or froze) before this
// trigger became active again are counted: with one acknowledgement for all below, the
// trigger's next acknowledgement would otherwise settle them, and the server never
// delivers them again. Here the ack wait is far longer than the test, so only the
// catch-up can count them.
func TestMessagesAnotherOwnerLeftInHandAreCounted(t *testing.T) {
	rt := relayedTrigger(t, 10*time.Minute)
	first := publish(t, rt.st, "warm-up", text(20))
	handled(t, rt.nc, rt.st, first)
	leaveInHand(t, rt, "orphan", 15) // over the threshold
	later := publish(t, rt.st, "later", text(20))
	handled(t, rt.nc, rt.st, later) // the orphan's messages are acknowledged with it...
	if req := takeRequest(t, rt.st); req.Conversation != "orphan" {
		t.Fatalf("request for %q; want orphan, counted by the catch-up", req.Conversation)
	}
}

// leaveInHand has another client take n messages of conv, published while it holds
// the pin, and never acknowledge them: a process that crashed or froze with them in
// hand.
func leaveInHand(t *testing.T, rt relayedRun, conv string, n int) {
	t.Helper()
	anotherClientTakes(t, rt, n, func() {
		for range n {
			publish(t, rt.st, conv, text(800))
		}
	}, func(natsjs.Msg) {})
}

// anotherClientTakes holds the relayed trigger's pulls while another client takes the
// pin of its consumer: publish runs once the pin is free, then the other client
// fetches n messages and hands each to settle; then the pin is given back and the
// trigger's pulls resume.
func anotherClientTakes(t *testing.T, rt relayedRun, n int, publish func(), settle func(natsjs.Msg)) {
	t.Helper()
	ctx, nc, cfg, r := rt.ctx, rt.nc, rt.cfg, rt.relay
	r.Pause(true)
	js := testJS(t, nc)
	chat, err := js.Stream(ctx, cfg.ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.UnpinConsumer(ctx, cfg.TriggerConsumer, cfg.TriggerGroup); err != nil {
		t.Fatal(err)
	}
	publish()
	taken := 0
	waitFor(t, fmt.Sprintf("the other client to take %d messages", n), func() bool {
		batch, err := cons.Fetch(n-taken, natsjs.FetchPriorityGroup(cfg.TriggerGroup), natsjs.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			settle(msg)
			taken++
		}
		return taken == n
	})
	if err := chat.UnpinConsumer(ctx, cfg.TriggerConsumer, cfg.TriggerGroup); err != nil {
		t.Fatal(err)
	}
	r.Pause(false)
}

// A catch-up recount that hangs (the conversation's policy read does not answer) is
// parked after ParkAfter, so the barrier it holds does not hold back the
// acknowledgement of every later message; once the read answers, the conversation is
// counted and asked for.
func TestACatchUpRecountThatHangsIsParked(t *testing.T) {
	cfg := testConfig()
	cfg.ParkAfter = 300 * time.Millisecond
	var g *gated
	var release func()
	rt := relayedTriggerWith(t, 10*time.Minute, func(st *jetstream.Store) *running {
		var r *running
		r, g, release = startGated(t, st, cfg, "orphan")
		return r
	})
	first := publish(t, rt.st, "warm-up", text(20))
	handled(t, rt.nc, rt.st, first)
	leaveInHand(t, rt, "orphan", 15)
	later := publish(t, rt.st, "later", text(20))
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the orphan's recount never started")
	}
	handled(t, rt.nc, rt.st, later) // past the barrier, while the recount hangs
	release()
	if req := takeRequest(t, rt.st); req.Conversation != "orphan" {
		t.Fatalf("request for %q; want orphan", req.Conversation)
	}
}

// A chat message held in hand (its conversation's rebuild hangs) is parked after
// ParkAfter: its conversation's recount is armed in ACTIVITY and the messages after it
// are acknowledged, so one conversation does not hold the consumer's max ack pending.
// Once the rebuild answers again the parked message is counted.
func TestAMessageHeldInHandIsParked(t *testing.T) {
	nc, st := setup(t)
	cfg := testConfig()
	cfg.ParkAfter = 300 * time.Millisecond
	r, g, release := startGated(t, st, cfg, "hangs")
	held := publish(t, st, "hangs", text(800))
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the hanging conversation's rebuild never started")
	}
	var last uint64
	for range 20 {
		last = publish(t, st, "flows", text(20))
	}
	handled(t, nc, st, last) // past the message in hand
	// Its recount is armed: the timer message on its ACTIVITY subject says so.
	subj, err := st.Config().ActivitySubject("hangs")
	if err != nil {
		t.Fatal(err)
	}
	m, err := testJS(t, nc).Stream(context.Background(), st.Config().ActivityStream)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := m.GetLastMsgForSubject(context.Background(), subj)
	if err != nil || !strings.Contains(string(rm.Data), `"recount":true`) {
		t.Fatalf("ACTIVITY's message for hangs: %v, %v; want its recount", rm, err)
	}
	release()
	waitFor(t, "the parked message to be counted", func() bool { got, _ := r.b.TokensOf("hangs"); return got > 0 })
	_ = held
}
