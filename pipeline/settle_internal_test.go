package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// An ack that came before the context ended is the publish's outcome: a batch whose
// context ends as it waits reports the sequences of the messages already acked, not 0
// (which tells a caller without ids to publish them again). A review found settle
// choosing at random between the ack and the done context.
func TestSettleTakesAnAckInBeforeADoneContext(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		c := NewWithStore(nc, st)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		for i := range 24 {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("m%d", i))}
			p, err := c.publishAsync(context.Background(), "settle", &m, publishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.PublishAsyncComplete(): // its ack is in
			case <-time.After(10 * time.Second):
				t.Fatal("no ack within 10s")
			}
			if a := c.settle(done, p); a.Err != nil || a.Seq == 0 {
				t.Fatalf("publish %d, acked before its context ended: seq %d, error %v", i, a.Seq, a.Err)
			}
		}
	})
}
