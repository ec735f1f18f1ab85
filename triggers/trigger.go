package triggers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// Config sets up the trigger. Each conversation's budget comes from its
// policy.Settings.
type Config struct {
	// RetryDelay is how long to wait before asking again when a request was refused
	// because one is already pending (or the queue could not be reached).
	RetryDelay time.Duration
	// InFlightTimeout is how long a queued request may go without an outcome event
	// before the trigger asks again.
	InFlightTimeout time.Duration
	// FailureBackoff and FailureBackoffMax space the requests after failed compactions.
	FailureBackoff    time.Duration
	FailureBackoffMax time.Duration
	// Regrow is the fraction of the window a declined conversation must grow by before
	// it is asked for again.
	Regrow float64
	// EvictAfter drops the state of a conversation that saw no message for this long; it
	// is rebuilt from KV and the stream on its next message.
	EvictAfter time.Duration
	// SweepEvery is how often idle conversations are looked for, besides the idle
	// markers of ACTIVITY (which catch them on time, also after a restart).
	SweepEvery time.Duration
	// RebuildAttempts bounds the deliveries of one message whose conversation state
	// cannot be rebuilt (its value does not decode, a tokenizer is missing, NATS is
	// unreachable). Then the conversation is reported (failed event, error log) and set
	// aside for BrokenRetry: its messages are acknowledged without counting, so it holds
	// no consumer slot; the next rebuild reads them from the stream.
	RebuildAttempts int
	BrokenRetry     time.Duration
	// DrainTimeout bounds how long a stopping trigger works on the messages in hand;
	// 0 waits until they are settled.
	DrainTimeout time.Duration
	// HandBackTimeout bounds what a stopping trigger does after its drain: flushing the
	// last acknowledgements, and a partition's unpin. 0 means the default, 5 s.
	HandBackTimeout time.Duration
	// ParkAfter is how long a chat message may be in hand before it is parked, on a
	// consumer that acknowledges in batches (see acks.go): its conversation's recount
	// is armed in ACTIVITY and it no longer holds back the acknowledgement of the
	// messages after it. 0 means the default, 2 s.
	ParkAfter time.Duration
	// Counters returns the token counter of a tokenizer name (policy key tokenizer);
	// nil knows chars4 only.
	Counters func(name string) (tokens.Counter, error)
	// Observer hears the messages counted and the requests made (nil: nobody).
	Observer Observer
	// Tracer makes a span of every request queued, whose trace the request carries to
	// the worker (nil: none).
	Tracer trace.TracerProvider
}

// DefaultConfig returns the defaults of the README.
func DefaultConfig() Config {
	return Config{
		RetryDelay:        5 * time.Second,
		InFlightTimeout:   10 * time.Minute,
		FailureBackoff:    time.Minute,
		FailureBackoffMax: 30 * time.Minute,
		Regrow:            0.05,
		EvictAfter:        15 * time.Minute,
		SweepEvery:        30 * time.Second,
		RebuildAttempts:   3,
		BrokenRetry:       time.Minute,
	}
}

// handBack is HandBackTimeout or its default.
func (c Config) handBack() time.Duration {
	if c.HandBackTimeout == 0 {
		return 5 * time.Second
	}
	return c.HandBackTimeout
}

// parkAfter is ParkAfter or its default.
func (c Config) parkAfter() time.Duration {
	if c.ParkAfter == 0 {
		return 2 * time.Second
	}
	return c.ParkAfter
}

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid trigger config")

// Validate checks the config.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.RetryDelay <= 0:
		return bad("retry delay must be positive")
	case c.InFlightTimeout <= 0:
		return bad("in-flight timeout must be positive")
	case c.FailureBackoff <= 0 || c.FailureBackoffMax < c.FailureBackoff:
		return bad("failure backoff must be positive with max ≥ base")
	case !(c.Regrow >= 0 && c.Regrow < 1):
		return bad("regrow must be in [0, 1), got %g", c.Regrow)
	case c.EvictAfter <= 0:
		return bad("evict-after must be positive")
	case c.SweepEvery <= 0:
		return bad("sweep interval must be positive")
	case c.RebuildAttempts < 1:
		return bad("rebuild attempts must be at least 1")
	case c.BrokenRetry <= 0:
		return bad("broken retry must be positive")
	case c.DrainTimeout < 0:
		return bad("drain timeout must not be negative")
	case c.HandBackTimeout < 0:
		return bad("hand-back timeout must not be negative")
	case c.ParkAfter < 0:
		return bad("park-after must not be negative")
	}
	return nil
}

// PolicySource resolves a conversation's settings (defaults, environment, profile and
// the conversation's own policy). When the conversation's policy is invalid, it returns
// an error matching policy.ErrPolicy together with the settings without that policy.
type PolicySource interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// Trigger is the one active consumer of CHAT and of ACTIVITY's idle markers (other
// processes stand by on the same pinned consumers). It runs every trigger kind: budget
// (threshold, token limit, soft threshold, assistant rounds), structural (a large tool
// output) and temporal (an idle conversation), and queues a compaction request when one
// says so.
//
// No lock that other conversations need is held across a network call: the map of
// conversations has its own short lock, each conversation its own (held while its
// messages are counted, its state rebuilt and its request queued), and the event and
// policy subscriptions only leave signals that the conversation's next handler applies.
type Trigger struct {
	cfg      Config
	store    *jetstream.Store
	policies PolicySource
	log      zerolog.Logger
	now      func() time.Time
	// part is the partition whose consumers this trigger reads (see Partitions); the
	// zero value reads the unpartitioned ones. hub, for a partition's trigger, delivers
	// the events and policy changes of its conversations (nil: it subscribes itself).
	part jetstream.Partition
	hub  *signalHub
	// tracer makes the requests' spans (Config.Tracer).
	tracer trace.Tracer
	// firstSight reads the tombstone and value of a conversation seen for the first
	// time (jetstream.Results.FirstSight; a test stands in for a lagging replica).
	firstSight func(ctx context.Context, conv string) (*schemas.Tombstone, *schemas.Result, uint64, error)

	mu    sync.Mutex // guards convs only; never held during a network call
	convs map[string]*tracked

	// lastDelivery is the consumer sequence of the chat message delivered last.
	lastDelivery atomic.Uint64
	// acks keeps the chat deliveries of a consumer that acknowledges in batches (nil:
	// each is acknowledged by itself). Set before the consumer delivers.
	acks *acker
	// stopping is set when Run's context is done: the handlers then wait for their acks.
	stopping atomic.Bool
	// adopting is set while adoptPending runs.
	adopting atomic.Bool
	// idleSeen is set once the idle consumer delivered to this process.
	idleSeen atomic.Bool
	// parking is set while parkHeld's goroutine runs.
	parking atomic.Bool
	// batched is set once a chat delivery came from a consumer that acknowledges in
	// batches (see acks.go).
	batched atomic.Bool

	// shared holds the policies the tracked conversations share.
	shared sharedPolicies

	// runq, under mu: the conversations with deliveries waiting for a worker, in the
	// order they came; running, under mu: the workers (at most maxHandlers). A stopping
	// trigger waits for workers.
	runq    []*tracked
	running int
	workers sync.WaitGroup
}

// maxHandlers is how many conversations are worked on at once (each holds at most one
// delivery in hand): enough to hide the round trips of many new conversations.
const maxHandlers = 64

// maxQueued bounds the chat deliveries waiting for one conversation's handler. A
// conversation whose handler is held up (a rebuild waiting on a stream electing its
// leader) while its messages keep coming would otherwise hold them all unacknowledged
// and fill the consumer's max ack pending, and no other conversation's message would be
// delivered. Past the bound, one delivery (the newest) waits in place of the surplus,
// which is acknowledged at once and counted from the stream when the handler gets to
// it (see coalesce).
const maxQueued = 64

// job is one delivery for a conversation's handler: a chat message, or an idle marker.
// A carrier is a chat message that stands for the surplus before it (see coalesce).
type job struct {
	d       *jetstream.Delivery
	idle    bool
	carrier bool
	// recount, without a delivery: the conversation is counted again from the stream
	// (a catch-up; see acks.go).
	recount *recount
}

// tracked is one conversation the trigger holds state for.
type tracked struct {
	// mu is held while the conversation is worked on, network calls included: only this
	// conversation's handlers wait on it.
	mu sync.Mutex
	st *convState // nil until built; under mu
	// stale, under mu: the state must be rebuilt before it is used again.
	stale bool
	// working, under Trigger.mu: the conversation waits in the run queue, or a worker
	// handles it (see dispatch). Beside stale to save a word.
	working bool
	// rebuildFails, under mu: rebuilds failed in a row on a consumer that acknowledges
	// in batches, where no redelivery counts them (see cannotRebuild). In the same word.
	rebuildFails uint8
	// brokenUntil and broken, under mu: the state could not be rebuilt; until then its
	// messages are acknowledged without counting.
	brokenUntil stamp
	broken      error

	// touched, under Trigger.mu: when a handler last took the conversation (eviction).
	touched stamp
	// jobs, under Trigger.mu: the deliveries waiting for the conversation's handler, in
	// the order they came.
	jobs []job

	// sigMu guards what events and policy changes report. It is never held during a
	// network call, so the subscriptions never wait on a conversation's work.
	sigMu sync.Mutex
	sig   signals
}

// signals are what arrived for a conversation since its handler last looked.
type signals struct {
	stale     bool // the policy changed, or a new value was written
	outcome   bool // the request in flight ended
	completed bool // ... with a new value: failures are forgotten
	failures  int  // failed events
	forgotten bool // the conversation was forgotten: the state is dropped
	// gapFrom and gapTo are the stream sequences of the first deliveries after the
	// earliest and the latest gap in the consumer's deliveries not yet applied: the state
	// used for a message at or after a gap must be rebuilt first, since the messages
	// missed in it are older than that message. A delivery from before every gap, still
	// queued behind its conversation's handler, leaves them for the next one.
	gapFrom, gapTo uint64
}

// addGap records a gap before the delivery of stream sequence seq.
func (s *signals) addGap(seq uint64) {
	if s.gapFrom == 0 || seq < s.gapFrom {
		s.gapFrom = seq
	}
	s.gapTo = max(s.gapTo, seq)
}

func (tr *tracked) signal(fn func(*signals)) {
	tr.sigMu.Lock()
	fn(&tr.sig)
	tr.sigMu.Unlock()
}

func (tr *tracked) takeSignals() signals {
	tr.sigMu.Lock()
	defer tr.sigMu.Unlock()
	s := tr.sig
	tr.sig = signals{}
	return s
}

// New returns a trigger; Run starts it.
func New(cfg Config, store *jetstream.Store, policies PolicySource, log zerolog.Logger) (*Trigger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || policies == nil {
		return nil, fmt.Errorf("%w: a store and a policy source are required", ErrConfig)
	}
	return &Trigger{cfg: cfg, store: store, policies: policies, log: log.With().Str("component", "trigger").Logger(),
		now: time.Now, convs: map[string]*tracked{}, firstSight: store.Results().FirstSight, tracer: newTracer(cfg.Tracer),
		acks: newAcker(time.Now)}, nil
}

// Run consumes CHAT and ACTIVITY until ctx is done, then drains the messages in hand
// (for at most DrainTimeout) and returns.
func (t *Trigger) Run(ctx context.Context) error {
	// Handlers outlive ctx by the drain: the messages in hand when the trigger stops are
	// counted and settled with a live context (and queue the requests they call for),
	// not failed at once and left to the consumer's ack wait, during which no trigger
	// would count them.
	hctx, stopHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHandlers()
	stopListening, err := t.listen(hctx)
	if err != nil {
		return stopped(ctx, err)
	}
	defer stopListening()
	chat, idle, err := t.consume(ctx, hctx)
	if err != nil {
		return stopped(ctx, err)
	}
	if t.part.Partitioned() {
		// A partition taken over: the old owner's watch on the requests it had queued
		// went with its state. (Unpartitioned, every process runs a trigger, and the
		// one that becomes active adopts on its first delivery: see becameActive.)
		t.startAdoption(hctx)
	}
	t.log.Info().Msg("trigger started (active or standby)")
	evict := time.NewTicker(max(t.cfg.EvictAfter/4, time.Second))
	defer evict.Stop()
	sweep := time.NewTicker(t.cfg.SweepEvery)
	defer sweep.Stop()
	park := time.NewTicker(t.cfg.parkAfter() / 4)
	defer park.Stop()
	for {
		select {
		case <-ctx.Done():
			t.drain(ctx, stopHandlers, chat, idle)
			return nil
		case <-evict.C:
			t.evict()
		case <-sweep.C:
			t.sweep(hctx)
		case <-park.C:
			t.parkHeld(hctx)
		}
	}
}

// listen subscribes to the compaction events and watches the policies, or, for a
// partition's trigger, has the process's subscriptions hand it its conversations'.
// stop ends both.
func (t *Trigger) listen(hctx context.Context) (stop func(), err error) {
	if t.hub != nil {
		return t.hub.add(t.part.P, func(ev schemas.Event) { t.onEvent(hctx, ev) }, t.onPolicy), nil
	}
	events, err := t.store.Events().Subscribe("", func(ev schemas.Event) { t.onEvent(hctx, ev) }, func(err error) {
		t.log.Warn().Err(err).Msg("compaction event skipped")
	})
	if err != nil {
		return nil, err
	}
	policies, err := t.store.Policies().Watch(t.onPolicy)
	if err != nil {
		events.Stop()
		return nil, err
	}
	return func() {
		policies.Stop()
		events.Stop()
	}, nil
}

// consume binds the partition's CHAT and idle consumers, waiting for them while they do
// not answer (a cluster electing their leaders, a server restarting): that is not a
// reason to stop the process. Their messages are handled under hctx.
func (t *Trigger) consume(ctx, hctx context.Context) (chat, idle *jetstream.Consumption, err error) {
	consumerErr := func(what string) func(error) {
		return func(err error) {
			var pe *jetstream.PermissionError
			switch {
			case ctx.Err() != nil:
			case errors.As(err, &pe): // nothing comes until the user's permissions change
				t.log.Error().Err(err).Str("subject", pe.Subject).Msg(what + " refused: the partition stalls (the user may not pull from it or ack)")
			default:
				t.log.Warn().Err(err).Msg(what)
			}
		}
	}
	chat, err = jetstream.Retry(ctx, jetstream.DefaultBackoff(), t.log, "bind the trigger's consumer", func() (*jetstream.Consumption, error) {
		return t.store.Chat().ConsumePartition(ctx, t.part, func(d *jetstream.Delivery) { t.onMessage(hctx, d) }, consumerErr("trigger consumer"))
	})
	if err != nil {
		return nil, nil, err
	}
	idle, err = jetstream.Retry(ctx, jetstream.DefaultBackoff(), t.log, "bind the idle consumer", func() (*jetstream.Consumption, error) {
		return t.store.Activity().ConsumePartition(ctx, t.part, func(d *jetstream.Delivery) { t.onIdle(hctx, d) }, consumerErr("idle consumer"))
	})
	if err != nil {
		chat.Drain()
		return nil, nil, err
	}
	return chat, idle, nil
}

// drain stops the trigger once ctx is done: the consumers drain, the handlers in hand
// finish (stopped after DrainTimeout), their acks are flushed and the retry timers of
// the conversations stopped.
func (t *Trigger) drain(ctx context.Context, stopHandlers context.CancelFunc, chat, idle *jetstream.Consumption) {
	t.stopping.Store(true)
	if t.cfg.DrainTimeout > 0 {
		// What is still in hand then fails and waits for its ack wait.
		time.AfterFunc(t.cfg.DrainTimeout, stopHandlers)
	}
	chat.Drain()
	idle.Drain()
	t.workers.Wait()
	// The handlers' acks do not wait for the server; the consumer's drain no
	// longer follows them (they are sent after it), so they are flushed here.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.handBack())
	if err := t.acks.flush(fctx); err != nil {
		t.log.Warn().Err(err).Msg("acknowledge the last messages handled; they are redelivered after the ack wait")
	}
	if err := t.store.FlushAcks(fctx); err != nil {
		t.log.Warn().Err(err).Msg("flush the last acknowledgements; their messages are redelivered after the ack wait")
	}
	cancel()
	for _, tr := range t.snapshot() {
		tr.mu.Lock()
		if tr.st != nil && tr.st.retry != nil {
			tr.st.retry.Stop()
		}
		tr.mu.Unlock()
	}
	t.log.Info().Msg("trigger stopped")
}

// stopped turns an error met while ctx was being cancelled into a clean stop.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Tracked returns how many conversations the trigger holds state for.
func (t *Trigger) Tracked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.convs)
}

// get returns the conversation's entry, created empty when it has none.
func (t *Trigger) get(id string) *tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.convs[id]
	if tr == nil {
		tr = &tracked{}
		t.convs[id] = tr
	}
	tr.touched = stampOf(t.now())
	return tr
}

// lookup returns the conversation's entry, nil when it is not tracked.
func (t *Trigger) lookup(id string) *tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.convs[id]
}

func (t *Trigger) snapshot() []*tracked {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*tracked, 0, len(t.convs))
	for _, tr := range t.convs {
		out = append(out, tr)
	}
	return out
}

// evict drops the state of conversations untouched for EvictAfter, unless a request,
// a retry or a backoff is pending. A conversation being worked on is left alone.
func (t *Trigger) evict() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	cutoff := now.Add(-t.cfg.EvictAfter)
	for id, tr := range t.convs {
		if !tr.touched.time().Before(cutoff) || tr.working || !tr.mu.TryLock() {
			continue
		}
		c := tr.st
		if c == nil || (c.retry == nil && !now.Before(c.inFlightUntil.time()) && !now.Before(c.backoffUntil.time())) {
			delete(t.convs, id)
		}
		tr.mu.Unlock()
	}
}

// throughNewest asks ready to count through the conversation's newest message.
const throughNewest = math.MaxUint64

// ready returns the conversation's state with the signals applied, rebuilt when it has
// none or it is stale. A rebuild counts the messages through the sequence through
// (throughNewest: the conversation's newest, asked from the stream leader), and never
// fewer than the old state had counted: a redelivered message older than the watermark
// does not make the trigger forget what it counted since. Callers hold tr.mu.
func (t *Trigger) ready(ctx context.Context, tr *tracked, id string, through uint64) (*convState, error) {
	sig := tr.takeSignals()
	if sig.gapFrom > 0 {
		switch {
		case through == throughNewest || through+1 >= sig.gapTo:
			sig.stale = true
		case through+1 >= sig.gapFrom:
			// The rebuild covers the gaps before this message; a later one still waits
			// for the message after it.
			sig.stale = true
			tr.signal(func(s *signals) { s.addGap(sig.gapTo) })
		default:
			tr.signal(func(s *signals) { s.addGap(sig.gapFrom); s.addGap(sig.gapTo) })
		}
	}
	now := t.now()
	// Seen for the first time: no state, nothing signalled that a replica may not know
	// of yet (see rebuild).
	first := tr.st == nil && !tr.stale && !sig.forgotten && !sig.stale
	if sig.forgotten || (tr.st != nil && tr.st.forgotten) {
		// Nothing of the forgotten conversation is kept, timers included: no retry asks
		// for it again; the rebuild below starts after the tombstone.
		if tr.st != nil && tr.st.retry != nil {
			tr.st.retry.Stop()
		}
		tr.st, tr.stale, tr.broken, tr.brokenUntil = nil, false, nil, 0
	}
	if sig.stale {
		tr.stale, tr.broken, tr.brokenUntil = true, nil, 0
	}
	if c := tr.st; c != nil {
		if sig.outcome {
			c.inFlightUntil = 0
			if c.retry != nil && c.retryInFlight {
				c.retry.Stop()
				c.retry, c.retryInFlight = nil, false
			}
		}
		if sig.completed {
			c.failures, c.backoffUntil = 0, 0
		}
		for range sig.failures {
			c.failed(now, t.cfg.FailureBackoff, t.cfg.FailureBackoffMax)
		}
		t.checkInFlight(ctx, tr, c, id, now)
	}
	if tr.st != nil && !tr.stale {
		return tr.st, nil
	}
	if tr.broken != nil && now.Before(tr.brokenUntil.time()) {
		return nil, tr.broken
	}
	if through == throughNewest {
		last, err := t.store.Chat().LastSeq(ctx, id)
		if err != nil {
			return nil, err
		}
		through = last
	}
	var old *timers
	if tr.st != nil {
		old = &tr.st.timers
		through = max(through, tr.st.watermark)
	}
	c, err := t.rebuild(ctx, id, through, old, first)
	if err != nil {
		return nil, err
	}
	tr.st, tr.stale, tr.broken, tr.rebuildFails = c, false, nil, 0
	return c, nil
}

// startAdoption runs adoptPending unless one is running. Called from Run, or from a
// consumer's callback before the drain, so the workers' wait covers it.
func (t *Trigger) startAdoption(ctx context.Context) {
	if !t.adopting.CompareAndSwap(false, true) {
		return
	}
	t.workers.Add(1)
	go func() {
		defer t.workers.Done()
		defer t.adopting.Store(false)
		t.adoptPending(ctx)
	}()
}

// becameActive adopts the pending requests when an unpartitioned trigger gets its first
// delivery, or its first after a gap (another process held the pin meanwhile): it has
// just become the active one, and what the process it took over from watched went with
// that process. (A partition's trigger adopts when it starts: it runs only while its
// process owns the partition.)
func (t *Trigger) becameActive(ctx context.Context) {
	if !t.part.Partitioned() && !t.stopping.Load() {
		t.startAdoption(ctx)
	}
}

// adoptPending takes on the conversations of the trigger's partition that have a
// request in the work queue. Their old owner watched those requests (checkInFlight,
// retries, the wake after an outcome); a quiet conversation would otherwise wait for its
// next message when the request ends without an outcome event reaching this process.
func (t *Trigger) adoptPending(ctx context.Context) {
	convs, err := t.store.Queue().PendingConversations(ctx, t.part)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn().Err(err).Msg("list the partition's pending requests; their conversations are looked at on their next message")
		}
		return
	}
	for _, id := range convs {
		if ctx.Err() != nil || t.stopping.Load() {
			return
		}
		t.adopt(ctx, id)
	}
}

// adopt builds the state of conversation id, whose request is in the queue, as in
// flight: its end is checked for like that of a request this trigger queued.
func (t *Trigger) adopt(ctx context.Context, id string) {
	tr := t.get(id)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.st != nil {
		return // a message came first: its request, refused while one is pending, is retried
	}
	log := t.log.With().Str("conversation", id).Logger()
	c, err := t.ready(ctx, tr, id, throughNewest)
	if err != nil {
		log.Debug().Err(err).Msg("adopt a pending request; the next message rebuilds the conversation")
		return
	}
	now := t.now()
	c.inFlightUntil, c.inFlightCheckAt = stampOf(now.Add(t.cfg.InFlightTimeout)), stampOf(now.Add(t.cfg.RetryDelay))
	if err := t.evaluate(ctx, c, log); err != nil {
		log.Warn().Err(err).Msg("queue compaction; will retry")
		t.scheduleRetry(ctx, id, c, t.cfg.RetryDelay)
	}
}

// checkInFlight asks the work queue, at most every RetryDelay, whether the request in
// flight is still there. When it is gone, its outcome event never reached this trigger
// and never will: events are plain NATS messages, lost while this process's connection
// is down (a server restarting, a cluster failing over), and a worker that dies between
// its ack and its event sends none. Without this the conversation would wait for
// InFlightTimeout, and a quiet one for its next message. The request is then no longer
// in flight and the state is rebuilt, since a value may have been written. Callers hold
// tr.mu.
func (t *Trigger) checkInFlight(ctx context.Context, tr *tracked, c *convState, id string, now time.Time) {
	if !now.Before(c.inFlightUntil.time()) || now.Before(c.inFlightCheckAt.time()) {
		return
	}
	c.inFlightCheckAt = stampOf(now.Add(t.cfg.RetryDelay))
	pending, err := t.store.Queue().Pending(ctx, id)
	switch {
	case err != nil:
		// Unknown: the request stays in flight until the next check.
		t.log.Debug().Err(err).Str("conversation", id).Msg("look for the request in flight")
	case pending == nil:
		t.log.Info().Str("conversation", id).Msg("the request in flight left the queue without an outcome event reaching the trigger; looking again")
		c.inFlightUntil, c.inFlightCheckAt = 0, 0
		tr.stale = true
	}
}

// rebuild reads the conversation's value and messages through the sequence through
// into a fresh state. The timers of an old state carry over. first says the trigger
// holds nothing of the conversation and nothing was signalled for it: its tombstone and
// value may then come from any replica (see readValue).
func (t *Trigger) rebuild(ctx context.Context, id string, through uint64, old *timers, first bool) (*convState, error) {
	s, err := t.policies.Settings(ctx, id)
	if errors.Is(err, policy.ErrPolicy) {
		// Keep counting against the settings without the policy; the worker reports
		// the bad policy on the request (failed event, dead letter).
		t.log.Warn().Err(err).Str("conversation", id).Msg("invalid conversation policy; using the defaults for the trigger")
	} else if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	tomb, v, err := t.readValue(ctx, id, first)
	if err != nil {
		return nil, err
	}
	count, err := tokens.Lookup(s.Tokenizer, t.cfg.Counters)
	if err != nil {
		return nil, err
	}
	c := &convState{id: id, watermark: through, shared: t.shared.get(s, count), base: math.MaxUint64}
	if old != nil {
		c.timers = *old
	}
	from := uint64(1)
	if tomb != nil {
		from, c.forgottenThrough = tomb.ThroughSeq+1, tomb.ThroughSeq
	}
	var pinned []schemas.Entry
	if v != nil {
		from = max(v.TailStartSeq, from)
		c.base = v.FirstSeq
		c.tailStart = v.TailStartSeq
		if pinned, err = t.store.Chat().LoadPinned(ctx, id, v.PinnedSeqs); err != nil {
			return nil, err
		}
		c.declinedAtSeq = v.DeclinedAtSeq
		c.generation = v.Generation
		c.loadedThrough = v.LoadedThroughSeq
	}
	var tail []schemas.Entry
	if through >= from {
		if tail, err = t.store.Chat().LoadEntriesThrough(ctx, id, from, through); err != nil {
			return nil, err
		}
	}
	c.countLoaded(count, v, pinned, tail)
	return c, nil
}

// readValue reads the conversation's tombstone and value; a value of the forgotten
// conversation is none. first says where from (the stream leaders, or any replica).
//
// A forgotten conversation's messages and value are not counted, even before the
// forget has deleted them: the conversation starts again after the tombstone.
//
// Where they are read from: a rebuild that follows an outcome, a stale signal or a
// forget reads both from the stream leaders, since it exists because of a write (a
// new value, a tombstone) that a lagging replica may not have yet, and the state
// built on the write before it would be wrong the other way. A conversation seen
// for the first time (most of a busy trigger's rebuilds, each of them two leader
// reads through the JetStream API otherwise) reads them with direct gets shared
// with the other new conversations, from any replica. Nothing the trigger did
// depends on a write there, and an older answer can only make it count from an
// earlier tail start, or count messages a tombstone it missed covers: it
// over-counts, which is safe. A
// request it makes then is checked against the tombstone on the leader
// (forgottenMeanwhile) and re-read by the worker from the leader, which declines when
// nothing needs doing; a decline or a completion makes the state stale, so it is
// rebuilt from the leaders. A tombstone missed this way is still applied without a
// request: the forget's forgotten event, published after the tombstone, drops the
// state, and the rebuild that follows reads the tombstone from the leader.
func (t *Trigger) readValue(ctx context.Context, id string, first bool) (tomb *schemas.Tombstone, v *schemas.Result, err error) {
	var rev uint64
	if first {
		tomb, v, rev, err = t.firstSight(ctx, id)
		if err != nil {
			return nil, nil, err
		}
	} else {
		if tomb, err = t.store.Forgotten(ctx, id); err != nil {
			return nil, nil, err
		}
		if v, rev, err = t.store.Results().Get(ctx, id, true); err != nil {
			return nil, nil, err
		}
	}
	if v != nil && tomb.Covers(v.FirstSeq) {
		t.removeForgotten(ctx, id, v, rev, tomb)
		v = nil
	}
	return tomb, v, nil
}

// countLoaded counts what a rebuild loaded into c: the pinned messages, v's summary
// and the tail, whose first message and time it keeps, and the tokens the
// conversation had at its last decline (those of the tail through declinedAtSeq).
func (c *convState) countLoaded(count tokens.Counter, v *schemas.Result, pinned, tail []schemas.Entry) {
	// The value's overrides (a truncation, a masked tool output) are what every reader
	// sends in place of those messages: counted as the readers send them. Counting the
	// raw messages made a masked conversation look as large as before its masking, and
	// the trigger asked for a compaction on every message.
	var overrides map[uint64]schemas.Override
	if v != nil && len(v.Overrides) > 0 {
		overrides = make(map[uint64]schemas.Override, len(v.Overrides))
		for _, o := range v.Overrides {
			overrides[o.Seq] = o
		}
	}
	shown := func(e *schemas.Entry) *schemas.Message {
		if o, ok := overrides[e.Seq]; ok {
			m := assemble.ApplyOverride(e.Message, o)
			return &m
		}
		return &e.Message
	}
	for i := range pinned {
		if pinned[i].Err == nil {
			c.tokens += tokens.MessageWith(count, shown(&pinned[i]))
		}
	}
	if v != nil && v.Summary != "" {
		sm := assemble.SummaryMessage(v)
		c.tokens += tokens.MessageWith(count, &sm)
	}
	for i := range tail {
		c.base = min(c.base, tail[i].Seq)
		c.seen.Add(tail[i].Seq) // an invalid message is stored all the same
		if tail[i].Err == nil {
			c.add(decoded(shown(&tail[i]), count), tail[i].Seq)
		}
	}
	c.structural = "" // a large output already covered by a compaction, or counted before a restart
	if n := len(tail); n > 0 {
		c.lastMsgAt = stampOf(tail[n-1].Time)
	}
	if c.declinedAtSeq > 0 {
		c.tokensAtDecline = c.tokens
		for i := range tail {
			if tail[i].Err == nil && tail[i].Seq > c.declinedAtSeq {
				c.tokensAtDecline -= tokens.MessageWith(count, &tail[i].Message)
			}
		}
	}
}

// cannotRebuild settles a delivery whose conversation state could not be rebuilt: a
// redelivery after a pause while attempts remain, then the conversation is reported
// and set aside for BrokenRetry, and the delivery acknowledged. It never naks forever.
func (t *Trigger) cannotRebuild(ctx context.Context, tr *tracked, id string, d *jetstream.Delivery, err error, log zerolog.Logger) {
	if tr.broken != nil && t.now().Before(tr.brokenUntil.time()) {
		t.ack(ctx, d) // set aside: the next rebuild reads this message from the stream
		return
	}
	if slotOf(d) != nil {
		// Acknowledged in batches, nothing is redelivered: the conversation counts its
		// failed rebuilds (here and in its recounts, see handleIdle), and the message
		// is parked until the last attempt, which reports it and sets it aside.
		delay, aside := t.rebuildFailed(ctx, tr, id, err, d.Seq, "rebuild conversation state; parked, counted again later", log)
		if aside {
			t.ack(ctx, d)
			return
		}
		t.retryLater(ctx, d, delay, log)
		return
	}
	if d.Attempt < uint64(t.cfg.RebuildAttempts) {
		delay := t.cfg.RetryDelay * time.Duration(d.Attempt)
		log.Warn().Err(err).Uint64("attempt", d.Attempt).Dur("retry_in", delay).Msg("rebuild conversation state; retrying")
		t.retryLater(ctx, d, delay, log)
		return
	}
	t.setAside(ctx, tr, id, err, d.Seq, log)
	t.ack(ctx, d)
}

// rebuildFailed counts a failed rebuild of the conversation tr on a consumer that
// acknowledges in batches (no redelivery counts them). The last of RebuildAttempts in a
// row reports it and sets it aside (see setAside; base is its base) and returns aside;
// before that, it logs what and returns the delay before the next attempt. Callers
// hold tr.mu.
func (t *Trigger) rebuildFailed(ctx context.Context, tr *tracked, id string, err error, base uint64, what string, log zerolog.Logger) (delay time.Duration, aside bool) {
	tr.rebuildFails++
	if int(tr.rebuildFails) >= t.cfg.RebuildAttempts {
		tr.rebuildFails = 0
		t.setAside(ctx, tr, id, err, base, log)
		return 0, true
	}
	delay = t.cfg.RetryDelay * time.Duration(tr.rebuildFails)
	log.Warn().Err(err).Uint8("attempt", tr.rebuildFails).Dur("retry_in", delay).Msg(what)
	return delay, false
}

// setAside reports a conversation whose state cannot be rebuilt (failed event, error
// log) and sets it aside for BrokenRetry. base is the lowest chat sequence the report
// depends on (0: none known), for forgottenMeanwhile. Callers hold tr.mu.
func (t *Trigger) setAside(ctx context.Context, tr *tracked, id string, err error, base uint64, log zerolog.Logger) {
	tr.broken, tr.brokenUntil = err, stampOf(t.now().Add(t.cfg.BrokenRetry))
	log.Error().Err(err).Dur("retry_in", t.cfg.BrokenRetry).Msg("conversation state cannot be rebuilt; not counting it until then")
	ev := schemas.Event{Type: schemas.EventFailed, Conversation: id, RequestID: schemas.NewRequestID(),
		Reason: "the trigger cannot read the conversation", Error: err.Error(), At: t.now().UTC()}
	var w jetstream.Writes
	if perr := t.store.Events().PublishRecorded(ctx, ev, &w); perr != nil {
		log.Warn().Err(perr).Msg("publish failed event")
	}
	if base > 0 {
		t.forgottenMeanwhile(ctx, id, base, &w, log)
	}
}

// forgottenMeanwhile checks, after a write, whether the conversation was forgotten
// through base (the lowest sequence the write depended on) and if so takes back what
// w recorded. It reads the tombstone from the leader: a forget whose tombstone comes
// later deletes the writes itself (see jetstream.Store.Forget).
func (t *Trigger) forgottenMeanwhile(ctx context.Context, id string, base uint64, w *jetstream.Writes, log zerolog.Logger) bool {
	tomb, err := t.store.Forgotten(ctx, id)
	if err != nil {
		log.Warn().Err(err).Msg("cannot tell whether the conversation was forgotten meanwhile; a worker drops a request made before a forget")
		return false
	}
	if !tomb.Covers(base) {
		return false
	}
	if err := t.store.TakeBack(ctx, id, w); err != nil {
		log.Error().Err(err).Msg("conversation forgotten; taking back the trigger's writes failed: forget it again")
		return true
	}
	log.Info().Uint64("through_seq", tomb.ThroughSeq).Msg("conversation forgotten; the trigger's writes were taken back and its state dropped")
	return true
}

// ack acknowledges a handled delivery. It does not wait for the server, except while
// the trigger stops: then the process may end as soon as Run returns, and the ack must
// have been applied by then, or its message waits for the ack wait before another
// trigger counts it. (The server applies acks in order, so the last one confirmed
// covers those sent before.)
func (t *Trigger) ack(ctx context.Context, d *jetstream.Delivery) {
	if s := slotOf(d); s != nil {
		t.acks.settle(s) // acknowledged in a batch; a stopping trigger's last is confirmed
		return
	}
	if !t.stopping.Load() {
		_ = d.Ack()
		return
	}
	if err := d.AckSync(ctx); err != nil {
		t.log.Warn().Err(err).Str("conversation", d.Conversation).Uint64("seq", d.Seq).Msg("acknowledge while stopping; the message is redelivered")
	}
}

// settle acknowledges d at once, without waiting for the server even while stopping
// (or marks it settled for a batch).
func (t *Trigger) settle(d *jetstream.Delivery) {
	if s := slotOf(d); s != nil {
		t.acks.settle(s)
		return
	}
	_ = d.Ack()
}

// retryLater has d, a chat message that could not be handled now, handled again after
// delay: a nak, after which the server delivers it again; on a consumer that
// acknowledges in batches, a park (see acks.go): its conversation's recount is armed.
// A park that fails leaves the message in hand, and parkHeld tries again.
func (t *Trigger) retryLater(ctx context.Context, d *jetstream.Delivery, delay time.Duration, log zerolog.Logger) {
	if s := slotOf(d); s != nil {
		if err := t.park(ctx, s, delay); err != nil {
			log.Warn().Err(err).Msg("park chat message; tried again while it is in hand")
		}
		return
	}
	if err := d.NakAfter(ctx, delay); err != nil {
		log.Warn().Err(err).Msg("nak chat message; it is redelivered after the ack wait")
	}
}

// park arms the recount of s's conversation after delay, durably, then settles s: a
// later delivery of the conversation counts it again from the stream first, and so
// does the recount, also in another process after a crash or a takeover.
func (t *Trigger) park(ctx context.Context, s *ackSlot, delay time.Duration) error {
	d := s.d
	if t.acks.settled(s) {
		return nil // handled meanwhile
	}
	if err := t.store.Activity().ArmRecount(ctx, d.Conversation, delay, d.Seq); err != nil {
		return err
	}
	if tr := t.lookup(d.Conversation); tr != nil {
		tr.signal(func(sg *signals) { sg.addGap(d.Seq) })
	}
	t.acks.settle(s)
	return nil
}

// parkHeld parks the chat messages in hand for longer than ParkAfter, one after the
// other on a goroutine of its own (none while one runs).
func (t *Trigger) parkHeld(ctx context.Context) {
	if !t.parking.CompareAndSwap(false, true) {
		return
	}
	old, _ := t.acks.held(time.Now().Add(-t.cfg.parkAfter()))
	if len(old) == 0 {
		t.parking.Store(false)
		return
	}
	t.workers.Add(1)
	go func() {
		defer t.workers.Done()
		defer t.parking.Store(false)
		for i, s := range old {
			if ctx.Err() != nil || t.stopping.Load() {
				for _, s := range old[i:] {
					t.acks.unpark(s)
				}
				return
			}
			log := t.log.With().Str("conversation", s.d.Conversation).Uint64("seq", s.d.Seq).Logger()
			if err := t.park(ctx, s, t.cfg.RetryDelay); err != nil {
				t.acks.unpark(s)
				log.Warn().Err(err).Msg("park a chat message in hand too long; tried again later")
				continue
			}
			log.Info().Dur("in_hand", time.Since(s.at).Round(time.Millisecond)).Dur("recount_in", t.cfg.RetryDelay).
				Msg("chat message in hand too long parked: its conversation is counted again from the stream")
		}
	}()
}

// recount is a catch-up's job for one conversation (see acks.go): counted again from
// the stream and evaluated. failed says it must be done again.
type recount struct {
	conv         string
	wg           *sync.WaitGroup
	failed, done atomic.Bool
}

// startCatchUp puts a barrier before the chat delivery of stream sequence first, the
// first this trigger got after becoming active, and catches up on what is below it
// (see acks.go); the barrier is settled once it has.
func (t *Trigger) startCatchUp(ctx context.Context, first uint64, redelivered bool) {
	b := t.acks.barrier()
	t.workers.Add(1)
	go func() {
		defer t.workers.Done()
		if t.catchUp(ctx, first, redelivered) {
			t.acks.settle(b)
		}
	}()
}

// catchUp counts again, from the stream, each conversation of the partition with a
// message between the consumer's ack floor and first, and evaluates it: messages the
// previous owner of the consumer may not have handled. When first was a redelivery
// (they come before new messages), the previous owner may also have held messages
// after it: the catch-up then reaches the highest sequence the consumer delivered
// (some of them this trigger's own; counting them again is harmless). It returns false
// when the trigger stopped first.
func (t *Trigger) catchUp(ctx context.Context, first uint64, redelivered bool) bool {
	var convs []string
	for wait := t.cfg.RetryDelay / 8; ; wait = min(2*wait, t.cfg.RetryDelay) {
		floor, delivered, err := t.store.Chat().AckState(ctx, t.part)
		through := first - 1
		if redelivered {
			through = max(through, delivered)
		}
		if err == nil && floor < through {
			convs, err = t.store.Chat().ConversationsBetween(ctx, t.part, floor+1, through)
		}
		if err == nil {
			if len(convs) > 0 {
				t.log.Info().Uint64("ack_floor", floor).Uint64("through", through).Uint64("first_delivery", first).Int("conversations", len(convs)).
					Msg("became active: counting again the conversations of the messages below the first delivery")
			}
			break
		}
		if !t.pause(ctx, wait) {
			return false
		}
		t.log.Warn().Err(err).Msg("became active: read what is below the first delivery; trying again (nothing is acknowledged meanwhile)")
	}
	for len(convs) > 0 {
		var wg sync.WaitGroup
		jobs := make([]*recount, len(convs))
		for i, id := range convs {
			jobs[i] = &recount{conv: id, wg: &wg}
			wg.Add(1)
			tr := t.get(id)
			tr.signal(func(s *signals) { s.addGap(first) })
			t.dispatch(ctx, tr, job{recount: jobs[i]})
		}
		if !t.waitRecounts(ctx, &wg, jobs) {
			wg.Wait() // a recount could not be parked: wait for it
		}
		convs = convs[:0]
		for _, r := range jobs {
			if r.failed.Load() {
				convs = append(convs, r.conv)
			}
		}
		if len(convs) > 0 && !t.pause(ctx, t.cfg.RetryDelay) {
			return false
		}
	}
	return true
}

// waitRecounts waits for a catch-up's recounts for ParkAfter; those not done by then
// (a conversation whose reads hang) are parked, their recounts armed in ACTIVITY, so
// that they do not hold the barrier, and with it every acknowledgement, any longer. It
// returns false when one could not be parked.
func (t *Trigger) waitRecounts(ctx context.Context, wg *sync.WaitGroup, jobs []*recount) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(t.cfg.parkAfter()):
	}
	for _, r := range jobs {
		if r.done.Load() {
			continue
		}
		if err := t.store.Activity().ArmRecount(ctx, r.conv, t.cfg.RetryDelay, 0); err != nil {
			t.log.Warn().Err(err).Str("conversation", r.conv).Msg("park a recount that takes long; waiting for it")
			return false
		}
		t.log.Info().Str("conversation", r.conv).Msg("a recount after becoming active takes long: parked, counted again later")
	}
	return true
}

// pause waits for d; false when the trigger stops first.
func (t *Trigger) pause(ctx context.Context, d time.Duration) bool {
	if t.stopping.Load() {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return !t.stopping.Load()
	}
}

// handleRecount handles a catch-up's recount of the conversation tr. One that cannot
// be counted now has its recount armed in ACTIVITY instead; when that fails too, the
// catch-up tries again.
func (t *Trigger) handleRecount(ctx context.Context, tr *tracked, r *recount) {
	defer r.wg.Done()
	defer r.done.Store(true)
	log := t.log.With().Str("conversation", r.conv).Logger()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c, err := t.ready(ctx, tr, r.conv, throughNewest)
	if err == nil {
		if err = t.evaluate(ctx, c, log); err == nil && !c.forgotten {
			t.arm(c)
		}
	}
	if err == nil {
		return
	}
	if aerr := t.store.Activity().ArmRecount(ctx, r.conv, t.cfg.RetryDelay, 0); aerr != nil {
		log.Warn().Err(err).AnErr("arm", aerr).Msg("count the conversation again after becoming active; trying again")
		r.failed.Store(true)
		return
	}
	log.Warn().Err(err).Dur("recount_in", t.cfg.RetryDelay).Msg("count the conversation again after becoming active; its recount is armed")
}

// onMessage takes a chat message from the consumer: it looks for missed deliveries
// and hands the message to its conversation's handler (see dispatch), so the consumer
// goes on to the next message at once.
func (t *Trigger) onMessage(ctx context.Context, d *jetstream.Delivery) {
	if d.MetadataErr != nil {
		t.log.Error().Err(d.MetadataErr).Str("subject", d.Subject).Msg("chat message without metadata")
		_ = d.Term(ctx, "no metadata")
		return
	}
	prev := t.lastDelivery.Swap(d.ConsumerSeq)
	active := prev == 0 || d.ConsumerSeq != prev+1
	if active {
		t.becameActive(ctx)
	}
	if d.AcksAll {
		if !t.batched.Load() {
			t.batched.Store(true)
		}
		if active {
			t.startCatchUp(ctx, d.Seq, d.Attempt > 1)
		}
		t.acks.add(d)
	}
	if prev != 0 && d.ConsumerSeq != prev+1 {
		// Deliveries this process did not get came in between: another trigger process
		// held the pin for a while (a failover, the pin moving with a consumer leader),
		// or they were lost on the way. Any conversation may have messages this process
		// did not count, so every state is rebuilt from the stream before it is used.
		t.log.Info().Uint64("after", prev).Uint64("delivery", d.ConsumerSeq).Msg("deliveries missed; every conversation is counted again")
		for _, tr := range t.snapshot() {
			tr.signal(func(s *signals) { s.addGap(d.Seq) })
		}
	}
	id := d.Conversation
	if id == "" {
		t.log.Warn().Str("subject", d.Subject).Uint64("seq", d.Seq).Msg("message on a subject with an invalid conversation id skipped")
		t.settle(d)
		return
	}
	t.dispatch(ctx, t.get(id), job{d: d})
}

// dispatch queues a delivery for its conversation's handler. The consumer's callback
// never waits on a conversation: the round trips of one (a rebuild, queueing a request
// and its event) hold up only its own later messages, which are handled in order after
// it. Up to maxHandlers workers take the conversations that have deliveries waiting, one
// delivery at a time, so each conversation is handled by one worker at a time. Workers
// exit when no conversation waits (a stopping trigger waits for them).
func (t *Trigger) dispatch(ctx context.Context, tr *tracked, j job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !j.idle && j.recount == nil && len(tr.jobs) >= maxQueued {
		t.coalesce(tr, j)
	} else {
		tr.jobs = append(tr.jobs, j)
	}
	if tr.working {
		return // waiting in runq, or being handled: its worker takes this one after
	}
	tr.working = true
	t.runq = append(t.runq, tr)
	if t.running < maxHandlers {
		t.running++
		t.workers.Add(1)
		go t.work(ctx)
	}
}

// coalesce queues a chat delivery for a conversation that has maxQueued waiting: the
// first past the bound waits as the carrier; a later one takes the carrier's place,
// and the carrier it replaces is acknowledged uncounted, with a gap signalled before
// the new one, so its handler rebuilds the state through the message before it (the
// surplus read from the stream) before counting it. A delivery older than the carrier
// (a redelivery) is acknowledged the same way, and one of the carrier's own message
// needs nothing more. Callers hold t.mu; acks do not wait for the server.
func (t *Trigger) coalesce(tr *tracked, j job) {
	last := &tr.jobs[len(tr.jobs)-1]
	switch {
	case !last.carrier:
		j.carrier = true
		tr.jobs = append(tr.jobs, j)
	case j.d.Seq <= last.d.Seq:
		if j.d.Seq < last.d.Seq {
			seq := last.d.Seq
			tr.signal(func(s *signals) { s.addGap(seq) })
		}
		t.settle(j.d)
	default:
		old := last.d
		j.carrier = true
		*last = j
		tr.signal(func(s *signals) { s.addGap(j.d.Seq) })
		t.settle(old)
	}
}

// work handles deliveries until no conversation waits.
func (t *Trigger) work(ctx context.Context) {
	defer t.workers.Done()
	t.mu.Lock()
	for len(t.runq) > 0 {
		tr := t.runq[0]
		t.runq[0] = nil
		t.runq = t.runq[1:]
		j := tr.jobs[0]
		tr.jobs[0] = job{}
		tr.jobs = tr.jobs[1:]
		t.mu.Unlock()
		switch {
		case j.recount != nil:
			t.handleRecount(ctx, tr, j.recount)
		case j.idle:
			t.handleIdle(ctx, tr, j.d)
		default:
			t.handleMessage(ctx, tr, j.d)
		}
		t.mu.Lock()
		if len(tr.jobs) > 0 {
			t.runq = append(t.runq, tr) // after the others waiting: one busy conversation does not starve them
		} else {
			tr.jobs, tr.working = nil, false
		}
	}
	t.runq = nil
	t.running--
	t.mu.Unlock()
}

// handleMessage counts one chat message of the conversation tr and asks for a
// compaction when it calls for one.
func (t *Trigger) handleMessage(ctx context.Context, tr *tracked, d *jetstream.Delivery) {
	id := d.Conversation
	// Built only when something is logged: most messages log nothing.
	log := func() zerolog.Logger { return t.log.With().Str("conversation", id).Uint64("seq", d.Seq).Logger() }
	tr.mu.Lock()
	defer tr.mu.Unlock()
	t.counted(d)
	// A rebuild counts what came before this message; the message itself is counted
	// below like any other, so a large tool output that arrives right after a
	// compaction still calls for a structural compaction.
	c, err := t.ready(ctx, tr, id, d.Seq-1)
	if err != nil {
		t.cannotRebuild(ctx, tr, id, d, err, log())
		return
	}
	if d.Seq <= c.forgottenThrough {
		t.ack(ctx, d) // a forgotten conversation's message, delivered before the forget deleted it
		return
	}
	if d.Seq > c.watermark {
		in, err := read(d.Data(), c.count)
		c.watermark = d.Seq
		c.base = min(c.base, d.Seq)
		c.lastMsgAt = stampOf(d.Time)
		if d.Seq >= c.tailStart {
			c.seen.Add(d.Seq) // whatever it holds: the worker will find it stored, or not
		}
		if err != nil {
			l := log()
			l.Warn().Err(err).Msg("invalid chat message skipped")
			t.ack(ctx, d)
			return
		}
		// One read late (redelivered after a failover, or by a trigger behind the
		// workers), after a compaction covered it, is in the summary.
		if d.Seq >= c.tailStart {
			if u := c.add(in, d.Seq); u.estimate > 0 {
				t.usageIgnored(u, log())
			}
		}
	}
	// A redelivery (already counted) is evaluated again too: it was not acknowledged
	// because its request could not be queued.
	if kind, reason := c.decide(); kind != "" {
		l := log()
		if _, err := t.request(t.withCause(ctx, d), c, kind, reason, l); err != nil {
			l.Warn().Err(err).Dur("retry_in", t.cfg.RetryDelay).Msg("queue compaction; the message is handled again")
			t.retryLater(ctx, d, t.cfg.RetryDelay, l)
			return
		}
	}
	if !c.forgotten {
		t.arm(c)
	}
	t.ack(ctx, d)
}

// evaluate queues a compaction when the conversation needs one. An error means the
// queue could not be reached: nothing was queued or scheduled. Callers hold the
// conversation's lock.
func (t *Trigger) evaluate(ctx context.Context, c *convState, log zerolog.Logger) error {
	kind, reason := c.decide()
	if kind == "" {
		return nil
	}
	_, err := t.request(ctx, c, kind, reason, log)
	return err
}

// request queues a compaction of kind for reason unless the guard or a backoff says
// not now; asked reports whether a request is now pending (this one, or one queued
// before). A request refused because one is pending is asked for again after
// RetryDelay; one held back by a failure's backoff when the backoff ends. Callers hold
// the conversation's lock.
func (t *Trigger) request(ctx context.Context, c *convState, kind, reason string, log zerolog.Logger) (asked bool, err error) {
	now := t.now()
	if why := c.hold(now, t.cfg.Regrow); why != "" {
		log.Debug().Int("tokens", c.tokens).Str("held", why).Msg("compaction wanted, not asked for now")
		switch {
		case c.retry != nil, c.forgotten:
		case now.Before(c.inFlightUntil.time()):
			// Looked at again when the queue may be asked whether the request is
			// still there (see checkInFlight), in case its outcome never comes.
			t.scheduleRetry(ctx, c.id, c, max(c.inFlightCheckAt.time().Sub(now), t.cfg.RetryDelay/4))
			c.retryInFlight = true
		case now.Before(c.backoffUntil.time()):
			t.scheduleRetry(ctx, c.id, c, c.backoffUntil.time().Sub(now))
		}
		return false, nil
	}
	req := schemas.Request{
		RequestID: schemas.NewRequestID(), Conversation: c.id, Trigger: kind, Reason: reason,
		RequestedAt: now.UTC(), UpToSeq: c.watermark,
	}
	if w, ok := c.seen.Witness(c.watermark); ok {
		req.Witness = &w
	}
	sctx, span, header := t.startRequest(ctx, req, c.tokens)
	seq, err := t.store.Queue().EnqueueWithHeader(sctx, req, header)
	result := RequestError
	switch {
	case err == nil:
		result = RequestQueued
	case errors.Is(err, jetstream.ErrRequestPending):
		result = RequestPending
	}
	endRequest(span, result, err)
	t.requested(kind, result)
	switch {
	case err == nil:
		var w jetstream.Writes
		w.Request(seq)
		ev := schemas.Event{Type: schemas.EventRequested, Conversation: c.id, RequestID: req.RequestID,
			Trigger: req.Trigger, Reason: req.Reason, TokensBefore: c.tokens, At: now.UTC()}
		if err := t.store.Events().PublishRecorded(ctx, ev, &w); err != nil {
			log.Warn().Err(err).Msg("publish requested event")
		}
		// A state built before a forget would otherwise ask again and again for what is
		// gone (its retries, its wake-ups): checked after writing, so no forget slips
		// in between.
		if t.forgottenMeanwhile(ctx, c.id, min(c.base, c.watermark), &w, log) {
			c.forgotten = true
			return false, nil
		}
		c.inFlightUntil, c.inFlightCheckAt = stampOf(now.Add(t.cfg.InFlightTimeout)), stampOf(now.Add(t.cfg.RetryDelay))
		c.structural = ""
		log.Info().Int("tokens", c.tokens).Str("trigger", kind).Str("reason", reason).Str("request_id", req.RequestID).Msg("compaction requested")
		return true, nil
	case errors.Is(err, jetstream.ErrRequestPending):
		t.scheduleRetry(ctx, c.id, c, t.cfg.RetryDelay)
		return true, nil
	}
	return false, err
}

// scheduleRetry evaluates the conversation again after d (a pending request may have
// freed its slot, or a backoff ended). A retry already pending for later stays; one
// pending for sooner is moved to the new deadline. A re-evaluation that cannot rebuild
// the state is tried again (retryRebuild). Callers hold the conversation's lock.
func (t *Trigger) scheduleRetry(ctx context.Context, id string, c *convState, d time.Duration) {
	at := t.now().Add(d)
	if c.retry != nil {
		if !at.After(c.retryAt.time()) {
			return
		}
		c.retry.Stop()
	}
	c.retryGen++
	gen := c.retryGen
	c.retryAt, c.retryInFlight = stampOf(at), false
	c.retry = time.AfterFunc(d, func() {
		if ctx.Err() != nil {
			return
		}
		tr := t.lookup(id)
		if tr == nil {
			return
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if tr.st == nil || tr.st.retryGen != gen {
			return // replaced by a later deadline, or the state is gone
		}
		tr.st.retry, tr.st.retryInFlight = nil, false
		log := t.log.With().Str("conversation", id).Logger()
		c, err := t.ready(ctx, tr, id, tr.st.watermark)
		if err != nil {
			t.retryRebuild(ctx, id, tr.st, err, log)
			return
		}
		c.retryErrors = 0
		if err := t.evaluate(ctx, c, log); err != nil {
			log.Warn().Err(err).Msg("queue compaction; will retry")
			t.scheduleRetry(ctx, id, c, t.cfg.RetryDelay)
		}
	})
}

// retryRebuild schedules another re-evaluation of a conversation whose state could not
// be rebuilt for one (a stream electing its leader, a policy that cannot be read): after
// RetryDelay, doubled per failure in a row up to BrokenRetry. It never gives up: a
// conversation over its budget that waits for its next message may wait for good.
// After RebuildAttempts failures in a row it logs an error. Callers hold the
// conversation's lock.
func (t *Trigger) retryRebuild(ctx context.Context, id string, st *convState, err error, log zerolog.Logger) {
	if st.retryErrors < math.MaxInt32 {
		st.retryErrors++
	}
	d := t.cfg.RetryDelay
	for i := int32(1); i < st.retryErrors && d < t.cfg.BrokenRetry; i++ {
		d *= 2
	}
	d = min(d, max(t.cfg.BrokenRetry, t.cfg.RetryDelay))
	if int(st.retryErrors) == t.cfg.RebuildAttempts {
		log.Error().Err(err).Int32("attempts", st.retryErrors).Dur("retry_in", d).Msg("rebuild conversation state; still retrying")
	} else {
		log.Warn().Err(err).Dur("retry_in", d).Msg("rebuild conversation state; will retry")
	}
	t.scheduleRetry(ctx, id, st, d)
}

// onPolicy makes a conversation's state stale when its policy changes, so it is
// counted against the new settings.
func (t *Trigger) onPolicy(id string) {
	if tr := t.lookup(id); tr != nil {
		tr.signal(func(s *signals) { s.stale = true })
	}
}

// onEvent follows the outcome of requests: a new value makes the state stale (it is
// rebuilt from KV), a failure spaces the next request out. The event's conversation is
// the one its subject names (the store checks the payload against it). A decline or a
// failure also wakes the conversation, so one that went quiet is not left over its
// budget: after a decline, messages that arrived while the worker summarized may be
// growth enough to ask again; after a failure, it is asked again when the backoff ends.
// A completion wakes it too (see wake): the worker queues the follow-up a conversation
// still over its threshold needs, but a worker that dies between its completed event
// and that follow-up takes it along, and the trigger asks in its place.
func (t *Trigger) onEvent(ctx context.Context, ev schemas.Event) {
	tr := t.lookup(ev.Conversation)
	if tr == nil {
		return
	}
	switch ev.Type {
	case schemas.EventCompleted, schemas.EventDeclined:
		tr.signal(func(s *signals) {
			s.stale, s.outcome = true, true
			if ev.Type == schemas.EventCompleted {
				s.completed, s.failures = true, 0
			}
		})
		go t.wake(ctx, ev.Conversation, ev.Type == schemas.EventCompleted)
	case schemas.EventFailed:
		tr.signal(func(s *signals) { s.outcome, s.failures = true, s.failures+1 })
		go t.wake(ctx, ev.Conversation, false)
	case schemas.EventForgotten:
		// What the trigger holds of the conversation is dropped at once, timers included.
		// (A trigger that misses this event finds the tombstone when it next asks.)
		tr.signal(func(s *signals) { s.forgotten = true })
		go t.wake(ctx, ev.Conversation, false)
	}
}

// followUpGrace is the least time a completion leaves the worker to queue its
// follow-up before the trigger looks in the queue for it (see wake).
const followUpGrace = time.Second

// wake applies what an outcome event signalled and evaluates the conversation: a
// request goes now if the rules allow it, or when a failure's backoff ends (request
// schedules that). A state that cannot be rebuilt now is tried again (see
// scheduleRetry), not left to a next message that may never come.
//
// After a completion (completed) a conversation still over its budget is the worker's
// to follow up: it is held as in flight, and the queue is looked at after
// followUpGrace (or RetryDelay, if longer). The worker's follow-up found there is
// watched like a request of the trigger's, with its escalation; none found (the worker
// died after its event) is asked for by the trigger.
func (t *Trigger) wake(ctx context.Context, id string, completed bool) {
	tr := t.lookup(id)
	if tr == nil || ctx.Err() != nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.st == nil {
		return
	}
	log := t.log.With().Str("conversation", id).Logger()
	c, err := t.ready(ctx, tr, id, tr.st.watermark)
	if err != nil {
		t.retryRebuild(ctx, id, tr.st, err, log)
		return
	}
	c.retryErrors = 0
	if kind, _ := c.decide(); completed && kind != "" && c.inFlightUntil == 0 {
		now := t.now()
		c.inFlightUntil = stampOf(now.Add(t.cfg.InFlightTimeout))
		c.inFlightCheckAt = stampOf(now.Add(max(t.cfg.RetryDelay, followUpGrace)))
	}
	if err := t.evaluate(ctx, c, log); err != nil {
		log.Warn().Err(err).Msg("queue compaction; will retry")
		t.scheduleRetry(ctx, id, c, t.cfg.RetryDelay)
	}
}

// armEvery is how often a busy conversation's idle timer is re-armed: every few
// seconds at most, never more often than a quarter of the idle time.
func armEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, time.Second), 5*time.Second)
}

// arm re-arms the conversation's idle timer (see jetstream.Activity.ArmIdle). Callers
// hold the conversation's lock.
func (t *Trigger) arm(c *convState) {
	idle := c.settings.IdleAfter
	if idle <= 0 || t.now().Sub(c.lastArm.time()) < armEvery(idle) {
		return
	}
	t.armFor(c, idle)
}

func (t *Trigger) armFor(c *convState, ttl time.Duration) {
	if err := t.store.Activity().ArmIdle(c.id, ttl, c.watermark); err != nil {
		t.log.Warn().Err(err).Str("conversation", c.id).Msg("re-arm idle timer")
		return
	}
	c.lastArm = stampOf(t.now())
}

// onIdle handles ACTIVITY: the delete marker an expired idle timer leaves is the idle
// signal, handed to the conversation's handler; the timer messages themselves are only
// acknowledged. A signal whose request could not be queued is delivered again.
func (t *Trigger) onIdle(ctx context.Context, d *jetstream.Delivery) {
	if !t.idleSeen.Swap(true) {
		t.becameActive(ctx)
	}
	if !d.IsIdleSignal() || d.Conversation == "" {
		_ = d.Ack()
		return
	}
	t.dispatch(ctx, t.get(d.Conversation), job{d: d, idle: true})
}

// handleIdle handles an idle signal of the conversation tr.
func (t *Trigger) handleIdle(ctx context.Context, tr *tracked, d *jetstream.Delivery) {
	id := d.Conversation
	log := t.log.With().Str("conversation", id).Logger()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	batched := t.batched.Load()
	if batched {
		// The signal may be a recount (see acks.go), armed by another process whose
		// deliveries this one did not see: the state is read again from the leaders.
		tr.signal(func(s *signals) { s.stale = true })
	}
	c, err := t.ready(ctx, tr, id, throughNewest)
	if err != nil && batched {
		t.recountCannotRebuild(ctx, tr, id, d, err, log)
		return
	}
	if err == nil {
		// A recount's (a message parked, or one a previous owner may not have
		// handled) request is asked for here.
		if err = t.evaluate(ctx, c, log); err != nil && batched {
			// The queue did not take it: asked again until it does, as a nak of the chat
			// message would have been.
			delay := min(t.cfg.RetryDelay*time.Duration(d.Attempt), t.cfg.FailureBackoffMax)
			log.Warn().Err(err).Dur("retry_in", delay).Msg("queue compaction for an idle signal; retrying")
			if nerr := d.NakAfter(ctx, delay); nerr != nil {
				log.Warn().Err(nerr).Msg("nak idle signal")
			}
			return
		}
	}
	if err == nil {
		err = t.idle(ctx, c)
	}
	if err == nil {
		t.ack(ctx, d)
		return
	}
	if d.Attempt >= uint64(t.cfg.RebuildAttempts) {
		log.Error().Err(err).Uint64("attempts", d.Attempt).Msg("idle signal dropped")
		t.ack(ctx, d)
		return
	}
	log.Warn().Err(err).Msg("idle signal; retrying")
	if nerr := d.NakAfter(ctx, t.cfg.RetryDelay*time.Duration(d.Attempt)); nerr != nil {
		log.Warn().Err(nerr).Msg("nak idle signal")
	}
}

// recountCannotRebuild settles an idle signal, on a consumer that acknowledges in
// batches, whose conversation's state could not be rebuilt: retried (the conversation
// counts its failed rebuilds, see cannotRebuild) until the last attempt reports it and
// sets it aside. Callers hold tr.mu.
func (t *Trigger) recountCannotRebuild(ctx context.Context, tr *tracked, id string, d *jetstream.Delivery, err error, log zerolog.Logger) {
	if tr.broken != nil && t.now().Before(tr.brokenUntil.time()) {
		t.ack(ctx, d) // set aside: the next rebuild reads the conversation from the stream
		return
	}
	delay, aside := t.rebuildFailed(ctx, tr, id, err, 0, "rebuild conversation state for its recount; retrying", log)
	if aside {
		t.ack(ctx, d)
		return
	}
	if nerr := d.NakAfter(ctx, delay); nerr != nil {
		log.Warn().Err(nerr).Msg("nak idle signal")
	}
}

// idle compacts a conversation that has been quiet for idle_after when it is over
// idle_threshold, once per quiet period. A conversation that was active more recently
// than the timer knew (re-arming is rate-limited) gets the rest of its time. Callers
// hold the conversation's lock.
func (t *Trigger) idle(ctx context.Context, c *convState) error {
	idle := c.settings.IdleAfter
	if idle <= 0 || c.lastMsgAt == 0 || c.idleFiredFor >= c.lastMsgAt {
		return nil
	}
	quiet := t.now().Sub(c.lastMsgAt.time())
	if quiet < idle-time.Second {
		t.armFor(c, idle-quiet)
		return nil
	}
	limit := int(c.settings.IdleThreshold * float64(c.budget.ContextWindow))
	if c.tokens < limit {
		c.idleFiredFor = c.lastMsgAt
		return nil
	}
	log := t.log.With().Str("conversation", c.id).Logger()
	asked, err := t.request(ctx, c, schemas.TriggerTemporal,
		fmt.Sprintf("idle for %s with %d tokens ≥ idle_threshold %d (%g × %d)", quiet.Round(time.Second), c.tokens, limit,
			c.settings.IdleThreshold, c.budget.ContextWindow), log)
	if asked {
		// Once per quiet period; one held back (in flight, backing off) is looked at
		// again by the sweep.
		c.idleFiredFor = c.lastMsgAt
	}
	return err
}

// sweep looks for idle conversations among those tracked, in case a marker was missed.
func (t *Trigger) sweep(ctx context.Context) {
	for _, tr := range t.snapshot() {
		if ctx.Err() != nil {
			return
		}
		tr.mu.Lock()
		if c := tr.st; c != nil && !tr.stale && c.settings.IdleAfter > 0 && t.now().Sub(c.lastMsgAt.time()) >= c.settings.IdleAfter {
			if err := t.idle(ctx, c); err != nil {
				t.log.Warn().Err(err).Str("conversation", c.id).Msg("idle conversation; the next sweep retries")
			}
		}
		tr.mu.Unlock()
	}
}
