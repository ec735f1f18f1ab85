package triggers

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/compactor/compactor/jetstream"
)

// Batched acknowledgements. A chat consumer whose ack policy is all (what Provision
// creates; see jetstream.Consumption.AcksAll) takes one acknowledgement for many
// messages: acking a delivery acknowledges every message of a lower stream sequence.
// The server then tracks and settles one acknowledgement per batch instead of one per
// message, its largest cost of serving the trigger. The handlers settle deliveries out
// of order (each conversation has its own), so the acker keeps them in the order they
// were delivered and acknowledges only through the last of the settled prefix, and
// only below every delivery still in hand: a crash then leaves unacknowledged nothing
// but what was not handled, which the server delivers again, as it did with an
// acknowledgement per message.
//
// Two things an acknowledgement per message did by itself need more here:
//   - A delivery held long (a rebuild waiting on a stream electing its leader, a
//     conversation whose state cannot be read and waits for its retry) would hold back
//     the acknowledgement of every later one until the consumer's max ack pending
//     stops all deliveries. After parkAfter in hand it is parked: a recount of its
//     conversation is armed in ACTIVITY (stored before anything else happens), which
//     reaches the partition's owner as an idle signal, also after a crash or a
//     takeover; the delivery then counts as settled. A retry a nak would have asked
//     for is parked the same way.
//   - A trigger that becomes active (its first delivery, or the first after another
//     process held the consumer) may find messages below its first delivery that the
//     previous owner had not handled. Each was redelivered after the ack wait when
//     every message had its own acknowledgement; here the new owner's first batch
//     would acknowledge them. So a barrier holds every acknowledgement back while the
//     new owner reads which conversations have messages between the consumer's ack
//     floor and its first delivery (jetstream.Chat.ConversationsBetween) and counts
//     each of them again from the stream.

// ackBatch is how many settled deliveries wait at most for their acknowledgement;
// ackDelay how long.
const (
	ackBatch = 64
	ackDelay = 20 * time.Millisecond
)

// ackSlot is one delivery the acker keeps, or a barrier (d nil).
type ackSlot struct {
	d  *jetstream.Delivery
	at time.Time // when it was delivered
	// settled: handled, parked, or (a barrier) the catch-up is done. disorder: its
	// stream sequence is below that of a delivery before it (a redelivery), or it is a
	// barrier. parking: a park is under way.
	settled, disorder, parking bool
}

// seq is the lowest stream sequence the slot may still need: a barrier's is 0, since
// its catch-up may count any message below the first delivery after it.
func (s *ackSlot) seq() uint64 {
	if s.d == nil {
		return 0
	}
	return s.d.Seq
}

// acker keeps the deliveries of a chat consumer that acknowledges all below, from the
// oldest not yet acknowledged on, and acknowledges them in batches.
type acker struct {
	mu    sync.Mutex
	slots []*ackSlot // in the order delivered
	// maxSeq is the highest stream sequence registered; disorder how many unsettled
	// slots have disorder set.
	maxSeq   uint64
	disorder int
	// next is the delivery the next acknowledgement names (nil: none waits), covering
	// waiting settled deliveries; through is the stream sequence the last one sent covers.
	next    *jetstream.Delivery
	waiting int
	through uint64
	// above are settled deliveries no longer kept in slots whose stream sequences are
	// not below every unsettled one (a redelivery of a lower one is in hand): rare.
	above []*jetstream.Delivery
	timer *time.Timer
	now   func() time.Time
	// ack and ackSync acknowledge through a delivery (a test records them instead).
	ack     func(*jetstream.Delivery) error
	ackSync func(*jetstream.Delivery, context.Context) error
}

func newAcker(now func() time.Time) *acker {
	return &acker{now: now, ack: (*jetstream.Delivery).Ack, ackSync: (*jetstream.Delivery).AckSync}
}

// add keeps d, just delivered, and marks it as the acker's.
func (a *acker) add(d *jetstream.Delivery) {
	s := &ackSlot{d: d, at: a.now()}
	d.Slot = s
	a.mu.Lock()
	defer a.mu.Unlock()
	if d.Seq < a.maxSeq {
		s.disorder = true
		a.disorder++
	}
	if a.next != nil && d.Seq <= a.next.Seq {
		// The acknowledgement waiting would cover d, in hand: it waits for d.
		a.above = append(a.above, a.next)
		a.next, a.waiting = nil, 0
	}
	a.maxSeq = max(a.maxSeq, d.Seq)
	a.slots = append(a.slots, s)
}

// barrier adds a barrier: nothing delivered before or after it is acknowledged until
// it is settled.
func (a *acker) barrier() *ackSlot {
	s := &ackSlot{at: a.now(), disorder: true}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.disorder++
	a.slots = append(a.slots, s)
	return s
}

// settle marks s settled and acknowledges what that allows. A slot settled before
// (parked, then handled) is left as it is.
func (a *acker) settle(s *ackSlot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.settled {
		return
	}
	s.settled = true
	if s.disorder {
		a.disorder--
	}
	a.advance()
}

// advance drops the settled prefix and moves the next acknowledgement to the delivery
// of the prefix with the highest stream sequence below every slot still unsettled.
// Callers hold mu.
func (a *acker) advance() {
	n := 0
	for n < len(a.slots) && a.slots[n].settled {
		n++
	}
	if n == 0 {
		return
	}
	prefix, rest := a.slots[:n], a.slots[n:]
	// low is the least stream sequence an unsettled slot may need: with no slot out of
	// order unsettled, the first one's, since every later one came after it in stream
	// order (a barrier counts as out of order).
	low := uint64(math.MaxUint64)
	switch {
	case len(rest) > 0 && a.disorder == 0:
		low = rest[0].seq()
	case len(rest) > 0:
		for _, s := range rest {
			if !s.settled {
				low = min(low, s.seq())
			}
		}
	}
	// A settled delivery at or above low (a redelivery below it is in hand) waits in
	// above until low passes it.
	consider := func(d *jetstream.Delivery) {
		switch {
		case d.Seq <= a.through || (a.next != nil && d.Seq <= a.next.Seq):
		case d.Seq < low:
			a.next = d
		default:
			a.above = append(a.above, d)
		}
	}
	if above := a.above; len(above) > 0 {
		a.above = nil
		for _, d := range above {
			consider(d)
		}
	}
	for _, s := range prefix {
		if s.d != nil {
			consider(s.d)
		}
	}
	a.waiting += n
	clear(prefix)
	a.slots = rest
	if a.next == nil {
		a.waiting = 0
		return
	}
	if a.waiting >= ackBatch {
		a.send()
		return
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(ackDelay, a.flushAsync)
	}
}

// send acknowledges through next without waiting for the server. Callers hold mu.
func (a *acker) send() {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.next == nil {
		return
	}
	_ = a.ack(a.next)
	a.through, a.next, a.waiting = a.next.Seq, nil, 0
}

// flushAsync sends the acknowledgement that waits, if any.
func (a *acker) flushAsync() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.timer = nil
	a.send()
}

// flush sends the acknowledgement that waits and returns once the server confirmed it:
// a stopping trigger's last.
func (a *acker) flush(ctx context.Context) error {
	a.mu.Lock()
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	d := a.next
	if d != nil {
		a.through, a.next, a.waiting = d.Seq, nil, 0
	}
	a.mu.Unlock()
	if d == nil {
		return nil
	}
	return a.ackSync(d, ctx)
}

// held returns the unsettled deliveries in hand since before cutoff that no park is
// under way for, marking them parking, and how many deliveries are kept.
func (a *acker) held(cutoff time.Time) (old []*ackSlot, kept int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.slots {
		if !s.at.Before(cutoff) {
			break // kept in the order delivered: the rest came later
		}
		if !s.settled && !s.parking && s.d != nil {
			s.parking = true
			old = append(old, s)
		}
	}
	return old, len(a.slots)
}

// settled reports whether s is settled.
func (a *acker) settled(s *ackSlot) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return s.settled
}

// unpark lets a later look at held park s again (its park failed).
func (a *acker) unpark(s *ackSlot) {
	a.mu.Lock()
	s.parking = false
	a.mu.Unlock()
}

// slotOf is d's slot when the acker keeps it.
func slotOf(d *jetstream.Delivery) *ackSlot {
	s, _ := d.Slot.(*ackSlot)
	return s
}
