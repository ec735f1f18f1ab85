package triggers_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/schemas/tokens"
)

// A hot conversation whose handler is held up (its rebuild hangs on a policy read) does
// not stall the others: its queued deliveries are bounded, the surplus acknowledged and
// counted from the stream when its handler gets to them, so the consumer's max ack
// pending (4,096) is never filled by one conversation. Once its handler runs again,
// every one of its messages is counted once.
func TestAHotConversationDoesNotStallTheOthers(t *testing.T) {
	nc, st := setup(t)
	r, g, release := startGated(t, st, testConfig(), "hot")
	tr := r.b
	m := text(4)
	b, _ := m.Encode()
	const hot = 4200 // more than the consumer's max ack pending
	for range hot {
		if _, err := st.Chat().PublishAsync("hot", b, ""); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-st.Chat().PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("the hot conversation's messages were not all acked")
	}
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the hot conversation's rebuild never started")
	}
	// Another conversation, published after every hot message, is counted while the hot
	// one's handler still hangs.
	cold := text(40)
	publish(t, st, "cold", cold)
	waitFor(t, "the cold conversation to be counted", func() bool {
		got, ok := tr.TokensOf("cold")
		return ok && got == tokens.Message(&cold)
	})
	release()
	want := hot * tokens.Message(&m)
	waitFor(t, "every hot message to be counted once", func() bool {
		got, _ := tr.TokensOf("hot")
		return got == want
	})
	handled(t, nc, st, uint64(hot+1))
}
