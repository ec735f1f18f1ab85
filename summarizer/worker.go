package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// Config sets up a worker pool. Everything about how a conversation is compacted
// (budget, strategy, knobs, summarizer) comes from its policy.Settings.
type Config struct {
	// Workers is how many requests this process works on at once.
	Workers int
	// MaxAttempts bounds the deliveries of one request.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the delay between attempts (exponential, jittered).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// InProgressEvery is how often a working job tells JetStream it is still alive; keep
	// it well under the consumer's AckWait. Run shortens it to a third of the ack wait
	// of the consumer it binds, when that is shorter (another process provisioned it).
	InProgressEvery time.Duration
	// FetchWait is how long one fetch waits for a request.
	FetchWait time.Duration
	// DrainTimeout is how long Run waits, once stopped, for the jobs in flight; the
	// requests of those still unfinished then are handed back (nak without delay), so
	// another worker takes them at once instead of after the ack wait. 0 waits forever.
	DrainTimeout time.Duration
	// HandBackTimeout bounds what follows a drain that timed out: the hand-back naks and
	// the tombstone checks of the jobs that stop then, so Run returns within
	// DrainTimeout + HandBackTimeout whatever the cluster does (a stream electing its
	// leader answers nothing for seconds). 0 means the default, 10 s.
	HandBackTimeout time.Duration
	// Counters returns the token counter of a tokenizer name (policy key tokenizer);
	// nil knows chars4 only.
	Counters func(name string) (tokens.Counter, error)
}

// DefaultConfig returns the defaults of the README.
func DefaultConfig() Config {
	return Config{
		Workers:         4,
		MaxAttempts:     5,
		BackoffBase:     2 * time.Second,
		BackoffMax:      2 * time.Minute,
		InProgressEvery: MaxInProgressEvery,
		FetchWait:       5 * time.Second,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Workers < 1:
		return bad("workers must be at least 1, got %d", c.Workers)
	case c.MaxAttempts < 1:
		return bad("max attempts must be at least 1, got %d", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return bad("backoff must be positive with max ≥ base")
	case c.InProgressEvery <= 0:
		return bad("in-progress interval must be positive")
	case c.FetchWait < 100*time.Millisecond:
		return bad("fetch wait must be at least 100ms")
	case c.DrainTimeout < 0:
		return bad("drain timeout must not be negative")
	case c.HandBackTimeout < 0:
		return bad("hand-back timeout must not be negative")
	}
	return nil
}

// MaxInProgressEvery is the default heartbeat of a working job, and the longest a
// node gives it (a third of jetstream.DefaultWorkerAckWait): frequent enough that the
// consumer's ack wait can be a few seconds, whatever the version of the process that
// provisioned it.
const MaxInProgressEvery = 2 * time.Second

// defaultHandBackTimeout is Config.HandBackTimeout's default.
const defaultHandBackTimeout = 10 * time.Second

// counter returns the counter of a tokenizer name.
func (c Config) counter(name string) (tokens.Counter, error) {
	return tokens.Lookup(name, c.Counters)
}

// PolicySource resolves a conversation's settings (defaults, environment, profile and
// the conversation's own policy).
type PolicySource interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// Pool is a pool of summarizer workers sharing the work queue with every other process.
type Pool struct {
	cfg         Config
	store       *jetstream.Store
	policies    PolicySource
	summarizers func(policy.Settings) (Summarizer, error)
	fallback    Summarizer
	// retryable classifies a summarizer error; nil treats every error as retryable.
	retryable func(error) bool
	observer  Observer
	tracer    trace.Tracer
	log       zerolog.Logger
	now       func() time.Time

	quota    Quota // nil: no bound
	mu       sync.Mutex
	inFlight map[*job]bool // the jobs being worked on, for a drain that times out
	// quiet is when each endpoint that answered with a Retry-After may be called again
	// by a repair (see holdOff).
	quiet map[endpoint]time.Time
	// repairCosts are the last costs of repairs asked of the quota (see repairCost).
	repairCosts map[repairCostKey]int
}

// Options are a pool's collaborators.
type Options struct {
	// Policies resolves each conversation's settings. Required.
	Policies PolicySource
	// Summarizers returns the summarizer of a conversation's settings (its profile's LLM,
	// or the extractive one when no LLM is set). Required.
	Summarizers func(policy.Settings) (Summarizer, error)
	// Fallback writes the deterministic summary that keeps the hard limit when the
	// summarizer keeps failing. Required.
	Fallback Summarizer
	// Retryable tells a passing failure from a permanent one (nil: all are passing).
	Retryable func(error) bool
	// Observer hears the outcome of every delivery (nil: nobody).
	Observer Observer
	// Tracer makes a span of every delivery, continuing the trace its request carries
	// (nil: none).
	Tracer trace.TracerProvider
	// Quota, when set, bounds what the pool's compactions may spend (a tenant's quotas):
	// a compaction it does not allow is declined with its reason, and nothing else is
	// touched (nil: no bound).
	Quota  Quota
	Logger zerolog.Logger
}

// Quota bounds what compactions may spend (docs/tenants.md, "Quotas"). What a
// compaction spends is counted as its LLM calls report it (the llm summarizer's usage
// hook), not here.
type Quota interface {
	// Allow decides whether compacting conv may start now: estimate is the tokens its
	// summary's input takes, compacted whether conv has a value. When it may, what it
	// reserved for the compaction is given back by the decision's Release once the
	// compaction is done.
	Allow(ctx context.Context, conv string, compacted bool, estimate int) (QuotaDecision, error)
}

// QuotaDecision is what a Quota decided of one compaction.
type QuotaDecision struct {
	// Reason says why the compaction must not run now ("": it may).
	Reason string
	// RetryIn is how long until the quota allows it again (0: unknown).
	RetryIn time.Duration
	// Release gives back what was reserved for an allowed compaction (nil: nothing).
	// It may be called more than once.
	Release func()
	// Tag names the reservation the compaction's LLM calls are charged to: their
	// context carries it (summary.ChargeTo) to the summarizer's usage hook.
	Tag string
}

// quotaError is a compaction over its quota: the reason, and when to ask again.
type quotaError struct {
	reason  string
	retryIn time.Duration
}

func (e *quotaError) Error() string { return e.reason }

// RetryAfter is when the quota allows the compaction again (the pool's retry hint).
func (e *quotaError) RetryAfter() time.Duration { return e.retryIn }

// NewPool returns a pool; Run starts it.
func NewPool(cfg Config, store *jetstream.Store, opts Options) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Policies == nil || opts.Summarizers == nil || opts.Fallback == nil {
		return nil, fmt.Errorf("%w: policies, summarizers and a fallback summarizer are required", ErrConfig)
	}
	return &Pool{
		cfg: cfg, store: store, policies: opts.Policies, summarizers: opts.Summarizers,
		fallback: opts.Fallback, retryable: opts.Retryable, observer: opts.Observer, tracer: newTracer(opts.Tracer), quota: opts.Quota,
		log: opts.Logger.With().Str("component", "summarizer").Logger(), now: time.Now,
		inFlight: map[*job]bool{},
	}, nil
}

// Run works on requests until ctx is done, then waits for the jobs in flight to finish
// (they are not cancelled: a drained job acks or naks its request). After DrainTimeout
// the unfinished ones are handed back to the queue and aborted, and Run returns once
// they have stopped.
func (p *Pool) Run(ctx context.Context) error {
	// The consumer may not answer yet (a cluster electing its leader, a server
	// restarting): that is waited for, not a reason to stop the process.
	q, err := jetstream.Retry(ctx, jetstream.DefaultBackoff(), p.log, "bind the workers' consumer", func() (*jetstream.Requests, error) {
		return p.store.Queue().Requests(ctx)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	if aw := q.AckWait(); aw > 0 && 3*p.cfg.InProgressEvery > aw {
		// The consumer was provisioned with a shorter ack wait than this process's:
		// three heartbeats per ack wait, so one lost heartbeat costs no redelivery.
		p.cfg.InProgressEvery = max(aw/3, 100*time.Millisecond)
		p.log.Info().Dur("ack_wait", aw).Dur("heartbeat", p.cfg.InProgressEvery).Msg("heartbeat follows the consumer's ack wait")
	}
	p.log.Info().Int("workers", p.cfg.Workers).Msg("summarizer pool started")
	// Jobs outlive ctx: shutdown drains them instead of abandoning them, until the drain
	// times out and they are aborted.
	jobs, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	// settle is what the jobs' clean-up (tombstone checks, take-backs) runs under: no
	// limit of its own until a drain times out, then the hand-back's.
	settle, stopSettling := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSettling()
	var wg sync.WaitGroup
	for i := 0; i < p.cfg.Workers; i++ {
		wg.Go(func() { p.slot(ctx, jobs, settle, q) })
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	<-ctx.Done()
	var timeout <-chan time.Time
	if p.cfg.DrainTimeout > 0 {
		t := time.NewTimer(p.cfg.DrainTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-done:
		p.log.Info().Msg("summarizer pool drained")
	case <-timeout:
		hb := p.cfg.HandBackTimeout
		if hb == 0 {
			hb = defaultHandBackTimeout
		}
		stop := time.AfterFunc(hb, stopSettling)
		defer stop.Stop()
		p.handBack(settle)
		abort() // the jobs stop at their next network call; none is left running
		<-done
	}
	return nil
}

// handBack naks the requests of the jobs still in flight, all at once, so the queue
// delivers them again at once; it gives up when ctx is done. The jobs are then
// aborted; one that wrote its result just before was right to (compare-and-set), and
// its redelivery finds the value holding the request and only acks.
func (p *Pool) handBack(ctx context.Context) {
	p.mu.Lock()
	jobs := make([]*job, 0, len(p.inFlight))
	for j := range p.inFlight {
		jobs = append(jobs, j)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			if err := j.d.NakAfter(ctx, 0); err != nil {
				p.log.Warn().Err(err).Uint64("seq", j.seq).Msg("hand back unfinished request; it is redelivered after the ack wait")
			}
		})
	}
	wg.Wait()
	p.log.Warn().Int("unfinished", len(jobs)).Dur("drain_timeout", p.cfg.DrainTimeout).Msg("drain timed out; unfinished requests handed back to the queue")
}

// slot is one worker: it fetches a request only when it is free, so a process never
// holds more requests than it has workers.
func (p *Pool) slot(ctx, jobs, settle context.Context, q *jetstream.Requests) {
	for ctx.Err() == nil {
		d, err := q.Next(ctx, p.cfg.FetchWait)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn().Err(err).Msg("fetch compaction request")
				sleep(ctx, time.Second)
			}
			continue
		}
		if d != nil {
			p.handle(jobs, settle, d)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// job is one delivery of one request.
type job struct {
	d       *jetstream.Delivery
	req     schemas.Request
	seq     uint64 // work-queue sequence: stable across redeliveries
	attempt uint64
	start   time.Time
	retryIn time.Duration // after a failed attempt: how long the request is handed back for
	// fallbackFor is the summarizer error a fallback summary stands in for.
	fallbackFor error
	log         zerolog.Logger
	// firstSeq is the lowest CHAT sequence the job depends on: its request's up_to_seq,
	// the value it builds on, the messages it read (schemas.Result.FirstSeq). A
	// tombstone through it means the job worked on a forgotten conversation.
	firstSeq uint64
	// tomb is the conversation's tombstone when it was forgotten before the job
	// started: the job reads CHAT only above it.
	tomb *schemas.Tombstone
	// writes is what the job stored, taken back if the conversation was forgotten
	// meanwhile.
	writes jetstream.Writes
	// outcome is how the delivery ended, with the context's size of a completed one
	// (for the Observer).
	outcome                   Outcome
	tokensBefore, tokensAfter int
	// repair is what became of the repair the job tried ("" when it tried none).
	repair RepairOutcome
	// repairOfOwn says the request was done with a fallback summary and stayed queued
	// to repair it: this delivery is the repair.
	repairOfOwn bool
	// holes are the holes in the raw history the job declines for (holes.go).
	holes []schemas.Hole
	// maskShort says the first rung's value was written over the target (rungs mask):
	// the completed event's error.
	maskShort string
}

// repairing reports whether the delivery is a repair: its request was done with a
// fallback summary, which holds it, and stayed queued to repair it (see Pool.finish).
func (j *job) repairing() bool { return j.repairOfOwn }

// decodeRequest reads and validates a request before anything acts on it: it must
// decode, pass schemas.Request.Validate, and name the conversation of its subject.
func decodeRequest(d *jetstream.Delivery) (schemas.Request, error) {
	var req schemas.Request
	if d.Conversation == "" {
		return req, fmt.Errorf("subject %q does not name a valid conversation", d.Subject)
	}
	if err := json.Unmarshal(d.Data(), &req); err != nil {
		return req, fmt.Errorf("undecodable request: %w", err)
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	if req.Conversation != d.Conversation {
		return req, fmt.Errorf("the request names conversation %q but was queued for %q", req.Conversation, d.Conversation)
	}
	return req, nil
}

// handle maps the outcome of one delivery to JetStream: done → the job acked itself;
// retryable → NakWithDelay; last attempt or permanent → Term, dead letter, failed event.
// An invalid request is terminated with a dead letter saying why, and nothing of any
// conversation is read. A request of a conversation forgotten before or while the job
// ran is acked, whatever the outcome, and what the job wrote is taken back.
func (p *Pool) handle(ctx, settle context.Context, d *jetstream.Delivery) {
	j := &job{d: d, seq: d.Seq, attempt: d.Attempt, start: p.now()}
	ctx, span := p.startJob(ctx, d)
	defer func() {
		p.report(j)
		endJob(span, j)
	}()
	if !p.accept(ctx, j) {
		return
	}
	p.mu.Lock()
	p.inFlight[j] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.inFlight, j)
		p.mu.Unlock()
	}()
	j.log = p.log.With().Str("conversation", j.req.Conversation).Str("request_id", j.req.RequestID).
		Uint64("attempt", j.attempt).Logger()
	p.settleJob(ctx, settle, j, p.process(ctx, j))
}

// accept decides whether the delivery is a request to work on: one without metadata
// is terminated, an invalid one terminated with a dead letter saying why.
func (p *Pool) accept(ctx context.Context, j *job) bool {
	d := j.d
	if d.MetadataErr != nil {
		j.outcome = OutcomeInvalid
		p.log.Error().Err(d.MetadataErr).Str("subject", d.Subject).Msg("request without metadata")
		_ = d.Term(ctx, "no metadata")
		return false
	}
	req, err := decodeRequest(d)
	if err != nil {
		j.outcome = OutcomeInvalid
		reason := "invalid request: " + err.Error()
		p.log.Error().Err(err).Str("subject", d.Subject).Uint64("seq", d.Seq).Msg("invalid compaction request dropped")
		p.deadLetter(ctx, d, d.Conversation, schemas.DeadLetter{Request: req, Error: reason, Attempts: d.Attempt, At: p.now()}, nil, p.log)
		return false
	}
	j.req = req
	j.firstSeq = req.UpToSeq
	return true
}

// errStale is the outcome of a delivery that is no longer its job's: its request was
// done by another worker (it was delivered again while this one was frozen past the
// ack wait), and maybe a later one after it. Nothing is written, nothing settled.
var errStale = errors.New("the request was done elsewhere or replaced while this delivery was held past its ack wait")

// outdatedBy reports whether cur, the conversation's value as the job read it, was
// written by a request queued after the job's own: the work queue holds one request per
// conversation, so a later one was queued only once the job's had left the queue (done
// by another worker, while this one was frozen past its ack wait: a SIGSTOP, a paused
// VM). Without this the woken job would compact again, or write a decline marker, on a
// value no request asked it for. The value must also be younger than the job's request:
// a work queue provisioned again counts its sequences from 1, under values written
// before. Writes that race with the job after it read are the compare-and-set's (see
// commit).
func (j *job) outdatedBy(cur *schemas.Result) bool {
	return cur != nil && cur.RequestSeq > j.seq && cur.CreatedAt.After(j.d.Time)
}

// settleJob settles the request after process returned err: a request of a forgotten
// conversation is acked (what the job wrote taken back), a job aborted at the drain
// timeout left it handed back, and a failure is retried or dead-lettered (fail).
func (p *Pool) settleJob(ctx, settle context.Context, j *job, err error) {
	switch {
	case errors.Is(err, errStale):
		// Its request is acked (by the worker that completed it) or gone: settling this
		// delivery would act on nothing, and nothing was written.
		j.outcome = OutcomeStale
		j.log.Warn().Uint64("attempt", j.attempt).Msg("stale delivery: its request was done by another worker or replaced while this one was held past the ack wait; dropped, nothing written")
		return
	case errors.Is(err, errForgotten):
		j.outcome = OutcomeForgotten
		j.log.Info().Uint64("up_to_seq", j.req.UpToSeq).Uint64("through_seq", j.tomb.ThroughSeq).
			Msg("request made before its conversation was forgotten; dropped")
		_ = j.d.Ack()
		return
	case err == nil:
		if p.forgottenMeanwhile(settle, j) { // after the job's last write
			j.outcome = OutcomeForgotten
		}
		return
	case ctx.Err() != nil:
		j.outcome = OutcomeAborted
		j.log.Warn().Err(err).Msg("job aborted at the drain timeout; its request was handed back to the queue")
		// Only what it wrote needs the tombstone check. A job aborted before its first
		// write (in its LLM call, typically) returns at once: the check asks the forget
		// bucket until it answers or the settle context ends (a stream electing its
		// leader answers nothing for seconds), past the process's drain timeout.
		if !j.writes.Empty() {
			p.forgottenMeanwhile(settle, j)
		}
		return
	}
	// A conversation forgotten while the job worked on it: the failure does not matter,
	// nothing is retried, dead-lettered or reported.
	if p.forgottenMeanwhile(settle, j) {
		j.outcome = OutcomeForgotten
		return
	}
	p.fail(ctx, settle, j, err)
}

// fail decides what a failed attempt leads to: another attempt after a backoff while
// attempts remain and the failure is passing; otherwise a dead letter and a failed
// event.
func (p *Pool) fail(ctx, settle context.Context, j *job, err error) {
	j.outcome = OutcomeRetried
	permanent := p.permanent(err)
	// A repair is tried again for as long as its value needs it (the LLM may be down
	// for hours), each time after a longer backoff; the value meanwhile keeps the bound.
	if !permanent && (j.attempt < uint64(p.cfg.MaxAttempts) || j.repairing()) {
		delay := p.backoff(j.attempt)
		if j.repairing() {
			delay = p.repairBackoff(j.attempt)
		}
		// An endpoint that said when to ask again (HTTP Retry-After, which the llm
		// summarizer's errors carry) is not asked sooner. A repair's request is handed
		// back for repairBackoff's cap at most, whatever the endpoint said: it holds its
		// conversation's place in the queue, and its next delivery keeps the hard limit
		// (without asking the endpoint before its time: heldOff).
		var hint interface{ RetryAfter() time.Duration }
		if errors.As(err, &hint) {
			delay = max(delay, hint.RetryAfter())
			if j.repairing() {
				delay = min(delay, p.maxRepairDelay())
			}
		}
		j.retryIn = delay
		j.log.Warn().Err(err).Dur("retry_in", delay).Msg("compaction attempt failed")
		if nerr := j.d.NakAfter(ctx, delay); nerr != nil {
			j.log.Error().Err(nerr).Msg("nak compaction request; it is redelivered after the ack wait")
		}
		return
	}
	j.log.Error().Err(err).Bool("permanent", permanent).Msg("compaction failed; request dead-lettered")
	defer func() { // after the dead letter and the event
		if p.forgottenMeanwhile(settle, j) {
			j.outcome = OutcomeForgotten
		}
	}()
	if !p.deadLetter(ctx, j.d, j.req.Conversation, schemas.DeadLetter{Request: j.req, Error: err.Error(), Attempts: j.attempt, At: p.now()}, &j.writes, j.log) {
		return // delivered again, to record the dead letter then
	}
	j.outcome = OutcomeFailed
	p.event(ctx, j, schemas.Event{Type: schemas.EventFailed, Error: err.Error()})
}

// report tells the observer how the job ended.
func (p *Pool) report(j *job) {
	if p.observer == nil || j.outcome == "" {
		return
	}
	r := JobReport{Trigger: knownTrigger(j.req.Trigger), Outcome: j.outcome, Attempt: j.attempt, Duration: p.now().Sub(j.start), Repair: j.repair, RetryIn: j.retryIn}
	if j.outcome == OutcomeCompleted {
		r.TokensBefore, r.TokensAfter, r.Fallback = j.tokensBefore, j.tokensAfter, j.fallbackFor != nil
	}
	p.observer.JobDone(r)
}

// errForgotten is the outcome of a job whose request was made before its conversation
// was forgotten: it is dropped, with nothing written.
var errForgotten = errors.New("the conversation was forgotten after this request was made")

// forgetCheckWait is how long a tombstone check asks the forget bucket before it says
// in the log that it cannot tell yet. It never gives up while the process runs: a write
// whose check gave up would outlive the forget (during an election of the bucket's
// stream, say). A process that stops first leaves the write to the backstops: readers
// do not serve a value a tombstone covers, and the trigger and the next job remove it.
var forgetCheckWait = 30 * time.Second

// readTombstone reads the conversation's tombstone from the forget bucket's leader,
// asking again until it answers or ctx ends.
func (p *Pool) readTombstone(ctx context.Context, j *job) (tomb *schemas.Tombstone, err error) {
	warnAt := time.Now().Add(forgetCheckWait)
	for attempt := 1; ; attempt++ {
		if tomb, err = p.store.Forgotten(ctx, j.req.Conversation); err == nil || ctx.Err() != nil {
			return tomb, err
		}
		if time.Now().After(warnAt) {
			j.log.Warn().Err(err).Int("attempts", attempt).Msg("cannot tell yet whether the conversation was forgotten meanwhile; asking again")
			warnAt = time.Now().Add(forgetCheckWait)
		}
		sleep(ctx, min(time.Duration(attempt)*250*time.Millisecond, 2*time.Second))
	}
}

// checkCommitted is the tombstone check of a job's value, after the write and before
// the request is acknowledged: a tombstone through the job's firstSeq takes the job's
// writes back (errForgotten: the request is then acknowledged). It asks until it knows.
// A take-back that fails returns an error and leaves the request unacknowledged: a
// next delivery (when the forget has not deleted the request) removes the value
// (checkForgotten, readCurrent); readers do not serve it meanwhile, and the trigger
// removes it.
func (p *Pool) checkCommitted(ctx context.Context, j *job) error {
	tomb, err := p.readTombstone(ctx, j)
	if err != nil {
		return fmt.Errorf("cannot tell whether the conversation was forgotten meanwhile: %w", err)
	}
	if !tomb.Covers(j.firstSeq) {
		return nil
	}
	if err := p.store.TakeBack(ctx, j.req.Conversation, &j.writes); err != nil {
		return fmt.Errorf("conversation forgotten while compacting; taking back what this job wrote failed (the request is delivered again to remove it): %w", err)
	}
	j.tomb = tomb
	j.log.Info().Uint64("through_seq", tomb.ThroughSeq).Msg("conversation forgotten while compacting; what this job wrote was taken back")
	return errForgotten
}

// forgottenMeanwhile checks, after the job's writes, whether its conversation was
// forgotten while it worked on it (a tombstone through the job's firstSeq, read from
// the bucket's leader), and if so takes back everything the job stored and acks its
// request; when the take-back fails the request is delivered again instead, and its
// next job removes what is left. It reports whether the conversation was forgotten.
// Checking after writing leaves no gap: a forget whose tombstone came later deletes the
// writes itself (see jetstream.Store.Forget).
func (p *Pool) forgottenMeanwhile(settle context.Context, j *job) bool {
	tomb, err := p.readTombstone(settle, j)
	if err != nil {
		j.log.Error().Err(err).Msg("cannot tell whether the conversation was forgotten meanwhile; readers do not serve a value a later forget covers, and the next job or the trigger removes it")
		return false
	}
	if !tomb.Covers(j.firstSeq) {
		return false
	}
	ctx, cancel := context.WithTimeout(settle, forgetCheckWait)
	defer cancel()
	if err := p.store.TakeBack(ctx, j.req.Conversation, &j.writes); err != nil {
		j.log.Error().Err(err).Msg("conversation forgotten while compacting; taking back what this job wrote failed: the request is delivered again to remove it")
		if nerr := j.d.NakAfter(ctx, p.cfg.BackoffBase); nerr != nil {
			j.log.Error().Err(nerr).Msg("nak request; it is redelivered after the ack wait")
		}
		return true
	}
	j.log.Info().Uint64("through_seq", tomb.ThroughSeq).Msg("conversation forgotten while compacting; what this job wrote was taken back")
	_ = j.d.Ack()
	return true
}

// deadLetter records d in COMPACT_DEAD, then terminates it: a request is never gone
// without its record. When the record cannot be written, the request is delivered again
// after a pause instead (and dead-lettered then); ok reports whether it was terminated.
func (p *Pool) deadLetter(ctx context.Context, d *jetstream.Delivery, conv string, dead schemas.DeadLetter, w *jetstream.Writes, log zerolog.Logger) (ok bool) {
	if err := p.store.Events().PublishDeadRecorded(ctx, conv, dead, w); err != nil {
		log.Error().Err(err).Msg("record dead letter; the request is delivered again to record it")
		if nerr := d.NakAfter(ctx, p.cfg.BackoffBase); nerr != nil {
			log.Error().Err(nerr).Msg("nak request; it is redelivered after the ack wait")
		}
		return false
	}
	if err := d.Term(ctx, dead.Error); err != nil {
		log.Error().Err(err).Msg("term request; it is redelivered after the ack wait")
	}
	return true
}

// backoff is exponential from BackoffBase, capped at BackoffMax, with ±25% jitter.
func (p *Pool) backoff(attempt uint64) time.Duration {
	d := p.cfg.BackoffBase
	for i := uint64(1); i < attempt && d < p.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, p.cfg.BackoffMax)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max(d+jitter, time.Millisecond)
}

// repairBackoff is the delay before the next try of a repair: backoff's, doubling at
// most three times (8 × BackoffBase, within BackoffMax). A repair is tried for as long
// as the LLM fails, and its request holds the conversation's place in the queue
// meanwhile: a conversation that crosses its hard limit waits for that request, which
// keeps the bound with another fallback when it comes.
func (p *Pool) repairBackoff(attempt uint64) time.Duration {
	return p.backoff(min(attempt, maxRepairDoublings+1))
}

// maxRepairDoublings bounds how often repairBackoff doubles.
const maxRepairDoublings = 3

var errPermanent = errors.New("permanent failure")

// event publishes an event for the job; an event that cannot be published is logged,
// never fatal: the KV value is the source of truth.
func (p *Pool) event(ctx context.Context, j *job, ev schemas.Event) {
	ev.Conversation = j.req.Conversation
	ev.RequestID = j.req.RequestID
	ev.Trigger = j.req.Trigger
	if ev.Reason == "" {
		ev.Reason = j.req.Reason
	}
	ev.DurationMS = p.now().Sub(j.start).Milliseconds()
	ev.At = p.now()
	if err := p.store.Events().PublishRecorded(ctx, ev, &j.writes); err != nil {
		j.log.Warn().Err(err).Str("event", ev.Type).Msg("publish event")
	}
}
