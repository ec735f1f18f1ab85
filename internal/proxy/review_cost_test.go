package proxy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// Review (CPU): tailStart looks for the client's copy of each stored tail message by
// hashing every client message before the anchor again, for each stored message: its
// cost is (tail length) x (history length) canonical encodings and SHA-256s of the
// client's messages. A client whose own conversation has a long tail sends a long
// history that holds the newest message and none of the tail (all within
// COMPACTOR_PROXY_MAX_BODY), and one request holds a core of the shared proxy for
// minutes. Here 1,000 tail messages and 3,000 history messages of 1 KiB each: linear
// work is milliseconds; this takes tens of seconds.
func TestReviewManagedTailSearchIsNotQuadratic(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		var stored []schemas.Message
		for i := range 1000 {
			stored = append(stored, user(fmt.Sprintf("stored %d", i)))
		}
		f.turn("q", stored, "NEWEST reply")
		putValueAt(f, "q", 1, "SUMMARY of the first message", 1)

		pad := strings.Repeat("x", 1024)
		var h []schemas.Message
		for i := range 3000 {
			h = append(h, user(fmt.Sprintf("client %d %s", i, pad)))
		}
		h = append(h, bot("NEWEST reply"), user("next"))
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := f.conv.Prepare(f.ctx, "q", h, f.opts)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			t.Logf("prepare took %v", time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("one managed turn (1,000 tail messages, 3,000 history messages) still running after %v", time.Since(start))
		}
	})
}
