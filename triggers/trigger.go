package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// Config sets up the budget trigger. Each conversation's budget comes from its
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
	// Counters returns the token counter of a tokenizer name (policy key tokenizer);
	// nil knows chars4 only.
	Counters func(name string) (tokens.Counter, error)
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
	}
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
	}
	return nil
}

// PolicySource resolves a conversation's settings (defaults, environment, profile and
// the conversation's own policy). When the conversation's policy is invalid, it returns
// an error matching policy.ErrPolicy together with the settings without that policy.
type PolicySource interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// Budget is the budget trigger: the one active consumer of CHAT (other processes stand
// by on the same pinned consumer) that queues a compaction when a conversation's
// context estimate reaches the threshold.
type Budget struct {
	cfg      Config
	store    *jetstream.Store
	policies PolicySource
	log      zerolog.Logger
	now      func() time.Time

	mu    sync.Mutex
	convs map[string]*conv
}

// conv is the trigger's cached view of one conversation. It is a cache: dropped when
// idle or stale, rebuilt from KV and the stream on the next message.
type conv struct {
	id        string
	watermark uint64 // the newest CHAT sequence already counted
	tokens    int    // pinned + summary + tail, estimated
	open      map[string]bool
	stale     bool
	count     tokens.Counter  // the conversation's tokenizer
	settings  policy.Settings // the conversation's resolved policy
	budget    budget.Budget   // settings.Budget()
	// generation is the compaction generation of the value the estimate builds on.
	generation uint64
	lastSeen   time.Time // when the trigger last handled the conversation (for eviction)

	// rounds counts assistant messages after loadedThrough, the newest sequence the last
	// compaction read (max_rounds).
	rounds        int
	loadedThrough uint64
	// structural is the reason of a pending structural trigger (a large tool output).
	structural string
	// lastMsgAt is the stream time of the newest message (idle detection); lastArm when
	// the idle timer was last re-armed; idleFiredFor the lastMsgAt of the quiet period an
	// idle request was already made for.
	lastMsgAt    time.Time
	lastArm      time.Time
	idleFiredFor time.Time

	declinedAtSeq   uint64
	tokensAtDecline int
	inFlightUntil   time.Time
	failures        int
	backoffUntil    time.Time
	retry           *time.Timer
}

// NewBudget returns a budget trigger; Run starts it.
func NewBudget(cfg Config, store *jetstream.Store, policies PolicySource, log zerolog.Logger) (*Budget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if policies == nil {
		return nil, fmt.Errorf("%w: a policy source is required", ErrConfig)
	}
	return &Budget{cfg: cfg, store: store, policies: policies, log: log.With().Str("component", "trigger").Logger(),
		now: time.Now, convs: map[string]*conv{}}, nil
}

// Run consumes CHAT until ctx is done, then drains the message in hand and returns.
func (b *Budget) Run(ctx context.Context) error {
	cons, err := b.store.TriggerConsumer(ctx)
	if err != nil {
		return stopped(ctx, err)
	}
	cfg := b.store.Config()
	events, err := b.store.Conn().Subscribe(cfg.EventPrefix+".*", b.onEvent)
	if err != nil {
		return stopped(ctx, fmt.Errorf("subscribe to events: %w", err))
	}
	defer func() { _ = events.Unsubscribe() }()
	policies, err := b.store.Conn().Subscribe(b.store.PolicySubject(), b.onPolicy)
	if err != nil {
		return stopped(ctx, fmt.Errorf("subscribe to policy changes: %w", err))
	}
	defer func() { _ = policies.Unsubscribe() }()
	cc, err := cons.Consume(func(msg natsjs.Msg) { b.onMessage(ctx, msg) },
		natsjs.PullPriorityGroup(cfg.TriggerGroup),
		natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
			if ctx.Err() == nil && !errors.Is(err, natsjs.ErrNoHeartbeat) {
				b.log.Debug().Err(err).Msg("trigger consumer")
			}
		}))
	if err != nil {
		return stopped(ctx, fmt.Errorf("consume %s: %w", cfg.ChatStream, err))
	}
	idleCons, err := b.store.IdleConsumer(ctx)
	if err != nil {
		cc.Stop()
		return stopped(ctx, err)
	}
	ic, err := idleCons.Consume(func(msg natsjs.Msg) { b.onIdle(ctx, msg) },
		natsjs.PullPriorityGroup(cfg.TriggerGroup),
		natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) {
			if ctx.Err() == nil && !errors.Is(err, natsjs.ErrNoHeartbeat) {
				b.log.Debug().Err(err).Msg("idle consumer")
			}
		}))
	if err != nil {
		cc.Stop()
		return stopped(ctx, fmt.Errorf("consume %s: %w", cfg.ActivityStream, err))
	}
	b.log.Info().Msg("trigger started (active or standby)")
	evict := time.NewTicker(max(b.cfg.EvictAfter/4, time.Second))
	defer evict.Stop()
	sweep := time.NewTicker(b.cfg.SweepEvery)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			cc.Drain()
			ic.Drain()
			<-cc.Closed()
			<-ic.Closed()
			b.mu.Lock()
			for _, c := range b.convs {
				if c.retry != nil {
					c.retry.Stop()
				}
			}
			b.mu.Unlock()
			b.log.Info().Msg("trigger stopped")
			return nil
		case <-evict.C:
			b.evict()
		case <-sweep.C:
			b.sweep(ctx)
		}
	}
}

// stopped turns an error met while ctx was being cancelled into a clean stop.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Tracked returns how many conversations the trigger holds state for.
func (b *Budget) Tracked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.convs)
}

func (b *Budget) evict() {
	b.mu.Lock()
	defer b.mu.Unlock()
	cutoff := b.now().Add(-b.cfg.EvictAfter)
	for id, c := range b.convs {
		if c.lastSeen.Before(cutoff) && c.retry == nil && !b.now().Before(c.inFlightUntil) && !b.now().Before(c.backoffUntil) {
			delete(b.convs, id)
		}
	}
}

func (b *Budget) onMessage(ctx context.Context, msg natsjs.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		b.log.Error().Err(err).Msg("chat message without metadata")
		_ = msg.Term()
		return
	}
	seq := md.Sequence.Stream
	id, ok := b.store.Config().ConversationOf(msg.Subject())
	if !ok || schemas.ValidateConversationID(id) != nil {
		b.log.Warn().Str("subject", msg.Subject()).Uint64("seq", seq).Msg("message on a subject with an invalid conversation id skipped")
		_ = msg.Ack()
		return
	}
	log := b.log.With().Str("conversation", id).Uint64("seq", seq).Logger()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.convs[id]
	if c == nil || c.stale {
		c, err = b.rebuild(ctx, id, seq-1, c)
		if err != nil {
			log.Warn().Err(err).Msg("rebuild conversation state; retrying")
			_ = msg.NakWithDelay(time.Second)
			return
		}
		b.convs[id] = c
	}
	c.lastSeen = b.now()
	if seq <= c.watermark {
		_ = msg.Ack() // a redelivery: already counted
		return
	}
	e := jetstream.StoredMsg{Seq: seq, Data: msg.Data()}.Entry()
	c.watermark = seq
	c.lastMsgAt = md.Timestamp
	if e.Err != nil {
		log.Warn().Err(e.Err).Msg("invalid chat message skipped")
		_ = msg.Ack()
		return
	}
	c.add(&e.Message, seq)
	b.evaluate(ctx, c, log)
	b.arm(c)
	_ = msg.Ack()
}

// add counts one message and follows the open tool calls of the newest round.
//
// A reply that carries the usage its model reported, measured on the context of the
// conversation's current generation (context_generation), resets the estimate to what
// the model counted: prompt_tokens + completion_tokens. Usage measured on an older
// generation's context is ignored.
//
// It also counts assistant rounds since the last compaction, and marks a tool output
// over tool_output_trigger_tokens for a structural trigger.
func (c *conv) add(m *schemas.Message, seq uint64) {
	t := tokens.MessageWith(c.count, m)
	if u := m.Usage; u != nil && m.ContextGeneration != nil && *m.ContextGeneration == c.generation && u.PromptTokens > 0 {
		c.tokens = u.PromptTokens + u.CompletionTokens
	} else {
		c.tokens += t
	}
	if m.Role == schemas.RoleAssistant && seq > c.loadedThrough {
		c.rounds++
	}
	if lim := c.settings.ToolOutputTriggerTokens; lim > 0 && m.Role == schemas.RoleTool && t > lim {
		c.structural = fmt.Sprintf("tool output of %d tokens at seq %d > tool_output_trigger_tokens %d", t, seq, lim)
	}
	switch {
	case m.HasToolCalls():
		c.open = make(map[string]bool, len(m.ToolCalls))
		for _, tc := range m.ToolCalls {
			c.open[tc.ID] = true
		}
	case m.Role == schemas.RoleTool:
		delete(c.open, m.ToolCallID)
	case m.Role == schemas.RoleAssistant:
		c.open = nil // the agent moved on; the round stays incomplete forever
	}
}

// rebuild reads the conversation's value and tail up to upTo into a fresh state. The
// timers and backoffs of an old state carry over.
func (b *Budget) rebuild(ctx context.Context, id string, upTo uint64, old *conv) (*conv, error) {
	s, err := b.policies.Settings(ctx, id)
	if errors.Is(err, policy.ErrPolicy) {
		// Keep counting against the settings without the policy; the worker reports
		// the bad policy on the request (failed event, dead letter).
		b.log.Warn().Err(err).Str("conversation", id).Msg("invalid conversation policy; using the defaults for the trigger")
	} else if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	v, _, err := b.store.GetResult(ctx, id, false)
	if err != nil {
		return nil, err
	}
	count := tokens.Counter(tokens.Chars4{})
	if s.Tokenizer != "" && s.Tokenizer != "chars4" {
		if b.cfg.Counters == nil {
			return nil, fmt.Errorf("tokenizer %q is not available in this process", s.Tokenizer)
		}
		if count, err = b.cfg.Counters(s.Tokenizer); err != nil {
			return nil, err
		}
	}
	c := &conv{id: id, watermark: upTo, settings: s, budget: s.Budget(), count: count}
	if old != nil {
		c.retry, c.failures, c.backoffUntil = old.retry, old.failures, old.backoffUntil
	}
	from := uint64(1)
	var pinned []schemas.Entry
	if v != nil {
		from = max(v.TailStartSeq, 1)
		if pinned, err = b.store.LoadPinned(ctx, v.PinnedSeqs); err != nil {
			return nil, err
		}
		c.declinedAtSeq = v.DeclinedAtSeq
		c.generation = v.Generation
		c.loadedThrough = v.LoadedThroughSeq
	}
	var tail []schemas.Entry
	if upTo >= from {
		if tail, err = b.store.LoadEntries(ctx, id, from, upTo); err != nil {
			return nil, err
		}
	}
	c.tokens = tokens.EntriesWith(count, pinned)
	if v != nil && v.Summary != "" {
		sm := assemble.SummaryMessage(v)
		c.tokens += tokens.MessageWith(count, &sm)
	}
	for i := range tail {
		if tail[i].Err == nil {
			c.add(&tail[i].Message, tail[i].Seq)
		}
	}
	c.structural = "" // a large output already covered by a compaction, or counted before a restart
	if n := len(tail); n > 0 {
		c.lastMsgAt = tail[n-1].Time
	}
	if c.declinedAtSeq > 0 {
		c.tokensAtDecline = c.tokens
		for i := range tail {
			if tail[i].Err == nil && tail[i].Seq > c.declinedAtSeq {
				c.tokensAtDecline -= tokens.MessageWith(count, &tail[i].Message)
			}
		}
	}
	return c, nil
}

// decide says whether the conversation needs compacting and why: the kinds are OR-ed,
// structural first, then the budget rules.
func (c *conv) decide() (kind, reason string) {
	b, s := c.budget, c.settings
	switch {
	case c.structural != "":
		return schemas.TriggerStructural, c.structural
	case c.tokens >= b.ThresholdTokens():
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ threshold %d (%g × %d)", c.tokens, b.ThresholdTokens(), b.Threshold, b.ContextWindow)
	case s.TokenLimit > 0 && c.tokens >= s.TokenLimit:
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ token_limit %d", c.tokens, s.TokenLimit)
	case s.SoftThreshold > 0 && c.tokens >= int(s.SoftThreshold*float64(b.ContextWindow)):
		return schemas.TriggerBudget, fmt.Sprintf("context %d tokens ≥ soft threshold %d (%g × %d): compacting ahead of time",
			c.tokens, int(s.SoftThreshold*float64(b.ContextWindow)), s.SoftThreshold, b.ContextWindow)
	case s.MaxRounds > 0 && c.rounds >= s.MaxRounds:
		return schemas.TriggerBudget, fmt.Sprintf("%d assistant rounds since the last compaction ≥ max_rounds %d", c.rounds, s.MaxRounds)
	}
	return "", ""
}

// evaluate queues a compaction when the conversation needs one. Callers hold b.mu.
func (b *Budget) evaluate(ctx context.Context, c *conv, log zerolog.Logger) {
	kind, reason := c.decide()
	if kind != "" {
		b.request(ctx, c, kind, reason, log)
	}
}

// request queues a compaction of kind for reason unless the guard or a backoff says
// not now. Callers hold b.mu.
func (b *Budget) request(ctx context.Context, c *conv, kind, reason string, log zerolog.Logger) {
	now := b.now()
	switch {
	case len(c.open) > 0: // never while the newest tool calls are unanswered
		return
	case now.Before(c.inFlightUntil), now.Before(c.backoffUntil), c.retry != nil:
		return
	case c.declinedAtSeq > 0 && c.tokens < c.tokensAtDecline+int(b.cfg.Regrow*float64(c.budget.ContextWindow)):
		return
	}
	req := schemas.Request{
		RequestID: schemas.NewRequestID(), Conversation: c.id, Trigger: kind, Reason: reason,
		RequestedAt: now.UTC(), UpToSeq: c.watermark,
	}
	_, err := b.store.Enqueue(ctx, req)
	switch {
	case err == nil:
		c.inFlightUntil = now.Add(b.cfg.InFlightTimeout)
		c.structural = ""
		log.Info().Int("tokens", c.tokens).Str("trigger", kind).Str("reason", reason).Str("request_id", req.RequestID).Msg("compaction requested")
		ev := schemas.Event{Type: schemas.EventRequested, Conversation: c.id, RequestID: req.RequestID,
			Trigger: req.Trigger, Reason: req.Reason, TokensBefore: c.tokens, At: now.UTC()}
		if err := b.store.PublishEvent(ctx, ev); err != nil {
			log.Warn().Err(err).Msg("publish requested event")
		}
	case errors.Is(err, jetstream.ErrRequestPending):
		b.scheduleRetry(ctx, c)
	default:
		log.Warn().Err(err).Msg("queue compaction; will retry")
		b.scheduleRetry(ctx, c)
	}
}

// scheduleRetry re-evaluates the conversation after RetryDelay, so a request refused
// while another was pending is asked for again when the slot frees.
func (b *Budget) scheduleRetry(ctx context.Context, c *conv) {
	id := c.id
	c.retry = time.AfterFunc(b.cfg.RetryDelay, func() {
		if ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		c := b.convs[id]
		if c == nil {
			return
		}
		c.retry = nil
		if c.stale {
			fresh, err := b.rebuild(ctx, id, c.watermark, c)
			if err != nil {
				b.log.Warn().Err(err).Str("conversation", id).Msg("rebuild conversation state")
				b.scheduleRetry(ctx, c)
				return
			}
			fresh.lastSeen = c.lastSeen
			b.convs[id] = fresh
			c = fresh
		}
		b.evaluate(ctx, c, b.log.With().Str("conversation", id).Logger())
	})
}

// onPolicy makes a conversation's state stale when its policy changes, so its next
// message is counted against the new settings.
func (b *Budget) onPolicy(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.convs[id]; c != nil {
		c.stale = true
	}
}

// onEvent follows the outcome of requests: a new value makes the state stale (it is
// rebuilt from KV), a failure spaces the next request out.
func (b *Budget) onEvent(m *nats.Msg) {
	var ev schemas.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		b.log.Warn().Err(err).Str("subject", m.Subject).Msg("undecodable compaction event skipped")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.convs[ev.Conversation]
	if c == nil {
		return
	}
	switch ev.Type {
	case schemas.EventCompleted, schemas.EventDeclined:
		c.stale = true
		c.inFlightUntil = time.Time{}
		if ev.Type == schemas.EventCompleted {
			c.failures, c.backoffUntil = 0, time.Time{}
		}
	case schemas.EventFailed:
		c.inFlightUntil = time.Time{}
		c.failures++
		d := b.cfg.FailureBackoff
		for i := 1; i < c.failures && d < b.cfg.FailureBackoffMax; i++ {
			d *= 2
		}
		c.backoffUntil = b.now().Add(min(d, b.cfg.FailureBackoffMax))
	}
}

// armEvery is how often a busy conversation's idle timer is re-armed: every few
// seconds at most, never more often than a quarter of the idle time.
func armEvery(idle time.Duration) time.Duration {
	return min(max(idle/4, time.Second), 5*time.Second)
}

// arm re-arms the conversation's idle timer: a message on activity.<conv> with a TTL of
// idle_after. When it expires, the server leaves a delete marker, which the idle
// consumer reads as the idle signal, also after a restart. Callers hold b.mu.
func (b *Budget) arm(c *conv) {
	idle := c.settings.IdleAfter
	if idle <= 0 || b.now().Sub(c.lastArm) < armEvery(idle) {
		return
	}
	b.armFor(c, idle)
}

func (b *Budget) armFor(c *conv, ttl time.Duration) {
	ttl = max(ttl.Round(time.Second), time.Second)
	m := nats.NewMsg(b.store.Config().ActivitySubject(c.id))
	m.Header.Set(natsjs.MsgTTLHeader, ttl.String())
	m.Data = fmt.Appendf(nil, `{"seq":%d}`, c.watermark)
	if err := b.store.Conn().PublishMsg(m); err != nil {
		b.log.Warn().Err(err).Str("conversation", c.id).Msg("re-arm idle timer")
		return
	}
	c.lastArm = b.now()
}

// onIdle handles ACTIVITY: the delete marker an expired idle timer leaves is the idle
// signal; the timer messages themselves are only acknowledged.
func (b *Budget) onIdle(ctx context.Context, msg natsjs.Msg) {
	defer func() { _ = msg.Ack() }()
	if msg.Headers().Get("Nats-Marker-Reason") == "" {
		return
	}
	prefix := b.store.Config().ActivityPrefix + "."
	id, ok := strings.CutPrefix(msg.Subject(), prefix)
	if !ok || schemas.ValidateConversationID(id) != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.convs[id]
	if c == nil || c.stale {
		last, err := b.store.LastSeq(ctx, id)
		if err != nil {
			b.log.Warn().Err(err).Str("conversation", id).Msg("idle signal: read the conversation")
			return
		}
		if c, err = b.rebuild(ctx, id, last, c); err != nil {
			b.log.Warn().Err(err).Str("conversation", id).Msg("idle signal: rebuild the conversation")
			return
		}
		c.lastSeen = b.now()
		b.convs[id] = c
	}
	b.idle(ctx, c)
}

// idle compacts a conversation that has been quiet for idle_after when it is over
// idle_threshold, once per quiet period. A conversation that was active more recently
// than the timer knew (re-arming is rate-limited) gets the rest of its time. Callers
// hold b.mu.
func (b *Budget) idle(ctx context.Context, c *conv) {
	idle := c.settings.IdleAfter
	if idle <= 0 || c.lastMsgAt.IsZero() || !c.idleFiredFor.Before(c.lastMsgAt) {
		return
	}
	quiet := b.now().Sub(c.lastMsgAt)
	if quiet < idle-time.Second {
		b.armFor(c, idle-quiet)
		return
	}
	c.idleFiredFor = c.lastMsgAt
	limit := int(c.settings.IdleThreshold * float64(c.budget.ContextWindow))
	if c.tokens < limit {
		return
	}
	log := b.log.With().Str("conversation", c.id).Logger()
	b.request(ctx, c, schemas.TriggerTemporal,
		fmt.Sprintf("idle for %s with %d tokens ≥ idle_threshold %d (%g × %d)", quiet.Round(time.Second), c.tokens, limit,
			c.settings.IdleThreshold, c.budget.ContextWindow), log)
}

// sweep looks for idle conversations among those tracked, in case a marker was missed.
func (b *Budget) sweep(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.convs {
		if !c.stale && c.settings.IdleAfter > 0 && b.now().Sub(c.lastMsgAt) >= c.settings.IdleAfter {
			b.idle(ctx, c)
		}
	}
}
