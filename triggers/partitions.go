package triggers

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Partitions runs the trigger when its work is split into partitions
// (jetstream.Config.TriggerPartitions > 1). Every trigger process announces itself in
// the triggers bucket each heartbeat and reads who else is alive;
// jetstream.AssignPartitions shares the
// partitions out among them, and each process runs a Trigger on the consumers of the
// partitions it owns, and only those. A partition that moves away is drained (the
// messages in hand are settled) and unpinned, so its new owner is pinned at once; the
// pinned consumer stays the fence, so two processes that briefly both believe they own
// a partition never both get its messages.
type Partitions struct {
	cfg      Config
	store    *jetstream.Store
	policies PolicySource
	log      zerolog.Logger
	member   string
	parts    []jetstream.Partition
	beat     time.Duration
	// pinnedTTL is the consumers' pinned TTL: a release that drained for longer is
	// not unpinned (the server pinned the new owner meanwhile).
	pinnedTTL time.Duration

	hub *signalHub // one subscription to events and policies for every partition

	mu      sync.Mutex
	running map[int]*partRun // by partition number; under mu
	ended   chan struct{}    // a released partition's trigger stopped
	// failed holds, by partition, when a partition whose trigger failed may be started
	// again, and how often it failed in a row: a permanent error (its consumer deleted)
	// is retried with a backoff, not in a loop. Under mu.
	failed map[int]restart
}

// restart is when a failed partition may start again.
type restart struct {
	at    time.Time
	fails int
}

// maxRestartBackoff bounds the wait before a failed partition's trigger starts again.
const maxRestartBackoff = time.Minute

// partRun is one partition's trigger, running.
type partRun struct {
	t         *Trigger
	cancel    context.CancelFunc
	releasing bool // under Partitions.mu: it stops because the partition moved away
	done      chan struct{}
	started   time.Time
	// releaseAt is when the release began (the drain), under Partitions.mu.
	releaseAt time.Time
}

// NewMemberID returns an id for this process in the triggers bucket: its host name
// (what an operator recognises in the logs), its pid and a random part, so two
// processes never share one.
func NewMemberID() string {
	host, _ := os.Hostname()
	clean := make([]rune, 0, len(host))
	for _, c := range host {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			clean = append(clean, c)
		}
	}
	if len(clean) > 32 {
		clean = clean[:32]
	}
	return fmt.Sprintf("%s-%d-%s", string(clean), os.Getpid(), rand.Text()[:6])
}

// NewPartitions returns the partitioned trigger of member (NewMemberID when empty);
// Run starts it. The partition count and heartbeat are the store's
// (jetstream.Config.TriggerPartitions, TriggerHeartbeat).
func NewPartitions(cfg Config, store *jetstream.Store, policies PolicySource, log zerolog.Logger, member string) (*Partitions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || policies == nil {
		return nil, fmt.Errorf("%w: a store and a policy source are required", ErrConfig)
	}
	if member == "" {
		member = NewMemberID()
	}
	if err := jetstream.ValidateMember(member); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	sc := store.Config()
	if sc.TriggerPartitions < 2 {
		return nil, fmt.Errorf("%w: partitions need a store with at least 2 trigger partitions, it has %d", ErrConfig, sc.TriggerPartitions)
	}
	return &Partitions{cfg: cfg, store: store, policies: policies, member: member, parts: sc.Partitions(), beat: sc.TriggerHeartbeat, pinnedTTL: sc.TriggerPinnedTTL,
		log:     log.With().Str("component", "trigger").Str("member", member).Logger(),
		running: map[int]*partRun{}, ended: make(chan struct{}, 1), failed: map[int]restart{}, hub: &signalHub{n: sc.TriggerPartitions, by: map[int]hubHandlers{}}}, nil
}

// Member is this process's id in the triggers bucket.
func (ps *Partitions) Member() string { return ps.member }

// Owned returns the partitions this process runs a trigger on, sorted.
func (ps *Partitions) Owned() []int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]int, 0, len(ps.running))
	for p, r := range ps.running {
		if !r.releasing {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Run announces this process, follows the assignment and runs the triggers of the
// partitions it owns until ctx is done; then it leaves the bucket, drains them and
// unpins their consumers, so the other processes take them over at once.
func (ps *Partitions) Run(ctx context.Context) error {
	ms, err := jetstream.Retry(ctx, jetstream.DefaultBackoff(), ps.log, "bind the triggers bucket", func() (*jetstream.Membership, error) {
		return ps.store.Membership(ctx)
	})
	if err != nil {
		return stopped(ctx, err)
	}
	events, err := ps.store.Events().Subscribe("", ps.hub.onEvent, func(err error) {
		ps.log.Warn().Err(err).Msg("compaction event skipped")
	})
	if err != nil {
		return stopped(ctx, err)
	}
	defer events.Stop()
	policies, err := ps.store.Policies().Watch(ps.hub.onPolicy)
	if err != nil {
		return stopped(ctx, err)
	}
	defer policies.Stop()
	ps.log.Info().Int("partitions", len(ps.parts)).Dur("heartbeat", ps.beat).Msg("trigger member started")
	tick := time.NewTicker(ps.beat)
	defer tick.Stop()
	for {
		ps.follow(ctx, ms)
		select {
		case <-ctx.Done():
			ps.stop(ms)
			return nil
		case <-tick.C:
		case <-ps.ended:
		}
	}
}

// follow announces this process, reads the members and starts or releases partitions
// to match the assignment. When the bucket cannot be written or read, the assignment
// stays as it is: the pinned consumers still keep any partition to one process.
func (ps *Partitions) follow(ctx context.Context, ms *jetstream.Membership) {
	actx, cancel := context.WithTimeout(ctx, max(ps.beat, time.Second))
	defer cancel()
	if err := ms.Announce(actx, ps.member); err != nil {
		if ctx.Err() == nil {
			ps.log.Warn().Err(err).Msg("trigger heartbeat; keeping the current partitions")
		}
		return
	}
	members, err := ms.Members(actx)
	if err != nil {
		if ctx.Err() == nil {
			ps.log.Warn().Err(err).Msg("read the trigger members; keeping the current partitions")
		}
		return
	}
	if !slices.Contains(members, ps.member) {
		// Just announced: a replica that answered the read may not have it yet.
		members = append(members, ps.member)
	}
	owners := jetstream.AssignPartitions(members, len(ps.parts))
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, part := range ps.parts {
		r := ps.running[part.P]
		switch own := owners[part.P] == ps.member; {
		case own && r == nil:
			if f, ok := ps.failed[part.P]; ok && time.Now().Before(f.at) {
				continue
			}
			ps.start(ctx, part, len(members))
		case !own && r != nil && !r.releasing:
			r.releasing, r.releaseAt = true, time.Now()
			ps.log.Info().Str("partition", part.String()).Str("owner", owners[part.P]).Msg("partition moves away; draining it")
			r.cancel()
		}
	}
}

// start runs partition part's trigger. Callers hold ps.mu.
func (ps *Partitions) start(ctx context.Context, part jetstream.Partition, members int) {
	log := ps.log.With().Str("partition", part.String()).Logger()
	t, err := New(ps.cfg, ps.store, ps.policies, log)
	if err != nil {
		log.Error().Err(err).Msg("partition trigger")
		return
	}
	t.part, t.hub = part, ps.hub
	// Stopped only by cancel (a release, or stop after leaving): ended with the
	// process's ctx, a partition's trigger would stop before stop marked it released,
	// and never be unpinned.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r := &partRun{t: t, cancel: cancel, done: make(chan struct{}), started: time.Now()}
	ps.running[part.P] = r
	log.Info().Int("members", members).Msg("partition owned")
	go func() {
		defer close(r.done)
		err := t.Run(pctx)
		cancel()
		if err != nil {
			log.Error().Err(err).Msg("partition trigger stopped; started again while the partition is owned")
		}
		ps.mu.Lock()
		released, releaseAt := r.releasing, r.releaseAt
		delete(ps.running, part.P)
		if !released && err != nil {
			f := ps.failed[part.P]
			if time.Since(r.started) > maxRestartBackoff {
				f.fails = 0 // it ran a while: a new failure, not the same one again
			}
			f.fails++
			f.at = time.Now().Add(min(ps.beat<<min(f.fails-1, 16), maxRestartBackoff))
			ps.failed[part.P] = f
		} else {
			delete(ps.failed, part.P)
		}
		ps.mu.Unlock()
		if !released {
			return // started again by a later heartbeat while it is owned
		}
		if time.Since(releaseAt) < ps.pinnedTTL {
			// Only after the drain: unpinned while still pulling, this process could
			// be pinned again.
			ps.unpin(part, log)
		} else {
			// A drain longer than the pinned TTL: the server has pinned the new owner
			// meanwhile, and an unpin now would take its pin away.
			log.Info().Msg("partition drained after its pin expired; not unpinned")
		}
		log.Info().Msg("partition released")
		select {
		case ps.ended <- struct{}{}:
		default:
		}
	}()
}

func (ps *Partitions) unpin(part jetstream.Partition, log zerolog.Logger) {
	uctx, cancel := context.WithTimeout(context.Background(), ps.cfg.handBack())
	defer cancel()
	if err := ps.store.Chat().UnpinPartition(uctx, part); err != nil {
		log.Warn().Err(err).Msg("unpin the partition; its next owner waits for the pinned TTL")
	}
}

// stop leaves the bucket (the other processes start pulling this process's
// partitions), drains every partition and unpins it (they are pinned at once).
func (ps *Partitions) stop(ms *jetstream.Membership) {
	// Left while the partitions drain: a bucket that does not answer (its stream
	// electing a leader) does not hold the drain back.
	left := make(chan struct{})
	go func() {
		defer close(left)
		lctx, cancel := context.WithTimeout(context.Background(), ps.cfg.handBack())
		defer cancel()
		if err := ms.Leave(lctx, ps.member); err != nil {
			ps.log.Warn().Err(err).Msg("leave the trigger members; the others take the partitions over when the heartbeat expires")
		}
	}()
	ps.mu.Lock()
	runs := make([]*partRun, 0, len(ps.running))
	for _, r := range ps.running {
		r.releasing, r.releaseAt = true, time.Now()
		r.cancel()
		runs = append(runs, r)
	}
	ps.mu.Unlock()
	for _, r := range runs {
		<-r.done
	}
	<-left
	ps.log.Info().Msg("trigger member stopped")
}

// signalHub hands the events and policy changes of the process's one subscription each
// to the trigger of the conversation's partition, instead of every partition's trigger
// subscribing to all of them.
type signalHub struct {
	n  int
	mu sync.RWMutex
	by map[int]hubHandlers // by partition number
}

type hubHandlers struct {
	event  func(schemas.Event)
	policy func(conv string)
}

// add routes partition p's signals to event and policy until the returned function is
// called.
func (h *signalHub) add(p int, event func(schemas.Event), policy func(string)) (remove func()) {
	h.mu.Lock()
	h.by[p] = hubHandlers{event: event, policy: policy}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.by, p)
		h.mu.Unlock()
	}
}

func (h *signalHub) handlers(conv string) hubHandlers {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.by[jetstream.PartitionOf(conv, h.n)]
}

func (h *signalHub) onEvent(ev schemas.Event) {
	if hh := h.handlers(ev.Conversation); hh.event != nil {
		hh.event(ev)
	}
}

func (h *signalHub) onPolicy(conv string) {
	if hh := h.handlers(conv); hh.policy != nil {
		hh.policy(conv)
	}
}
