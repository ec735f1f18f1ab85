package triggers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Past maxQueued, a redelivery of a message older than the carrier (its first delivery
// lost on the way, so it may never have been counted) is acknowledged only with a gap
// before the carrier, so the carrier's handler counts it from the stream; a carrier
// replaced by a newer delivery leaves a gap before the new one.
func TestCoalesceLeavesAGapForWhatItAcknowledges(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = maxQueued + 2
	for range n {
		if _, err := st.Chat().Publish(ctx, "c", []byte(`{"role":"user","content":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var got []*jetstream.Delivery
	c, err := st.Chat().Consume(ctx, func(d *jetstream.Delivery) {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Drain()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		l := len(got)
		mu.Unlock()
		if l == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries", l, n)
		}
	}
	tr := &tracked{}
	for _, d := range got[:maxQueued] {
		tr.jobs = append(tr.jobs, job{d: d})
	}
	tg := &Trigger{}
	carrier := got[maxQueued]
	tg.coalesce(tr, job{d: carrier})
	if len(tr.jobs) != maxQueued+1 || !tr.jobs[maxQueued].carrier || tr.sig.gapTo != 0 {
		t.Fatalf("the first delivery past the bound: %d jobs, carrier %v, gap %d; want it queued as the carrier, no gap",
			len(tr.jobs), tr.jobs[len(tr.jobs)-1].carrier, tr.sig.gapTo)
	}
	tg.coalesce(tr, job{d: got[3]}) // a redelivery of an older message
	if len(tr.jobs) != maxQueued+1 || tr.sig.gapTo != carrier.Seq {
		t.Fatalf("an older redelivery: %d jobs, gap before seq %d; want it acknowledged with a gap before the carrier (seq %d)",
			len(tr.jobs), tr.sig.gapTo, carrier.Seq)
	}
	newer := got[maxQueued+1]
	tg.coalesce(tr, job{d: newer})
	if len(tr.jobs) != maxQueued+1 || tr.jobs[maxQueued].d != newer || tr.sig.gapTo != newer.Seq {
		t.Fatalf("a newer delivery: %d jobs, gap before seq %d; want it the carrier with a gap before it (seq %d)",
			len(tr.jobs), tr.sig.gapTo, newer.Seq)
	}
}
