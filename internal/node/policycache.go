package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas/policy"
)

// The policy cache: a process asks a conversation's settings for every new
// conversation the trigger sees, every job a worker takes and every request the
// service and the view answer. Read from the policy bucket's stream leader each time,
// that is a network round trip per conversation. The cache answers from memory what
// it read before, and drops a conversation's entry when it hears that its policy
// changed.
//
// What it hears is the store's policy watch (jetstream.Policies.WatchFirst): a core
// NATS subscription to the policy subjects, which hears every write to a policy as
// the server routes it, the writes of this process synchronously once stored, and a
// forget's purge through its notification. It is told before the trigger's own watch,
// so a trigger that re-reads a policy on a change reads past the cache.
//
// Bounds:
//   - A change another process makes is seen by the first Settings call after its
//     notification reaches this process (normally well under a millisecond after the
//     write). The notification may arrive before the stream has stored the write: an
//     answer read within settleWindow of a notification is kept only until
//     settleWindow after it, then read again.
//   - Whatever the watch missed, no entry is served past maxEntryAge: it is read again
//     then (a write the stream stored later than settleWindow after its notification,
//     during a leader election say, is served late by at most that).
//   - A change of this process's own (Put, Update, a forget's Notify) is seen by the
//     next call, in every goroutine: the entry is dropped before the write returns.
//   - While the watch cannot be trusted (not subscribed, disconnected, refused by the
//     user's permissions, or notifications dropped), every call reads the stream, and
//     every entry learned before is forgotten.
//
// Memory: conversations without a policy (most) cost an entry that points at the one
// shared default settings; those with one hold their resolved settings. The entries are
// bounded by maxEntries in two generations: when the newer one fills half the bound,
// the older is dropped and the newer takes its place, and a hit in the older moves the
// entry to the newer. That keeps the conversations in use, like an LRU, at a map
// lookup a hit, with no list to maintain. The changes heard within the settle window are
// kept in the order heard and dropped from the oldest as they age, each at a constant
// cost; a burst of more than maxRecent conversations changed within one window makes the
// cache keep nothing new until the window after the burst has passed (every call reads
// the stream meanwhile), so a bulk update bounds memory and work, not correctness.

// Cache bounds (see above).
const (
	maxEntries   = 1 << 16
	maxEntryAge  = 2 * time.Minute
	settleWindow = 5 * time.Second
	maxRecent    = 1 << 16
	// maxKnown bounds the conversations with a policy the cache lists (see known).
	maxKnown = 1 << 18
)

// Which conversations have a policy at all: most have none, and a new conversation's
// settings would otherwise cost a read of the stream leader that finds nothing. While
// the watch is live, the cache lists the conversations the bucket holds a message of
// (jetstream.Policies.Keys, after the watch is subscribed, again each maxEntryAge and
// after the watch's epoch changes), and adds each conversation the watch hears of. A
// conversation in neither, asked under the epoch the listing was complete for, has no
// policy: its settings are the defaults, answered without a read and without an entry.
// The bounds are the entries': a write the watch missed and the listing did not yet
// hold is seen by the next listing, at most maxEntryAge later. Over maxKnown policies,
// nothing is listed and every miss reads the stream, as before.
//
// known holds every conversation listed or heard of since the cache started (deleted
// policies too: their marker stays in the stream): it is complete for knownEpoch when
// knownOK.

// policyCache is PolicySource's memory of settings.
type policyCache struct {
	store *jetstream.Store
	log   zerolog.Logger
	now   func() time.Time
	bound int
	// maxRecent bounds the changes kept within the settle window (see above).
	maxRecent int
	maxAge    time.Duration
	settle    time.Duration

	// running is set while Run holds the watch: only then is the cache used.
	running atomic.Bool

	mu       sync.Mutex
	epoch    uint64 // the watch's epoch the entries were learned under
	cur, old map[string]cacheEntry
	// recent holds the conversations heard of within settle, with the change count
	// then; changes counts what was heard.
	recent  map[string]change
	changes uint64
	// heard is recent's changes in the order heard, oldest first.
	heard []heardChange
	// quietUntil: after a burst of changes over maxRecent, nothing is kept until then.
	quietUntil time.Time

	// known is the conversations with a policy (see above); maxKnown its bound.
	known      map[string]struct{}
	knownEpoch uint64
	knownOK    bool
	knownAt    time.Time
	maxKnown   int
	// listFailed is when a listing last failed (zero: none since one succeeded).
	listFailed time.Time

	// hits are answers from memory: an entry, or a conversation known to have no
	// policy (absent counts those); misses are reads of the stream.
	hits, misses, absent atomic.Uint64
}

// cacheEntry is a conversation's settings, or the error its policy resolved to.
type cacheEntry struct {
	s       *policy.Settings
	err     error
	expires time.Time
}

// change is when a conversation's policy change was heard, and the change count then.
type change struct {
	at time.Time
	n  uint64
}

// heardChange is one change of heard: the conversation and its change.
type heardChange struct {
	conv string
	change
}

func newPolicyCache(st *jetstream.Store, log zerolog.Logger) *policyCache {
	return &policyCache{store: st, log: log, now: time.Now, bound: maxEntries, maxRecent: maxRecent, maxAge: maxEntryAge, settle: settleWindow,
		cur: map[string]cacheEntry{}, old: map[string]cacheEntry{}, recent: map[string]change{}, known: map[string]struct{}{}, maxKnown: maxKnown}
}

// run holds the watch until ctx is done. A watch that cannot be made leaves every call
// reading the stream.
func (c *policyCache) run(ctx context.Context) error {
	sub, err := c.store.Policies().WatchFirst(c.changed)
	if err != nil {
		c.log.Warn().Err(err).Msg("policy watch: every settings read goes to the stream")
		<-ctx.Done()
		return nil
	}
	c.running.Store(true)
	defer func() {
		c.running.Store(false)
		sub.Stop()
		c.clear(0)
	}()
	c.list(ctx)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last jetstream.WatchState
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			c.list(ctx)
			if n%5 == 0 {
				last = c.report(last)
			}
		}
	}
}

// list lists the conversations with a policy when the watch is live and the list is
// not complete for its epoch, or is older than maxAge.
func (c *policyCache) list(ctx context.Context) {
	st := c.store.Policies().WatchState()
	if !st.Live {
		return
	}
	c.mu.Lock()
	due := (!c.knownOK || c.knownEpoch != st.Epoch || !c.now().Before(c.knownAt.Add(c.maxAge))) &&
		!c.now().Before(c.listFailed.Add(c.maxAge))
	c.mu.Unlock()
	if !due {
		return
	}
	at := c.now()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	keys, err := c.store.Policies().Keys(lctx, c.maxKnown)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// Refused, too many, or the stream did not answer: every miss reads the stream,
		// and the listing is tried again a maxAge later.
		c.knownOK, c.listFailed = false, c.now()
		if errors.Is(err, jetstream.ErrTooManyPolicies) {
			clear(c.known)
		}
		c.log.Debug().Err(err).Msg("policy cache: the conversations with a policy could not be listed; every new one is read")
		return
	}
	if now := c.store.Policies().WatchState(); !now.Live || now.Epoch != st.Epoch {
		return // the watch may have missed a change during the listing: list again
	}
	for k := range keys {
		c.known[k] = struct{}{}
	}
	if len(c.known) > c.maxKnown {
		clear(c.known)
		c.knownOK = false
		return
	}
	c.knownOK, c.knownEpoch, c.knownAt, c.listFailed = true, st.Epoch, at, time.Time{}
}

// hasNoPolicy says conv is known to have no policy under the watch's state st.
func (c *policyCache) hasNoPolicy(conv string, st jetstream.WatchState) bool {
	if !c.running.Load() || !st.Live {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.knownOK || c.knownEpoch != st.Epoch {
		return false
	}
	_, ok := c.known[conv]
	return !ok
}

// report logs a change of the watch's state.
func (c *policyCache) report(last jetstream.WatchState) jetstream.WatchState {
	st := c.store.Policies().WatchState()
	switch {
	case st.Refused && !last.Refused:
		c.log.Warn().Str("subject", "$KV."+c.store.Config().PolicyBucket+".*").
			Msg("policy watch refused (the user may not subscribe to the policy subjects): every settings read goes to the stream")
	case st.Live && last.Refused:
		c.log.Info().Msg("policy watch live again: settings are cached")
	}
	return st
}

// get returns conv's cached entry, if it has one that may be served.
func (c *policyCache) get(conv string) (cacheEntry, jetstream.WatchState, bool) {
	st := c.store.Policies().WatchState()
	if !c.running.Load() || !st.Live {
		return cacheEntry{}, st, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != st.Epoch {
		c.clearLocked(st.Epoch)
		return cacheEntry{}, st, false
	}
	e, ok := c.cur[conv]
	if !ok {
		if e, ok = c.old[conv]; ok {
			delete(c.old, conv)
			c.putLocked(conv, e)
		}
	}
	if ok && !c.now().Before(e.expires) {
		delete(c.cur, conv)
		ok = false
	}
	return e, st, ok
}

// begin is taken before a read of the stream, for put.
type begin struct {
	st      jetstream.WatchState
	changes uint64
	at      time.Time
}

func (c *policyCache) begin(st jetstream.WatchState) begin {
	c.mu.Lock()
	defer c.mu.Unlock()
	return begin{st: st, changes: c.changes, at: c.now()}
}

// put keeps what a read begun at b found, unless it may be older than a change heard
// since b, the watch could have missed one meanwhile, or the read took so long that
// what was heard during it may be forgotten.
func (c *policyCache) put(conv string, b begin, e cacheEntry) {
	if !c.running.Load() || !b.st.Live {
		return
	}
	st := c.store.Policies().WatchState()
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if st.Epoch != b.st.Epoch || !st.Live || c.epoch != st.Epoch || now.Sub(b.at) >= c.settle || now.Before(c.quietUntil) {
		return
	}
	e.expires = now.Add(c.maxAge)
	if r, ok := c.recent[conv]; ok {
		if r.n > b.changes {
			return
		}
		if until := r.at.Add(c.settle); until.After(now) {
			e.expires = until
		}
	}
	c.putLocked(conv, e)
}

// putLocked stores an entry in the newer generation, turning it into the older one
// when it holds half the bound.
func (c *policyCache) putLocked(conv string, e cacheEntry) {
	if len(c.cur) >= c.bound/2 {
		c.old, c.cur = c.cur, make(map[string]cacheEntry, len(c.cur))
	}
	c.cur[conv] = e
}

// changed drops conv's entry: its policy changed.
func (c *policyCache) changed(conv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, conv)
	delete(c.old, conv)
	c.known[conv] = struct{}{}
	if len(c.known) > c.maxKnown {
		clear(c.known)
		c.knownOK = false
	}
	now := c.now()
	c.changes++
	ch := change{at: now, n: c.changes}
	c.recent[conv] = ch
	c.heard = append(c.heard, heardChange{conv: conv, change: ch})
	c.forgetSettled(now)
	if len(c.recent) > c.maxRecent {
		// A burst: keep nothing until it has settled, and nothing of it.
		c.quietUntil = now.Add(c.settle)
		clear(c.recent)
		c.heard = nil
	}
}

// forgetSettled drops the changes heard a settle window before now or earlier, oldest
// first.
func (c *policyCache) forgetSettled(now time.Time) {
	k := 0
	for k < len(c.heard) && !c.heard[k].at.Add(c.settle).After(now) {
		if h := c.heard[k]; c.recent[h.conv].n == h.n {
			delete(c.recent, h.conv)
		}
		c.heard[k] = heardChange{}
		k++
	}
	c.heard = c.heard[k:]
}

// clear forgets every entry.
func (c *policyCache) clear(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked(epoch)
}

func (c *policyCache) clearLocked(epoch uint64) {
	c.epoch = epoch
	clear(c.cur)
	clear(c.old)
	c.knownOK = false
}

// stats is what the cache did, and whether it is used: Run holds the watch and the
// watch is live.
func (c *policyCache) stats() telemetry.PolicyCacheFigures {
	c.mu.Lock()
	n := len(c.cur) + len(c.old)
	c.mu.Unlock()
	return telemetry.PolicyCacheFigures{Hits: c.hits.Load(), Misses: c.misses.Load(), Absent: c.absent.Load(), Entries: n,
		Live: c.running.Load() && c.store.Policies().WatchState().Live}
}
