package pipeline

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/compactor/compactor/jetstream"
)

// asyncQueue holds a client's PublishAsync publishes in flight, oldest first. One
// goroutine, running while the queue is not empty, waits for their acks in that order
// (the order they come in on the client's connection) and yields each outcome: no
// goroutine per publish. A publish whose context ends is yielded at once by a
// context.AfterFunc, wherever it is in the queue, so an earlier publish that waits for
// its ack (up to jetstream.PublishAsyncTimeout) never holds it up.
type asyncQueue struct {
	mu      sync.Mutex
	q       []*asyncPublish
	running bool
}

// asyncPublish is one PublishAsync in flight.
type asyncPublish struct {
	inFlight
	ctx context.Context
	// refused is ctx, also cancelled by the server's refusal of the publish's subjects
	// (see Client.refusable); release ends its watch once the outcome is claimed.
	refused context.Context
	release context.CancelFunc
	out     chan PubAck
	claimed atomic.Bool
	stop    func() bool // the AfterFunc's stop; nil when refused cannot end
}

// claim makes the caller the one that yields a's outcome: true once, false after.
func (a *asyncPublish) claim() bool { return a.claimed.CompareAndSwap(false, true) }

// claimAcked is claim for the queue's goroutine, which also ends the AfterFunc's wait
// (the AfterFunc never reads stop: it may run before enqueue has set it).
func (a *asyncPublish) claimAcked() bool {
	if !a.claim() {
		return false
	}
	if a.stop != nil {
		a.stop()
	}
	a.release()
	return true
}

// ended is the error of a publish whose wait refused ended: the server's refusal, or
// its context's error.
func (a *asyncPublish) ended() error {
	return jetstream.PermissionCause(a.refused, a.refused.Err())
}

// enqueue makes p's outcome come on the returned channel. refused is ctx, also ended
// by a refusal of p's subjects, and release ends its watch.
func (c *Client) enqueue(ctx, refused context.Context, release context.CancelFunc, p inFlight) <-chan PubAck {
	a := &asyncPublish{inFlight: p, ctx: ctx, refused: refused, release: release, out: make(chan PubAck, 1)}
	if refused.Done() != nil {
		a.stop = context.AfterFunc(refused, func() {
			if a.claim() {
				err := a.ended()
				a.release()
				a.out <- c.failed(a.inFlight, err)
			}
		})
	}
	c.async.mu.Lock()
	c.async.q = append(c.async.q, a)
	start := !c.async.running
	c.async.running = true
	c.async.mu.Unlock()
	if start {
		go c.settleQueue()
	}
	return a.out
}

// settleQueue yields the outcomes of the queue's publishes, oldest first, until it is
// empty.
func (c *Client) settleQueue() {
	for {
		c.async.mu.Lock()
		if len(c.async.q) == 0 {
			c.async.q, c.async.running = nil, false
			c.async.mu.Unlock()
			return
		}
		a := c.async.q[0]
		c.async.q[0] = nil
		c.async.q = c.async.q[1:]
		c.async.mu.Unlock()
		c.settleAsync(a)
	}
}

// settleAsync waits for a's outcome, unless its context yielded it already. An ack that
// needs reads (a duplicate to tell from a retry, an offloaded message's object to keep)
// is settled on a goroutine of its own, so the queue goes on meanwhile.
func (c *Client) settleAsync(a *asyncPublish) {
	var err error
	select {
	case ack := <-a.f.Ok():
		if !a.claimAcked() {
			return
		}
		if c.svc != nil && !ack.Duplicate { // the ack is checked, without reads
			a.out <- c.acked(a.ctx, a.inFlight, ack)
			return
		}
		if ack.Duplicate || a.po.object != nil {
			go func() { a.out <- c.acked(a.ctx, a.inFlight, ack) }()
			return
		}
		a.out <- PubAck{Seq: ack.Sequence}
		return
	case err = <-a.f.Err():
	case <-a.refused.Done():
		err = a.ended()
	}
	if a.claimAcked() {
		a.out <- c.failed(a.inFlight, err)
	}
}
