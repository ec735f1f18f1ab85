package triggers_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/triggers"
)

// A gap in the consumer's deliveries must be applied by the first handler of a delivery
// at or after it. With the dispatch queue, a delivery from before the gap may still be
// waiting behind its conversation's handler: were it to take the signal, it would
// rebuild only through its own sequence, and the delivery after the gap would count on
// top of that, never counting the message another process handled in the gap (found by
// review: 612 tokens counted instead of 816).
func TestAGapIsAppliedByTheDeliveryAfterIt(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPinnedTTL = time.Second
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
	g := &gated{conv: "split", entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := triggers.New(testConfig(), tst, g, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	released := false
	open := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	t.Cleanup(func() { open(); stop(); <-done })

	m := text(800)
	per := tokens.Message(&m)
	handled(t, nc, st, publish(t, st, "warm", text(40))) // pinned and reading

	// m1's handler blocks in its rebuild (the policy read); m2 is delivered and waits
	// in the conversation's queue behind it.
	publish(t, st, "split", m)
	<-g.entered
	s2 := publish(t, st, "split", m)
	js := testJS(t, nc)
	cons, err := js.Consumer(ctx, cfg.ChatStream, cfg.TriggerConsumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m2 delivered to the trigger", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= s2
	})

	// Another client takes the pin and handles m3 (the gap).
	r.Pause(true)
	chat, err := js.Stream(ctx, cfg.ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := chat.UnpinConsumer(ctx, cfg.TriggerConsumer, cfg.TriggerGroup); err != nil {
		t.Fatal(err)
	}
	publish(t, st, "split", m) // m3
	taken := 0
	waitFor(t, "the other client to take m3", func() bool {
		batch, err := cons.Fetch(1, natsjs.FetchPriorityGroup(cfg.TriggerGroup), natsjs.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for msg := range batch.Messages() {
			if err := msg.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			taken++
		}
		return taken == 1
	})
	if err := chat.UnpinConsumer(ctx, cfg.TriggerConsumer, cfg.TriggerGroup); err != nil {
		t.Fatal(err)
	}
	r.Pause(false)
	s4 := publish(t, st, "split", m) // after the gap: the trigger sees it and marks states stale
	waitFor(t, "m4 delivered to the trigger", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream >= s4
	})
	// The consumer hands messages over in order: once a later message of another
	// conversation is counted, m4 (and the gap before it) has been seen.
	publish(t, st, "other", text(40))
	waitFor(t, "a message after m4 to be counted", func() bool { _, ok := b.TokensOf("other"); return ok })
	open()
	handled(t, nc, st, s4)
	if got, _ := b.TokensOf("split"); got != 4*per {
		t.Fatalf("%d tokens counted (%d messages); want %d (four messages, one handled by another client)", got, got/per, 4*per)
	}
}
