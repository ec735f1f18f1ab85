package triggers_test

import (
	"context"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/triggers"
)

// A conversation whose handling waits on the network holds up none of the others: the
// consumer hands each message to its conversation and goes on, and the messages of
// the slow one are counted, in order, once it can go on.
func TestASlowConversationHoldsUpNoOther(t *testing.T) {
	nc, st := setup(t)
	g := &gated{conv: "slow", entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, err := triggers.New(testConfig(), st, g, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var release sync.Once
	open := func() { release.Do(func() { close(g.release) }) }
	t.Cleanup(func() {
		open()
		cancel()
		<-done
	})

	publish(t, st, "slow", text(400))
	<-g.entered
	publish(t, st, "slow", text(400))
	publish(t, st, "fast", text(12000))
	counted := func(conv string, want int) func() bool {
		return func() bool { got, ok := b.TokensOf(conv); return ok && got == want }
	}
	waitFor(t, "the fast conversation to be counted while the slow one waits", counted("fast", 3004))
	if n := stored(t, nc, st); n != 1 {
		t.Fatalf("requests queued: %d; want 1 (the fast conversation's)", n)
	}
	open()
	waitFor(t, "the slow conversation's two messages to be counted", counted("slow", 2*104))
}
