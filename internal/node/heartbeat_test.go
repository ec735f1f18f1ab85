package node_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/internal/node"
)

// Issue 18: a worker's heartbeat goes three times per ack wait, and at least every 2 s,
// whatever COMPACTOR_WORKER_ACK_WAIT says: a process still set to the old 30 s beats
// often enough for a consumer another process provisioned at the new default.
func TestHeartbeatEveryThirdOfTheAckWaitAtMostTwoSeconds(t *testing.T) {
	for ack, want := range map[time.Duration]time.Duration{
		3 * time.Second:  time.Second,
		6 * time.Second:  2 * time.Second,
		30 * time.Second: 2 * time.Second,
	} {
		if got := (node.Settings{AckWait: ack}).Summarizer().InProgressEvery; got != want {
			t.Errorf("ack wait %s: heartbeat every %s; want %s", ack, got, want)
		}
	}
}
