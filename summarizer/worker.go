package summarizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/split"
)

// Config sets up a worker pool.
type Config struct {
	// Workers is how many requests this process works on at once.
	Workers int
	Budget  budget.Budget
	// Strategy chooses the split; only keep-last-n for now.
	Strategy  string
	KeepLastN int
	// MinProgress is the fraction the context must shrink by, or the result is declined.
	MinProgress float64
	// ToolOutputCap cuts each tool output the summarizer sees to this many tokens.
	ToolOutputCap int
	// MaxAttempts bounds the deliveries of one request.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the delay between attempts (exponential, jittered).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// InProgressEvery is how often a working job tells JetStream it is still alive; keep
	// it well under the consumer's AckWait.
	InProgressEvery time.Duration
	// FetchWait is how long one fetch waits for a request.
	FetchWait time.Duration
	// SummaryRole is the role of the summary message readers build.
	SummaryRole schemas.Role
}

// DefaultConfig returns the defaults of the README.
func DefaultConfig() Config {
	return Config{
		Workers:         4,
		Budget:          budget.Default(),
		Strategy:        split.KeepLastN,
		KeepLastN:       20,
		MinProgress:     0.1,
		ToolOutputCap:   2000,
		MaxAttempts:     5,
		BackoffBase:     2 * time.Second,
		BackoffMax:      2 * time.Minute,
		InProgressEvery: 15 * time.Second,
		FetchWait:       5 * time.Second,
		SummaryRole:     schemas.RoleUser,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if err := c.Budget.Validate(); err != nil {
		return err
	}
	switch {
	case c.Workers < 1:
		return bad("workers must be at least 1, got %d", c.Workers)
	case c.Strategy != split.KeepLastN:
		return bad("unknown strategy %q (known: %s)", c.Strategy, split.KeepLastN)
	case c.KeepLastN < 1:
		return bad("keep-last-n must be at least 1, got %d", c.KeepLastN)
	case !(c.MinProgress >= 0 && c.MinProgress < 1):
		return bad("min progress must be in [0, 1), got %g", c.MinProgress)
	case c.ToolOutputCap < 0:
		return bad("tool output cap must not be negative")
	case c.MaxAttempts < 1:
		return bad("max attempts must be at least 1, got %d", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return bad("backoff must be positive with max ≥ base")
	case c.InProgressEvery <= 0:
		return bad("in-progress interval must be positive")
	case c.FetchWait < 100*time.Millisecond:
		return bad("fetch wait must be at least 100ms")
	case c.SummaryRole != schemas.RoleUser && c.SummaryRole != schemas.RoleSystem && c.SummaryRole != schemas.RoleAssistant:
		return bad("summary role must be user, system or assistant, got %q", c.SummaryRole)
	}
	return nil
}

// Pool is a pool of summarizer workers sharing the work queue with every other process.
type Pool struct {
	cfg      Config
	store    *jetstream.Store
	llm      Summarizer
	fallback Summarizer
	// retryable classifies a summarizer error; nil treats every error as retryable.
	retryable func(error) bool
	pretrim   func([]schemas.Message, int) []schemas.Message
	log       zerolog.Logger
	now       func() time.Time
}

// Options are a pool's collaborators.
type Options struct {
	// Summarizer writes summaries (the LLM, or the extractive one when no LLM is set).
	Summarizer Summarizer
	// Fallback writes the deterministic summary that keeps the hard limit when the
	// summarizer keeps failing. Required.
	Fallback Summarizer
	// Retryable tells a passing failure from a permanent one (nil: all are passing).
	Retryable func(error) bool
	// PreTrim cuts tool outputs the summarizer sees to a cap in tokens (nil: no cut).
	PreTrim func(msgs []schemas.Message, capTokens int) []schemas.Message
	Logger  zerolog.Logger
}

// NewPool returns a pool; Run starts it.
func NewPool(cfg Config, store *jetstream.Store, opts Options) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Summarizer == nil || opts.Fallback == nil {
		return nil, fmt.Errorf("%w: a summarizer and a fallback summarizer are required", ErrConfig)
	}
	return &Pool{
		cfg: cfg, store: store, llm: opts.Summarizer, fallback: opts.Fallback,
		retryable: opts.Retryable, pretrim: opts.PreTrim,
		log: opts.Logger.With().Str("component", "summarizer").Logger(), now: time.Now,
	}, nil
}

// Run works on requests until ctx is done, then waits for the jobs in flight to finish
// (they are not cancelled: a drained job acks or naks its request).
func (p *Pool) Run(ctx context.Context) error {
	cons, err := p.store.WorkerConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	p.log.Info().Int("workers", p.cfg.Workers).Msg("summarizer pool started")
	var wg sync.WaitGroup
	for i := 0; i < p.cfg.Workers; i++ {
		wg.Go(func() { p.slot(ctx, cons) })
	}
	wg.Wait()
	p.log.Info().Msg("summarizer pool drained")
	return nil
}

// slot is one worker: it fetches a request only when it is free, so a process never
// holds more requests than it has workers.
func (p *Pool) slot(ctx context.Context, cons natsjs.Consumer) {
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, p.cfg.FetchWait)
		batch, err := cons.Fetch(1, natsjs.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				p.log.Warn().Err(err).Msg("fetch compaction request")
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			// The job outlives ctx: shutdown drains it instead of abandoning it.
			p.handle(context.WithoutCancel(ctx), msg)
		}
		cancel()
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
	msg     natsjs.Msg
	req     schemas.Request
	seq     uint64 // work-queue sequence: stable across redeliveries
	attempt uint64
	start   time.Time
	// fallbackFor is the summarizer error a fallback summary stands in for.
	fallbackFor error
	log         zerolog.Logger
}

// handle maps the outcome of one delivery to JetStream: done → the job acked itself;
// retryable → NakWithDelay; last attempt or permanent → Term, dead letter, failed event.
func (p *Pool) handle(ctx context.Context, msg natsjs.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		p.log.Error().Err(err).Msg("request without metadata")
		_ = msg.Term()
		return
	}
	j := &job{msg: msg, seq: md.Sequence.Stream, attempt: md.NumDelivered, start: p.now()}
	if err := json.Unmarshal(msg.Data(), &j.req); err == nil {
		err = j.req.Validate()
	}
	if err != nil {
		p.log.Error().Err(err).Str("subject", msg.Subject()).Msg("invalid compaction request dropped")
		_ = msg.TermWithReason("invalid request: " + err.Error())
		_ = p.store.PublishDead(ctx, schemas.DeadLetter{Request: j.req, Error: "invalid request: " + err.Error(), Attempts: j.attempt, At: p.now()})
		return
	}
	j.log = p.log.With().Str("conversation", j.req.Conversation).Str("request_id", j.req.RequestID).
		Uint64("attempt", j.attempt).Logger()
	err = p.process(ctx, j)
	if err == nil {
		return
	}
	permanent := errors.Is(err, errPermanent) || (p.retryable != nil && !p.retryable(err))
	if !permanent && j.attempt < uint64(p.cfg.MaxAttempts) {
		delay := p.backoff(j.attempt)
		j.log.Warn().Err(err).Dur("retry_in", delay).Msg("compaction attempt failed")
		if nerr := msg.NakWithDelay(delay); nerr != nil {
			j.log.Error().Err(nerr).Msg("nak compaction request")
		}
		return
	}
	j.log.Error().Err(err).Bool("permanent", permanent).Msg("compaction failed; request dead-lettered")
	if terr := msg.TermWithReason(truncateReason(err.Error())); terr != nil {
		j.log.Error().Err(terr).Msg("term compaction request")
	}
	if derr := p.store.PublishDead(ctx, schemas.DeadLetter{Request: j.req, Error: err.Error(), Attempts: j.attempt, At: p.now()}); derr != nil {
		j.log.Error().Err(derr).Msg("record dead letter")
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventFailed, Error: err.Error()})
}

func truncateReason(s string) string {
	if len(s) > 512 {
		return s[:512]
	}
	return s
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
	if err := p.store.PublishEvent(ctx, ev); err != nil {
		j.log.Warn().Err(err).Str("event", ev.Type).Msg("publish event")
	}
}

// loaded is what a job read before summarizing.
type loaded struct {
	cur     *schemas.Result
	rev     uint64
	pinned  []schemas.Entry // the messages at cur.PinnedSeqs
	entries []schemas.Entry // everything from the current tail start
	leading bool            // entries start at the conversation's first message
	lastSeq uint64
}

// process runs steps 2–6 of the job protocol. A nil error means the request was acked.
func (p *Pool) process(ctx context.Context, j *job) error {
	conv := j.req.Conversation
	// 2. The current value, from the leader. Holding this request's sequence means the
	// work was done before a crash: report it and ack.
	cur, rev, err := p.store.GetResult(ctx, conv, true)
	if err != nil {
		var newer *schemas.ErrNewerSchema
		if errors.As(err, &newer) {
			return fmt.Errorf("%w: %v", errPermanent, err)
		}
		return err
	}
	if cur != nil && cur.RequestSeq == j.seq {
		j.log.Info().Uint64("generation", cur.Generation).Msg("request already done before a restart; acking")
		return p.finish(ctx, j, cur, 0)
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventStarted, Generation: genOf(cur)})

	// 3. Load, split, pre-trim, summarize.
	ld, err := p.load(ctx, conv, cur, rev)
	if err != nil {
		return err
	}
	plan := p.plan(ld)
	for _, sk := range plan.skipped {
		j.log.Warn().Uint64("seq", sk.Seq).Str("reason", sk.Reason).Msg("message not summarized")
	}
	before := assemble.Assemble(assemble.Input{Value: ld.cur, Pinned: ld.pinned, Tail: ld.entries}, assemble.Options{})
	if len(plan.covered) == 0 {
		return p.decline(ctx, j, ld, before.Tokens, before.Tokens, "nothing to compact: every message is pinned or must stay in the tail")
	}
	in := Input{
		Conversation:    conv,
		PreviousSummary: summaryOf(ld.cur),
		SystemPrompt:    plan.systemPrompt,
		Messages:        plan.covered,
		Instructions:    j.req.Instructions,
		// Ask for less than the cap: the model counts its own tokens, the guard counts
		// chars/4, and a summary a little over the cap would be declined.
		MaxSummaryTokens: p.cfg.Budget.SummaryCap() * 85 / 100,
	}
	if p.pretrim != nil {
		in.Messages = p.pretrim(in.Messages, p.cfg.ToolOutputCap)
	}
	out, err := p.summarize(ctx, j, in)
	if err != nil {
		lastTry := j.attempt >= uint64(p.cfg.MaxAttempts) || (p.retryable != nil && !p.retryable(err))
		if !lastTry || before.Tokens < p.cfg.Budget.HardLimitTokens() {
			return err
		}
		// The LLM is down and the context is past the hard limit: keep the bound with
		// the deterministic summary, and still report the failure.
		j.log.Warn().Err(err).Msg("summarizer failed on the last attempt past the hard limit; writing the fallback summary")
		fb, ferr := p.fallback.Summarize(ctx, in)
		if ferr != nil {
			return fmt.Errorf("%w; fallback summary: %v", err, ferr)
		}
		_ = p.store.PublishDead(ctx, schemas.DeadLetter{Request: j.req, Error: err.Error() + " (fallback summary written)", Attempts: j.attempt, At: p.now()})
		out = fb
		out.Fallback = true
		j.fallbackFor = err
	}

	// 4. Guard.
	next := p.result(j, ld, plan, out, before)
	after := assemble.Assemble(assemble.Input{Value: next, Pinned: plan.pinned, Tail: ld.entries[plan.split:]}, assemble.Options{})
	next.TokensAfter, next.MessagesAfter = after.Tokens, len(after.Messages)
	if st, limit := tokens.Text(out.Summary), p.cfg.Budget.SummaryCap(); st > limit {
		return p.decline(ctx, j, ld, before.Tokens, after.Tokens,
			fmt.Sprintf("summary has %d tokens, over max_summary_tokens %d", st, limit))
	}
	if float64(after.Tokens) > float64(before.Tokens)*(1-p.cfg.MinProgress) {
		return p.decline(ctx, j, ld, before.Tokens, after.Tokens,
			fmt.Sprintf("context would shrink from %d to %d tokens, less than min_progress %g", before.Tokens, after.Tokens, p.cfg.MinProgress))
	}

	// 5. Compare-and-set on the revision read in step 2.
	if _, err := p.store.PutResult(ctx, next, ld.rev); err != nil {
		if !errors.Is(err, jetstream.ErrRevisionMismatch) {
			return err
		}
		now, _, rerr := p.store.GetResult(ctx, conv, true)
		if rerr != nil {
			return rerr
		}
		if now == nil || now.RequestSeq != j.seq {
			return fmt.Errorf("compaction value changed while summarizing; result discarded: %w", err)
		}
		next = now // our own write, acknowledged before a lost reply
	}
	j.log.Info().Uint64("generation", next.Generation).Int("tokens_before", next.TokensBefore).
		Int("tokens_after", next.TokensAfter).Uint64("tail_start_seq", next.TailStartSeq).
		Bool("fallback", next.Fallback).Msg("compacted")
	// 6. Ack, report, re-evaluate.
	return p.finish(ctx, j, next, ld.lastSeq)
}

func genOf(r *schemas.Result) uint64 {
	if r == nil {
		return 0
	}
	return r.Generation
}

func summaryOf(r *schemas.Result) string {
	if r == nil {
		return ""
	}
	return r.Summary
}

// load reads the pinned messages and everything from the current tail start.
func (p *Pool) load(ctx context.Context, conv string, cur *schemas.Result, rev uint64) (*loaded, error) {
	ld := &loaded{cur: cur, rev: rev}
	from := uint64(1)
	if cur != nil && cur.TailStartSeq > 0 {
		from = cur.TailStartSeq
	}
	ld.leading = cur == nil || cur.CoveredThroughSeq == 0
	if cur != nil {
		for _, seq := range cur.PinnedSeqs {
			m, err := p.store.GetMessage(ctx, seq)
			if err != nil {
				return nil, fmt.Errorf("load pinned message %d: %w", seq, err)
			}
			ld.pinned = append(ld.pinned, m.Entry())
		}
	}
	msgs, err := p.store.LoadConversation(ctx, conv, from, 0)
	if err != nil {
		return nil, fmt.Errorf("load conversation: %w", err)
	}
	ld.entries = make([]schemas.Entry, len(msgs))
	for i, m := range msgs {
		ld.entries[i] = m.Entry()
	}
	if n := len(msgs); n > 0 {
		ld.lastSeq = msgs[n-1].Seq
	} else if cur != nil {
		ld.lastSeq = cur.TailStartSeq - 1
	}
	return ld, nil
}

// plan is the split of one job.
type plan struct {
	split        int               // index in entries where the new tail starts
	pinned       []schemas.Entry   // every pinned entry before the new tail, old and new
	covered      []schemas.Message // the newly covered messages the summarizer sees
	skipped      []rounds.Skipped  // covered entries the summarizer does not see, and why
	systemPrompt string
}

func (p *Pool) plan(ld *loaded) plan {
	var pl plan
	pinnedTokens := tokens.Entries(ld.pinned)
	isPinned := split.Pinned(ld.entries, ld.leading)
	for i := range ld.entries {
		if isPinned[i] {
			pinnedTokens += tokens.Message(&ld.entries[i].Message)
		}
	}
	pl.split = split.LastN(ld.entries, split.Params{KeepLastN: p.cfg.KeepLastN, TailBudget: p.cfg.Budget.TailBudget(pinnedTokens)})
	pl.pinned = append(pl.pinned, ld.pinned...)
	var covered []schemas.Entry
	for i := 0; i < pl.split; i++ {
		if isPinned[i] {
			pl.pinned = append(pl.pinned, ld.entries[i])
			continue
		}
		covered = append(covered, ld.entries[i])
	}
	// The summarizer sees the same messages a reader would: orphans, invalid entries
	// and abandoned rounds are reported, not summarized.
	kept, skipped := rounds.Normalize(covered)
	pl.skipped = skipped
	for _, e := range kept {
		pl.covered = append(pl.covered, e.Message.StripMetadata())
	}
	for _, e := range pl.pinned {
		if e.Err == nil && e.Message.Role == schemas.RoleSystem && !e.Message.Pinned() {
			if pl.systemPrompt != "" {
				pl.systemPrompt += "\n\n"
			}
			pl.systemPrompt += e.Message.Content.String()
		}
	}
	return pl
}

// summarize calls the summarizer, telling JetStream the job is alive while it works.
func (p *Pool) summarize(ctx context.Context, j *job, in Input) (Output, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(p.cfg.InProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := j.msg.InProgress(); err != nil {
					j.log.Warn().Err(err).Msg("in-progress ack")
				}
			}
		}
	})
	defer func() { close(done); wg.Wait() }()
	out, err := p.llm.Summarize(ctx, in)
	if err != nil {
		return Output{}, err
	}
	if out.Summary == "" {
		return Output{}, errors.New("summarizer returned an empty summary")
	}
	return out, nil
}

// result builds the next value from the current one.
func (p *Pool) result(j *job, ld *loaded, pl plan, out Output, before assemble.Context) *schemas.Result {
	next := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: j.req.Conversation}
	if ld.cur != nil {
		next.Unknown = ld.cur.Unknown
		next.LLMBaseGeneration = ld.cur.LLMBaseGeneration
	}
	next.Generation = genOf(ld.cur) + 1
	next.Summary = out.Summary
	next.SummaryRole = p.cfg.SummaryRole
	if pl.split < len(ld.entries) {
		next.TailStartSeq = ld.entries[pl.split].Seq
	} else {
		next.TailStartSeq = ld.lastSeq + 1
	}
	next.CoveredThroughSeq = next.TailStartSeq - 1
	for _, e := range pl.pinned {
		next.PinnedSeqs = append(next.PinnedSeqs, e.Seq)
	}
	slices.Sort(next.PinnedSeqs)
	next.PinnedSeqs = slices.Compact(next.PinnedSeqs)
	if ld.cur != nil {
		for _, o := range ld.cur.Overrides {
			if o.Seq >= next.TailStartSeq || slices.Contains(next.PinnedSeqs, o.Seq) {
				next.Overrides = append(next.Overrides, o)
			}
		}
	}
	next.Strategy = p.cfg.Strategy
	next.Trigger = j.req.Trigger
	next.Reason = j.req.Reason
	next.RequestID = j.req.RequestID
	next.RequestSeq = j.seq
	next.Fallback = out.Fallback
	if !out.Fallback {
		next.LLMBaseGeneration = next.Generation
	}
	next.Model = out.Model
	next.PromptHash = out.PromptHash
	next.Usage = out.Usage
	next.TokensBefore = before.Tokens
	next.MessagesBefore = len(before.Messages)
	next.CreatedAt = p.now().UTC()
	return next
}

// decline records that this state of the conversation cannot be compacted usefully, so
// triggers wait for it to grow, then acks.
func (p *Pool) decline(ctx context.Context, j *job, ld *loaded, before, after int, reason string) error {
	var next schemas.Result
	if ld.cur != nil {
		next = *ld.cur
	} else {
		next = schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: j.req.Conversation,
			TailStartSeq: 1, TokensBefore: before, TokensAfter: before, CreatedAt: p.now().UTC()}
	}
	next.DeclinedAtSeq = ld.lastSeq
	if _, err := p.store.PutResult(ctx, &next, ld.rev); err != nil && !errors.Is(err, jetstream.ErrRevisionMismatch) {
		return err
	}
	j.log.Info().Str("reason", reason).Int("tokens_before", before).Int("tokens_after", after).Msg("compaction declined")
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack declined request: %w", err)
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventDeclined, Generation: next.Generation,
		TokensBefore: before, TokensAfter: after, Error: reason})
	return nil
}

// finish acks the request (freeing the conversation's slot), publishes completed and
// queues another compaction if messages that arrived meanwhile put it over budget.
func (p *Pool) finish(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64) error {
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack completed request: %w", err)
	}
	ev := schemas.Event{Type: schemas.EventCompleted, Generation: r.Generation,
		TokensBefore: r.TokensBefore, TokensAfter: r.TokensAfter}
	if j.fallbackFor != nil {
		ev.Error = "summarizer failed, fallback summary written: " + j.fallbackFor.Error()
	}
	p.event(ctx, j, ev)
	if loadedThrough > 0 {
		p.reevaluate(ctx, j, r, loadedThrough)
	}
	return nil
}

// reevaluate reads what arrived after the job loaded the conversation and queues the
// next request when the context is over the threshold again and no tool call is open.
func (p *Pool) reevaluate(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64) {
	conv := j.req.Conversation
	tail, err := p.store.LoadEntries(ctx, conv, r.TailStartSeq, 0)
	if err != nil {
		j.log.Warn().Err(err).Msg("re-evaluate after compaction")
		return
	}
	var newer []schemas.Entry
	for _, e := range tail {
		if e.Seq > loadedThrough {
			newer = append(newer, e)
		}
	}
	if len(newer) == 0 || len(rounds.Pending(tail)) > 0 {
		return
	}
	total := r.TokensAfter + tokens.Entries(newer)
	if total < p.cfg.Budget.ThresholdTokens() {
		return
	}
	req := schemas.Request{
		RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerBudget,
		Reason:      fmt.Sprintf("re-evaluation after generation %d: %d tokens ≥ threshold %d", r.Generation, total, p.cfg.Budget.ThresholdTokens()),
		RequestedAt: p.now().UTC(), UpToSeq: newer[len(newer)-1].Seq,
	}
	if _, err := p.store.Enqueue(ctx, req); err != nil && !errors.Is(err, jetstream.ErrRequestPending) {
		j.log.Warn().Err(err).Msg("queue compaction after re-evaluation")
		return
	}
	j.log.Info().Int("tokens", total).Msg("still over the threshold after compaction; queued another")
}
