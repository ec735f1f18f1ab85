package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Policies is the handle on the policy bucket, the conversations' own settings: it
// reads, compare-and-sets, updates and watches them. Store.Policies returns it.
type Policies struct{ *core }

// Get reads a conversation's policy and its revision (nil, 0 when it has none)
// from the stream leader, so a compare-and-set on the revision sees every write.
func (po *Policies) Get(ctx context.Context, conv string) ([]byte, uint64, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, 0, err
	}
	m, err := po.leaderGet(ctx, "KV_"+po.cfg.PolicyBucket, map[string]any{
		"last_by_subj": "$KV." + po.cfg.PolicyBucket + "." + conv,
	})
	if errors.Is(err, errNoMessage) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", po.cfg.PolicyBucket, conv, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, nil // a deleted policy is created again (revision 0)
	}
	return m.Data, m.Seq, nil
}

// Put writes a conversation's policy with compare-and-set on the revision
// Get returned: revision 0 creates the key (it must not hold a policy), any other
// revision must still be the current one. Nil data deletes the policy, on that revision
// when it is not 0. A policy changed meanwhile is an error matching
// ErrRevisionMismatch: read it again, apply the change again and retry.
func (po *Policies) Put(ctx context.Context, conv string, data []byte, revision uint64) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return err
	}
	kv, err := po.js.KeyValue(ctx, po.cfg.PolicyBucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", po.cfg.PolicyBucket, err)
	}
	switch {
	case data == nil && revision == 0:
		err = kv.Delete(ctx, conv)
	case data == nil:
		err = kv.Delete(ctx, conv, natsjs.LastRevision(revision))
	case revision == 0:
		_, err = kv.Create(ctx, conv, data)
	default:
		_, err = kv.Update(ctx, conv, data, revision)
	}
	if err != nil {
		if isWrongLastSequence(err) {
			return fmt.Errorf("%w (policy %s/%s at revision %d)", ErrRevisionMismatch, po.cfg.PolicyBucket, conv, revision)
		}
		return fmt.Errorf("write %s/%s: %w", po.cfg.PolicyBucket, conv, err)
	}
	po.policyHub.local(conv) // read-your-writes: this process's caches drop the old policy
	return nil
}

// PolicyAttempts is how often Policies.Update applies a change before giving up on
// writers that keep changing the policy first.
const PolicyAttempts = 5

// Update is a read-modify-write of a conversation's policy with compare-and-set:
// change gets the current policy (nil: none) and returns the next one (nil: delete) and
// whether to write at all. When another writer changed the policy meanwhile, the change
// is applied again to the newer policy, up to PolicyAttempts times, with a growing,
// jittered pause; then the error matches ErrRevisionMismatch and nothing was written.
// An error from change ends it at once.
func (po *Policies) Update(ctx context.Context, conv string, change func(current []byte) (next []byte, write bool, err error)) error {
	for attempt := 1; ; attempt++ {
		data, rev, err := po.Get(ctx, conv)
		if err != nil {
			return err
		}
		next, write, err := change(data)
		if err != nil || !write {
			return err
		}
		if data == nil && next == nil {
			return nil // nothing to delete
		}
		err = po.Put(ctx, conv, next, rev)
		if !errors.Is(err, ErrRevisionMismatch) || attempt == PolicyAttempts {
			if err != nil && attempt == PolicyAttempts {
				return fmt.Errorf("the policy of %s was changed by others %d times while this change was applied; nothing was written: retry: %w", conv, PolicyAttempts, err)
			}
			return err
		}
		t := time.NewTimer(time.Duration(attempt)*10*time.Millisecond + rand.N(10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Watch calls fn with the conversation of every policy change from now on
// (a change to a key that is not a valid conversation id is ignored). fn runs on the
// subscription's goroutine: it must not block for long.
//
// What it hears is a publish to the policy's subject, not what the bucket stored: it
// arrives when the server routes the publish, which may be before the stream has stored
// it (a read made at once may still find the old policy), and a write the stream
// refused (a compare-and-set that lost) is heard too. Every Watch of a store shares one
// subscription; the store's policy caches (WatchFirst) hear of a change before any
// Watch callback does.
func (po *Policies) Watch(fn func(conv string)) (*Subscription, error) {
	return po.policyHub.add(po.core, fn, false)
}

// WatchFirst is Watch for a cache of policies: its fn is called before those of
// Watch, so a watcher that reads the policy when it hears of a change reads past the
// cache, and it is also called, synchronously, after each write of this store
// (Put, Update, Notify) has been stored. State reports whether what it hears can be
// trusted.
func (po *Policies) WatchFirst(fn func(conv string)) (*Subscription, error) {
	return po.policyHub.add(po.core, fn, true)
}

// WatchState is what a watch of the policies may miss.
type WatchState struct {
	// Epoch changes each time the watch may have missed a change: it (re)subscribed,
	// the connection was lost or came back, the server refused the subscription, or
	// the client dropped notifications it could not keep up with. Anything learned
	// under another epoch is to be read again.
	Epoch uint64
	// Live is false while no change can be heard: not subscribed, disconnected, or
	// refused (the user may not subscribe to the policy subjects).
	Live bool
	// Refused is set when the server refused the subscription for want of permission.
	Refused bool
}

// WatchState reports the state of the store's policy watch.
func (po *Policies) WatchState() WatchState { return po.policyHub.state() }

// Notify tells every watcher of the policies, in every process, that conv's policy
// changed, without writing it: a forget, which purges a policy (a purge is no
// publish, so no watcher hears it), calls it after the purge. Other processes hear a
// publish on the policy's subject that the stream refuses by design (it expects the
// key at a revision no key reaches), so nothing is stored.
func (po *Policies) Notify(ctx context.Context, conv string) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return err
	}
	po.policyHub.local(conv)
	subj := "$KV." + po.cfg.PolicyBucket + "." + conv
	_, err := po.js.Publish(ctx, subj, nil, natsjs.WithExpectStream("KV_"+po.cfg.PolicyBucket),
		natsjs.WithExpectLastSequencePerSubject(math.MaxUint64))
	if err == nil {
		return fmt.Errorf("notify %s: the stream stored the notification", subj)
	}
	if !isWrongLastSequence(err) {
		return fmt.Errorf("notify %s: %w", subj, err)
	}
	return nil
}

// policyHub is the one core subscription of a store to its policy subjects, shared by
// every watcher, with what it may have missed.
type policyHub struct {
	mu      sync.Mutex
	sub     *nats.Subscription
	stop    func() // ends the watch of refusals and of the connection's status
	next    int
	first   map[int]func(string)
	rest    map[int]func(string)
	dropped int // the subscription's dropped count when last looked at

	epoch   atomic.Uint64
	live    atomic.Bool
	refused atomic.Bool
}

// add registers fn, subscribing on the first watcher.
func (h *policyHub) add(c *core, fn func(string), first bool) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub == nil {
		if err := h.subscribe(c); err != nil {
			return nil, err
		}
	}
	if h.first == nil {
		h.first, h.rest = map[int]func(string){}, map[int]func(string){}
	}
	id := h.next
	h.next++
	if first {
		h.first[id] = fn
	} else {
		h.rest[id] = fn
	}
	return &Subscription{stop: func() { h.remove(id) }}, nil
}

// subscribe makes the subscription and watches what could make it miss a change. The
// lock is held.
func (h *policyHub) subscribe(c *core) error {
	prefix := "$KV." + c.cfg.PolicyBucket
	subj := prefix + ".*"
	// Watched before the subscription is sent: the server refuses it asynchronously.
	stopRefusals := OnRefusal(c.nc, func(pe *PermissionError) {
		if pe.Op == "subscribe" && pe.Subject == subj {
			h.refused.Store(true)
			h.live.Store(false)
			h.epoch.Add(1)
		}
	})
	h.refused.Store(false)
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		if conv, ok := conversationAfter(prefix, m.Subject); ok {
			h.deliver(conv, true)
		}
	})
	if err != nil {
		stopRefusals()
		return fmt.Errorf("watch %s: %w", c.cfg.PolicyBucket, err)
	}
	// Keep up with bursts of changes rather than drop them (a drop starts a new epoch).
	_ = sub.SetPendingLimits(1<<20, 64<<20)
	h.sub, h.dropped = sub, 0
	h.live.Store(c.nc.IsConnected() && !h.refused.Load())
	h.epoch.Add(1)
	status := c.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	go func() {
		for st := range status {
			// A reconnect subscribes again (and forgets a refusal): what was missed
			// meanwhile is unknown either way.
			if st == nats.CONNECTED {
				h.refused.Store(false)
			}
			h.live.Store(st == nats.CONNECTED && !h.refused.Load())
			h.epoch.Add(1)
		}
	}()
	h.stop = func() {
		stopRefusals()
		c.nc.RemoveStatusListener(status)
	}
	return nil
}

// remove unregisters a watcher, unsubscribing after the last.
func (h *policyHub) remove(id int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.first, id)
	delete(h.rest, id)
	if len(h.first)+len(h.rest) > 0 || h.sub == nil {
		return
	}
	_ = h.sub.Unsubscribe()
	h.stop()
	h.sub, h.stop = nil, nil
	h.live.Store(false)
	h.epoch.Add(1)
}

// deliver calls the first watchers, then (for a change heard on the subscription) the
// others.
func (h *policyHub) deliver(conv string, all bool) {
	h.mu.Lock()
	fns := make([]func(string), 0, len(h.first)+len(h.rest))
	for _, fn := range h.first {
		fns = append(fns, fn)
	}
	if all {
		for _, fn := range h.rest {
			fns = append(fns, fn)
		}
	}
	h.mu.Unlock()
	for _, fn := range fns {
		fn(conv)
	}
}

// local tells the first watchers of a change this process made.
func (h *policyHub) local(conv string) { h.deliver(conv, false) }

// state is the hub's WatchState; it notices the notifications the client dropped.
func (h *policyHub) state() WatchState {
	h.mu.Lock()
	if h.sub != nil {
		if n, err := h.sub.Dropped(); err == nil && n != h.dropped {
			h.dropped = n
			h.epoch.Add(1)
		}
	}
	h.mu.Unlock()
	return WatchState{Epoch: h.epoch.Load(), Live: h.live.Load(), Refused: h.refused.Load()}
}

// ErrTooManyPolicies is matched by the error of Keys when the bucket holds more
// policies than it may list.
var ErrTooManyPolicies = errors.New("more policies than the listing's bound")

// Keys lists the conversations the policy bucket holds a message of (a policy, or the
// marker a delete or purge leaves), at most limit of them (more: ErrTooManyPolicies),
// from one stream info of the bucket's subjects. A conversation not listed had no
// policy when the stream answered.
func (po *Policies) Keys(ctx context.Context, limit int) (map[string]struct{}, error) {
	name := "KV_" + po.cfg.PolicyBucket
	str, err := po.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	if int(info.State.NumSubjects) > limit {
		return nil, fmt.Errorf("%w: %d > %d", ErrTooManyPolicies, info.State.NumSubjects, limit)
	}
	prefix := "$KV." + po.cfg.PolicyBucket + "."
	info, err = str.Info(ctx, natsjs.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	if len(info.State.Subjects) > limit {
		return nil, fmt.Errorf("%w: %d > %d", ErrTooManyPolicies, len(info.State.Subjects), limit)
	}
	out := make(map[string]struct{}, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if conv, ok := strings.CutPrefix(subj, prefix); ok {
			out[conv] = struct{}{}
		}
	}
	return out, nil
}
