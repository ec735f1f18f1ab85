package proxy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// The warm cache keeps, per conversation, what the proxy last read of its stored
// context (the live value and its KV revision, the forget tombstone, the value the
// context was assembled with, its pinned messages and its tail through a known
// sequence), so that a turn validates it instead of reading the whole tail again:
//
//   - the live value (compared by its KV revision) and the forget tombstone are read
//     again, at once, and with them, when the newest stored message (which resolve
//     read from the stream leader anyway) is newer than the cache's (this proxy's last
//     turn, another process's), only the messages after the ones the cache holds.
//
// On any mismatch (a new value: a compaction landed; a new or changed tombstone: a
// forget; a value other than the one assembled with) the turn reads the whole context
// as pipeline.Client.Context does, and the cache takes it.

// maxWarmBytes bounds the memory of the warm cache of one process (message bytes,
// estimated): past it, conversations are dropped from it.
const maxWarmBytes = 128 << 20

// warmConv is what the cache holds of one conversation. It is never changed once in
// the cache: a refresh puts a new one.
type warmConv struct {
	rev  uint64 // the KV revision of the live value when read (0: none)
	live *schemas.Result
	tomb *schemas.Tombstone
	// used is the value the context was assembled with (live, or an earlier one the
	// provider caches), pinned its pinned messages and tail every message of the
	// conversation from tailFrom(used, tomb) through sequence through.
	used    *schemas.Result
	pinned  []schemas.Entry
	tail    []schemas.Entry
	through uint64
	bytes   int
}

// warmCache is the per-process cache of warmConv, bounded by maxWarmBytes and
// maxRemembered conversations.
type warmCache struct {
	mu    sync.Mutex
	convs map[string]*warmConv
	bytes int
	max   int
	// hits, deltas and misses count the reads served whole from the cache, served from
	// it plus the newer messages, and read whole.
	hits, deltas, misses int
}

func newWarmCache(maxBytes int) *warmCache {
	return &warmCache{convs: map[string]*warmConv{}, max: maxBytes}
}

func (w *warmCache) get(conv string) *warmConv {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.convs[conv]
}

// put makes e what the cache holds of conv (nil: nothing), dropping other
// conversations while the cache is over its bounds.
func (w *warmCache) put(conv string, e *warmConv) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.convs[conv]; ok {
		w.bytes -= old.bytes
		delete(w.convs, conv)
	}
	if e == nil || e.bytes > w.max {
		return
	}
	for k, old := range w.convs {
		if w.bytes+e.bytes <= w.max && len(w.convs) < maxRemembered {
			break
		}
		w.bytes -= old.bytes
		delete(w.convs, k)
	}
	w.convs[conv] = e
	w.bytes += e.bytes
}

func (w *warmCache) count(hit, delta bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case hit:
		w.hits++
	case delta:
		w.deltas++
	default:
		w.misses++
	}
}

// size is how many conversations and bytes the cache holds.
func (w *warmCache) size() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.convs), w.bytes
}

// entriesBytes is the estimated memory of es.
func entriesBytes(es []schemas.Entry) int {
	n := 0
	for i := range es {
		m := &es[i].Message
		n += 64 + len(m.Content.String()) + len(m.Name) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += 32 + len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
		for k, v := range m.Meta {
			n += len(k) + len(v)
		}
	}
	return n
}

// choose is the value a read assembles with (pipeline's readValue): earlier while it
// is still safe (the same conversation, no newer than the live value, not covered by
// the tombstone), else the live one.
func choose(conv string, live *schemas.Result, tomb *schemas.Tombstone, earlier *schemas.Result) *schemas.Result {
	if earlier != nil && earlier.Conversation == conv && live != nil && earlier.Generation <= live.Generation && !tomb.Covers(earlier.FirstSeq) {
		return earlier
	}
	return live
}

// sameValue says a and b are the same compaction of a conversation.
func sameValue(a, b *schemas.Result) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a == b || a.Generation == b.Generation && a.TailStartSeq == b.TailStartSeq && a.FirstSeq == b.FirstSeq &&
		a.CoveredThroughSeq == b.CoveredThroughSeq && slices.Equal(a.PinnedSeqs, b.PinnedSeqs) && a.Summary == b.Summary
}

func sameTomb(a, b *schemas.Tombstone) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ThroughSeq == b.ThroughSeq && a.ForgottenAt.Equal(b.ForgottenAt)
}

// readContext is conv's context (pipeline.Client.Context with AtLeastSeq(atLeast) and
// Value(earlier)), from the warm cache when it is still the conversation's, and the
// live value (nil: none) it was read with.
func (s *Store) readContext(ctx context.Context, conv string, atLeast uint64, earlier *schemas.Result) (*assemble.Context, *schemas.Result, error) {
	if e := s.warm.get(conv); e != nil && atLeast > 0 && atLeast >= e.through {
		ne, err := s.refresh(ctx, conv, e, atLeast, earlier)
		if err != nil {
			return nil, nil, err
		}
		if ne != nil {
			s.warm.count(ne == e, true)
			if ne != e {
				s.warm.put(conv, ne)
			}
			out := assemble.Assemble(assemble.Input{Value: ne.used, Pinned: ne.pinned, Tail: ne.tail}, assemble.Options{})
			return &out, ne.live, nil
		}
	}
	s.warm.count(false, false)
	e, err := s.readWhole(ctx, conv, atLeast, earlier)
	if err != nil {
		return nil, nil, err
	}
	s.warm.put(conv, e)
	out := assemble.Assemble(assemble.Input{Value: e.used, Pinned: e.pinned, Tail: e.tail}, assemble.Options{})
	return &out, e.live, nil
}

// refresh is e brought up to sequence atLeast, the newest message of conv, when it is
// still what conv holds; nil when it is not (the whole context must be read). It reads
// the live value and the tombstone, and the messages after e.through when there are
// any, at once.
func (s *Store) refresh(ctx context.Context, conv string, e *warmConv, atLeast uint64, earlier *schemas.Result) (*warmConv, error) {
	var (
		wg         sync.WaitGroup
		live       *schemas.Result
		rev        uint64
		tomb       *schemas.Tombstone
		delta      []schemas.Entry
		lerr, terr error
		derr       error
		needsDelta = atLeast > e.through
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		live, rev, lerr = s.st.Results().Get(ctx, conv, false)
	}()
	go func() {
		defer wg.Done()
		tomb, terr = s.st.Forgotten(ctx, conv)
	}()
	if needsDelta {
		delta, derr = s.st.Chat().LoadEntriesThrough(ctx, conv, e.through+1, atLeast)
	}
	wg.Wait()
	for _, err := range []error{lerr, terr, derr} {
		if err != nil {
			return nil, err
		}
	}
	if live != nil && tomb.Covers(live.FirstSeq) {
		live, rev = nil, 0 // a value of the forgotten conversation (Results.Live)
	}
	if rev != e.rev || !sameTomb(tomb, e.tomb) || !sameValue(live, e.live) || !sameValue(choose(conv, live, tomb, earlier), e.used) {
		return nil, nil
	}
	if !needsDelta {
		return e, nil
	}
	if len(delta) == 0 || delta[len(delta)-1].Seq < atLeast {
		return nil, nil
	}
	add := delta
	if err := s.st.Objects().Resolve(ctx, conv, add); err != nil {
		return nil, err
	}
	ne := *e
	ne.tail = append(slices.Clip(e.tail), add...)
	ne.through = delta[len(delta)-1].Seq
	ne.bytes = e.bytes + entriesBytes(add)
	return &ne, nil
}

// readWhole reads conv's context as pipeline.Client.Context does (the live value, or
// earlier while still safe; its pinned messages; the tail through at least atLeast,
// from the stream leader when a replica lags), keeping what it read.
func (s *Store) readWhole(ctx context.Context, conv string, atLeast uint64, earlier *schemas.Result) (*warmConv, error) {
	leader := false
	for attempt := 0; ; attempt++ {
		live, rev, tomb, err := s.st.Results().Live(ctx, conv, leader)
		if err != nil {
			return nil, err
		}
		v := choose(conv, live, tomb, earlier)
		e := &warmConv{rev: rev, live: live, tomb: tomb, used: v}
		if v != nil {
			if e.pinned, err = s.st.Chat().LoadPinned(ctx, conv, v.PinnedSeqs); err != nil {
				return nil, err
			}
		}
		from := tailFrom(v, tomb)
		var msgs []jetstream.StoredMsg
		if leader {
			msgs, err = s.st.Chat().LoadLeader(ctx, conv, from, 0)
		} else {
			msgs, err = s.st.Chat().Load(ctx, conv, from, 0)
		}
		if err != nil {
			return nil, err
		}
		last := uint64(0)
		if len(msgs) > 0 {
			last = msgs[len(msgs)-1].Seq
		}
		if atLeast == 0 || (v != nil && v.TailStartSeq > atLeast) || last >= atLeast {
			e.tail = make([]schemas.Entry, len(msgs))
			for i, m := range msgs {
				e.tail[i] = m.Entry()
			}
			if err := s.st.Objects().Resolve(ctx, conv, e.pinned); err != nil {
				return nil, err
			}
			if err := s.st.Objects().Resolve(ctx, conv, e.tail); err != nil {
				return nil, err
			}
			// The cache knows every message through the newest it read, or the one
			// resolve saw when the value's tail starts after it.
			e.through = max(last, min(atLeast, from-1))
			e.bytes = 512 + entriesBytes(e.pinned) + entriesBytes(e.tail)
			if v != nil {
				e.bytes += len(v.Summary)
			}
			return e, nil
		}
		if attempt >= 5 {
			return nil, fmt.Errorf("%w: %s has not reached sequence %d", pipeline.ErrNotCovered, conv, atLeast)
		}
		leader = attempt >= 1 // one more direct read, then ask the leader
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
}

// tailFrom is the first sequence of the tail read with value v: its tail start, and
// never a sequence the tombstone covers (pipeline's).
func tailFrom(v *schemas.Result, tomb *schemas.Tombstone) uint64 {
	from := uint64(1)
	if v != nil && v.TailStartSeq > 0 {
		from = v.TailStartSeq
	}
	if tomb != nil && from <= tomb.ThroughSeq {
		from = tomb.ThroughSeq + 1
	}
	return from
}
