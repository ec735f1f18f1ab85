package triggers

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
)

// ackRecorder stands in for the server: it records the acknowledgements an acker sends.
type ackRecorder struct {
	a    *acker
	acks []uint64 // the stream sequences acknowledged through, in order
}

func newAckRecorder() *ackRecorder {
	r := &ackRecorder{a: newAcker(time.Now)}
	r.a.ack = func(d *jetstream.Delivery) error { r.acks = append(r.acks, d.Seq); return nil }
	r.a.ackSync = func(d *jetstream.Delivery, _ context.Context) error { r.acks = append(r.acks, d.Seq); return nil }
	return r
}

func (r *ackRecorder) deliver(seq uint64) *jetstream.Delivery {
	d := &jetstream.Delivery{Seq: seq, AcksAll: true}
	r.a.add(d)
	return d
}

func (r *ackRecorder) last() uint64 {
	if len(r.acks) == 0 {
		return 0
	}
	return r.acks[len(r.acks)-1]
}

// An acknowledgement names the last of the settled prefix, after ackBatch of them or
// ackDelay, and never a delivery after one still in hand.
func TestAckerAcknowledgesTheSettledPrefixInBatches(t *testing.T) {
	r := newAckRecorder()
	var ds []*jetstream.Delivery
	for seq := uint64(1); seq <= 2*ackBatch+10; seq++ {
		ds = append(ds, r.deliver(seq))
	}
	// The first is still in hand: settling every other one acknowledges nothing.
	for _, d := range ds[1:] {
		r.a.settle(slotOf(d))
	}
	if len(r.acks) != 0 {
		t.Fatalf("acknowledged %v with seq 1 in hand", r.acks)
	}
	// Settling it frees the whole prefix: one acknowledgement, through the last.
	r.a.settle(slotOf(ds[0]))
	if len(r.acks) != 1 || r.last() != uint64(len(ds)) {
		t.Fatalf("acks %v; want one through %d", r.acks, len(ds))
	}
	// Fewer than a batch wait for ackDelay.
	d := r.deliver(uint64(len(ds) + 1))
	r.a.settle(slotOf(d))
	if len(r.acks) != 1 {
		t.Fatalf("acks %v; a single settled delivery acknowledged at once", r.acks)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.a.mu.Lock()
		n := len(r.acks)
		r.a.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delayed acknowledgement never came")
		}
		time.Sleep(time.Millisecond)
	}
	if r.last() != d.Seq {
		t.Fatalf("delayed ack through %d; want %d", r.last(), d.Seq)
	}
}

// A barrier holds back every acknowledgement, of deliveries before it too, until it is
// settled.
func TestAckerBarrierHoldsBackEveryAcknowledgement(t *testing.T) {
	r := newAckRecorder()
	a := r.deliver(1)
	b := r.a.barrier()
	var later []*jetstream.Delivery
	for seq := uint64(50); seq < 50+2*ackBatch; seq++ {
		later = append(later, r.deliver(seq))
	}
	r.a.settle(slotOf(a))
	for _, d := range later {
		r.a.settle(slotOf(d))
	}
	// a itself is below the barrier, yet its catch-up may count any message below the
	// first delivery after it: nothing goes out.
	if err := r.a.flush(context.Background()); err != nil || len(r.acks) != 0 {
		t.Fatalf("acks %v (%v) with the barrier unsettled", r.acks, err)
	}
	r.a.settle(b)
	if err := r.a.flush(context.Background()); err != nil || r.last() != later[len(later)-1].Seq {
		t.Fatalf("acks %v (%v); want through %d once the barrier is settled", r.acks, err, later[len(later)-1].Seq)
	}
}

// A redelivery (a stream sequence below one delivered before it) still in hand keeps
// the acknowledgement below it, though deliveries after it in delivery order are
// settled: they are above it in the stream.
func TestAckerRedeliveryInHandBoundsTheAcknowledgement(t *testing.T) {
	r := newAckRecorder()
	d10 := r.deliver(10)
	d11 := r.deliver(11)
	re := r.deliver(5) // a redelivery
	d12 := r.deliver(12)
	for _, d := range []*jetstream.Delivery{d10, d11, d12} {
		r.a.settle(slotOf(d))
	}
	if err := r.a.flush(context.Background()); err != nil || len(r.acks) != 0 {
		t.Fatalf("acks %v (%v): 10 and 11 are above 5, in hand", r.acks, err)
	}
	r.a.settle(slotOf(re))
	if err := r.a.flush(context.Background()); err != nil || r.last() != 12 {
		t.Fatalf("acks %v (%v); want through 12", r.acks, err)
	}
}

// Whatever the order deliveries (redeliveries and barriers among them) are settled in,
// no acknowledgement covers a stream sequence still in hand or sent while a barrier is
// unsettled, and once every one is settled the acknowledgements reach the highest.
func TestAckerNeverCoversADeliveryInHand(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := newAckRecorder()
		type kept struct {
			s   *ackSlot
			seq uint64 // 0: a barrier
		}
		var all []kept
		next := uint64(1)
		for range 40 + rng.IntN(200) {
			switch x := rng.IntN(20); {
			case x == 0:
				all = append(all, kept{s: r.a.barrier()})
			case x == 1 && next > 5:
				d := r.deliver(1 + rng.Uint64N(next-1)) // a redelivery of an earlier sequence
				all = append(all, kept{s: slotOf(d), seq: d.Seq})
			default:
				d := r.deliver(next)
				next += 1 + rng.Uint64N(3)
				all = append(all, kept{s: slotOf(d), seq: d.Seq})
			}
		}
		check := func() {
			if len(r.acks) == 0 {
				return
			}
			through := r.last()
			for _, k := range all {
				switch {
				case k.s.settled:
				case k.seq == 0:
					t.Fatalf("seed %d: ack through %d with a barrier unsettled", seed, through)
				case k.seq <= through:
					t.Fatalf("seed %d: ack through %d covers seq %d in hand", seed, through, k.seq)
				}
			}
		}
		for _, i := range rng.Perm(len(all)) {
			r.a.settle(all[i].s)
			if from := r.last() + 1; rng.IntN(8) == 0 && next > from+1 {
				// A redelivery comes in while others are being settled: of a message not
				// acknowledged yet (the server redelivers nothing else).
				d := r.deliver(from + rng.Uint64N(next-1-from))
				all = append(all, kept{s: slotOf(d), seq: d.Seq})
			}
			if rng.IntN(4) == 0 {
				if err := r.a.flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			check()
		}
		for _, k := range all {
			r.a.settle(k.s) // the redeliveries of the loop
			check()
		}
		if err := r.a.flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		check()
		highest := uint64(0)
		for _, k := range all {
			highest = max(highest, k.seq)
		}
		if highest > 0 && r.last() != highest {
			t.Fatalf("seed %d: acks end at %d; want %d once all is settled", seed, r.last(), highest)
		}
		if len(r.a.slots) != 0 {
			t.Fatalf("seed %d: %d slots kept after all settled", seed, len(r.a.slots))
		}
	}
}
