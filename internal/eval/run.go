package eval

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/split"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// DefaultWindow is the context window W eval replays at: small enough that the
// longer half of the shared corpus compacts (most of its paths and commands are in
// those conversations), large enough for the corpus's system prompts.
const DefaultWindow = 8000

// DefaultStrategies are the strategies replayed when none is named: every split
// strategy but "all" (which keeps nothing verbatim).
var DefaultStrategies = []string{split.StrategyKeepLastN, split.StrategyToolRounds, split.StrategyUserMessages,
	split.StrategyTokenFraction, split.StrategyRecentTurns}

// Config is one eval run.
type Config struct {
	// Files are the JSONL conversations (Expand turns arguments into them).
	Files []string
	// Strategies to replay each conversation with (nil: DefaultStrategies, or with
	// Rungs the policy's strategy).
	Strategies []string
	// Rungs, when set, are the values of the policy key rungs each strategy is replayed
	// with (summary, mask, mask-then-summary): every strategy with every rung. Nil: the
	// key is left to the operator's tiers.
	Rungs []string
	// CacheTTL is how long the provider's prompt cache is taken to live, for the
	// proxy's swap rule and the cache figures (0: DefaultCacheTTL; NoCache: none).
	CacheTTL time.Duration
	// Prices, when set, prices the tokens (Model's entry for those sent, the
	// summarizer's model's for the summarizer's); nil: tokens and ratios only.
	Prices *savings.Prices
	// Model is the agent's model, as the price table names it ("": its default).
	Model string
	// TurnGap is the simulated time between two model turns (transcripts carry no
	// clock; 0: every turn within the cache's life).
	TurnGap time.Duration
	// Window is the context window W (0: DefaultWindow).
	Window int
	// Facts are texts the user wants kept; each is scored in the conversations whose raw
	// history holds it (case-insensitive).
	Facts []string
	// Plant adds this many unique synthetic facts, as user messages after the first
	// user message, to every conversation, and scores their survival.
	Plant int
	// Concurrency is how many conversations replay at once (0: 8).
	Concurrency int
	// EvidenceBudget, when not empty, is set as the policy key evidence_budget of every
	// conversation (a server that does not know the key refuses the run).
	EvidenceBudget string
	// NATSURL, when set, is used instead of an embedded server; the run then works in
	// a namespace of its own (every name prefixed) and deletes it at the end.
	NATSURL     string
	NATSOptions []nats.Option
	// Resolver is the operator's tiers (environment, profiles); nil: the defaults.
	Resolver *policy.Resolver
	// Summarizers returns the summarizer of a conversation's settings; nil: extractive.
	Summarizers func(policy.Settings) (summary.Summarizer, error)
	// SummarizerName says what summarizes, for the report.
	SummarizerName string
	// Prober asks the probe questions of the final contexts; nil: no probes.
	Prober *Prober
	// TurnWait bounds each wait of a model turn for the trigger and a pending
	// compaction (0: 30 s).
	TurnWait time.Duration
	// Progress hears each replay finished (done of total); nil: nobody.
	Progress func(done, total int)
	Logger   zerolog.Logger
}

func (c *Config) defaults() {
	if len(c.Strategies) == 0 && len(c.Rungs) == 0 {
		c.Strategies = DefaultStrategies
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = DefaultCacheTTL
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 8
	}
	if c.TurnWait <= 0 {
		c.TurnWait = 30 * time.Second
	}
	if c.SummarizerName == "" {
		c.SummarizerName = "extractive (no LLM endpoint configured)"
	}
}

// arm is one way a conversation is replayed: a strategy, and a rung unless the
// operator's tiers choose it.
type arm struct{ strategy, rung string }

// name is how the reports name an arm: the strategy, and its rung when set.
func (a arm) name() string {
	if a.rung == "" {
		return a.strategy
	}
	return a.strategy + " " + a.rung
}

// arms are the config's strategies crossed with its rungs, strategy first.
func (c *Config) arms() []arm {
	var out []arm
	for _, s := range c.Strategies {
		if len(c.Rungs) == 0 {
			out = append(out, arm{strategy: s})
		}
		for _, r := range c.Rungs {
			out = append(out, arm{s, r})
		}
	}
	return out
}

// layer is the per-conversation policy of one arm.
func (c *Config) layer(a arm) policy.Layer {
	l := policy.Layer{"context_window": strconv.Itoa(c.Window), "strategy": a.strategy}
	if a.rung != "" {
		l["rungs"] = a.rung
	}
	if c.EvidenceBudget != "" {
		l["evidence_budget"] = c.EvidenceBudget
	}
	return l
}

// Validate checks the settings before anything starts: every strategy known, and
// each strategy's policy (window, evidence budget) one the server accepts.
func (c *Config) Validate() error {
	c.defaults()
	for _, s := range c.Strategies {
		if !slices.Contains(split.Strategies, s) {
			return fmt.Errorf("%w: unknown strategy %q (known: %s)", ErrConfig, s, strings.Join(split.Strategies, ", "))
		}
	}
	for i, rg := range c.Rungs {
		if !slices.Contains(policy.Rungs, rg) {
			return fmt.Errorf("%w: unknown rungs %q (known: %s)", ErrConfig, rg, strings.Join(policy.Rungs, ", "))
		}
		if slices.Contains(c.Rungs[:i], rg) {
			return fmt.Errorf("%w: rungs %q named twice", ErrConfig, rg)
		}
	}
	if c.Prices != nil && c.Prices.For(c.Model) == nil {
		return fmt.Errorf("%w: the price table prices no model %q and has no default: name a model it prices with --model, or add a \"default\" entry", ErrConfig, c.Model)
	}
	if (c.CacheTTL < 0 && c.CacheTTL != NoCache) || c.TurnGap < 0 {
		return fmt.Errorf("%w: the cache TTL (NoCache for none) and the turn gap must not be negative", ErrConfig)
	}
	if c.Plant < 0 || c.Plant > 100 {
		return fmt.Errorf("%w: plant must be 0 to 100 facts, got %d", ErrConfig, c.Plant)
	}
	if c.Concurrency > 256 {
		return fmt.Errorf("%w: concurrency must be at most 256, got %d", ErrConfig, c.Concurrency)
	}
	if len(c.Facts) > 1000 {
		return fmt.Errorf("%w: at most 1000 facts, got %d", ErrConfig, len(c.Facts))
	}
	r, err := c.resolver()
	if err != nil {
		return err
	}
	if len(c.Strategies) == 0 {
		// Rungs compared under the policy's own strategy.
		c.Strategies = []string{r.Base().Strategy}
	}
	for _, a := range c.arms() {
		data, err := policy.EncodeConversation(c.layer(a))
		if err == nil {
			var l policy.Layer
			if l, err = policy.DecodeConversation(data); err == nil {
				_, err = r.Resolve(l)
			}
		}
		if err != nil {
			return fmt.Errorf("%w: the policy of %s: %w", ErrConfig, a.name(), err)
		}
	}
	return nil
}

func (c *Config) resolver() (*policy.Resolver, error) {
	if c.Resolver != nil {
		return c.Resolver, nil
	}
	r, err := policy.NewResolver(policy.Layer{}, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.Resolver = r
	return r, nil
}

// Run replays every conversation with every strategy and reports what survived.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Files) == 0 {
		return nil, fmt.Errorf("%w: no conversation to replay", ErrNoInput)
	}
	// Every file is checked before anything starts (one bad line fails the run, named);
	// a replay reads its file again, so only the conversations in flight are in memory.
	for _, f := range cfg.Files {
		if _, err := Load(f); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	rg, err := startRig(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer rg.close()

	type job struct{ conv, arm int }
	jobs := make(chan job)
	arms := cfg.arms()
	results := make([][]ConvResult, len(arms))
	for i := range results {
		results[i] = make([]ConvResult, len(cfg.Files))
	}
	total := len(cfg.Files) * len(arms)
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(jobs)
		for s := range arms {
			for c := range cfg.Files {
				select {
				case jobs <- job{c, s}:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
		}
		return nil
	})
	for range min(cfg.Concurrency, total) {
		g.Go(func() error {
			for j := range jobs {
				conv, err := Load(cfg.Files[j.conv])
				if err != nil {
					return err
				}
				r, err := rg.replay(gctx, conv, j.conv, arms[j.arm])
				if err != nil {
					return fmt.Errorf("%s with %s: %w", conv.Name, arms[j.arm].name(), err)
				}
				results[j.arm][j.conv] = r
				if n := done.Add(1); cfg.Progress != nil {
					cfg.Progress(int(n), total)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	rep := newReport(&cfg, results, rg.server)
	rep.Elapsed = time.Since(started).Round(time.Millisecond).String()
	return rep, nil
}

// rig is the pipeline eval replays through: a server, the store, a trigger and a
// summarizer pool, each on its own connection as separate processes would be.
type rig struct {
	cfg      *Config
	server   string
	jcfg     jetstream.Config
	store    *jetstream.Store
	client   *pipeline.Client
	consumer natsjs.Consumer
	counted  *counting
	// threshold is each arm's threshold in tokens; stale the size past which the
	// proxy gives up a compaction it sent before (the threshold, at most the hard limit).
	threshold, stale map[arm]int
	conns            []*nats.Conn
	stops            []func() error
	// dropNS deletes the namespace (before the connections close); shutdown stops the
	// embedded server (after).
	dropNS, shutdown func()
	ns               string
}

// startRig starts (or connects to) the server and runs the trigger and the pool.
func startRig(ctx context.Context, cfg *Config) (_ *rig, err error) {
	rg := &rig{cfg: cfg, jcfg: jetstream.DefaultConfig()}
	defer func() {
		if err != nil {
			rg.close()
		}
	}()
	url, err := rg.startServer()
	if err != nil {
		return nil, err
	}
	nc, err := rg.dial(url, "compactor-eval")
	if err != nil {
		return nil, err
	}
	if err := rg.provision(ctx, nc); err != nil {
		return nil, err
	}
	r, _ := cfg.resolver()
	if err := rg.thresholds(r); err != nil {
		return nil, err
	}
	if err := rg.startTrigger(ctx, url, r); err != nil {
		return nil, err
	}
	if err := rg.startPool(ctx, url, r); err != nil {
		return nil, err
	}
	parts := rg.jcfg.Partitions()
	if rg.consumer, err = waitConsumer(ctx, nc, rg.jcfg.ChatStream, rg.jcfg.TriggerConsumerOf(parts[0])); err != nil {
		return nil, err
	}
	return rg, nil
}

// startServer starts an embedded server, unless the config names one (then the rig
// works in a namespace of its own), and returns the server's URL.
func (rg *rig) startServer() (string, error) {
	url := rg.cfg.NATSURL
	if url == "" {
		dir, err := os.MkdirTemp("", "compactor-eval-")
		if err != nil {
			return "", err
		}
		srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir, ServerName: "compactor-eval"})
		if err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("start the embedded server: %w", err)
		}
		rg.shutdown = func() { srv.Shutdown(); os.RemoveAll(dir) }
		url, rg.server = srv.ClientURL(), "embedded (a temporary store, removed at the end)"
	} else {
		rg.ns = "eval" + strings.ToLower(rand.Text()[:10]) + "x" // random: two runs on one server never share a namespace
		rg.jcfg = namespaced(rg.ns)
		rg.server = "the server at " + policy.RedactURL(url) + " (--nats-url), in namespace " + rg.ns + " (deleted at the end)"
	}
	return url, nil
}

// dial connects to the server at url as name; the rig closes the connection.
func (rg *rig) dial(url, name string) (*nats.Conn, error) {
	nc, err := natsconn.Connect(url, name, zerolog.Nop(), rg.cfg.NATSOptions...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", policy.RedactURL(url), err)
	}
	rg.conns = append(rg.conns, nc)
	return nc, nil
}

// provision provisions the streams on nc (in a namespace, deleted when the rig
// closes) and makes the client that publishes and reads.
func (rg *rig) provision(ctx context.Context, nc *nats.Conn) (err error) {
	if rg.ns != "" {
		// Set before provisioning, so what a failed provision created is deleted too.
		js, err := natsjs.New(nc)
		if err != nil {
			return err
		}
		rg.dropNS = func() { deleteStreams(js, rg.jcfg.Names.Streams()) }
	}
	if rg.store, err = jetstream.Provision(ctx, nc, rg.jcfg); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	rg.client = pipeline.NewWithStore(nc, rg.store)
	return nil
}

// thresholds resolves each arm's threshold in tokens, and the proxy's stale size
// (internal/proxy's bounds, with nothing reserved for output and tools).
func (rg *rig) thresholds(r *policy.Resolver) error {
	rg.threshold, rg.stale = map[arm]int{}, map[arm]int{}
	for _, a := range rg.cfg.arms() {
		s, err := r.Resolve(rg.cfg.layer(a))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		rg.threshold[a] = s.Budget().ThresholdTokens()
		rg.stale[a] = min(s.Budget().HardLimitTokens(), int(s.Threshold*float64(s.ContextWindow)))
	}
	return nil
}

// startTrigger runs the trigger on a connection of its own.
func (rg *rig) startTrigger(ctx context.Context, url string, r *policy.Resolver) error {
	tnc, err := rg.dial(url, "compactor-eval-trigger")
	if err != nil {
		return err
	}
	tst, err := jetstream.Open(ctx, tnc, rg.jcfg)
	if err != nil {
		return err
	}
	tcfg := triggers.DefaultConfig()
	tcfg.RetryDelay = 100 * time.Millisecond
	trig, err := node.New(node.Config{Roles: node.Roles{Trigger: true}, Resolver: r, Trigger: tcfg, Logger: rg.cfg.Logger}, tnc, tst)
	if err != nil {
		return err
	}
	rg.stops = append(rg.stops, trig.Start(ctx))
	return nil
}

// startPool runs the summarizer pool on a connection of its own, its summarizers
// (the config's, else the extractive one) counted.
func (rg *rig) startPool(ctx context.Context, url string, r *policy.Resolver) error {
	cfg := rg.cfg
	wnc, err := rg.dial(url, "compactor-eval-worker")
	if err != nil {
		return err
	}
	wst, err := jetstream.Open(ctx, wnc, rg.jcfg)
	if err != nil {
		return err
	}
	sums := cfg.Summarizers
	if sums == nil {
		ex := extractive.New()
		sums = func(policy.Settings) (summary.Summarizer, error) { return ex, nil }
	}
	rg.counted = newCounting()
	pcfg := summarizer.DefaultConfig()
	pcfg.Workers = max(2, min(cfg.Concurrency, 16))
	pcfg.BackoffBase, pcfg.BackoffMax, pcfg.DrainTimeout = 100*time.Millisecond, 2*time.Second, 10*time.Second
	pool, err := node.New(node.Config{Roles: node.Roles{Worker: true}, Resolver: r, Summarizer: pcfg, Logger: cfg.Logger,
		Summarizers: func(s policy.Settings) (summarizer.Summarizer, error) {
			sum, err := sums(s)
			if err != nil {
				return nil, err
			}
			return rg.counted.wrap(sum), nil
		},
		Fallback: rg.counted.wrap(extractive.New())}, wnc, wst)
	if err != nil {
		return err
	}
	rg.stops = append(rg.stops, pool.Start(ctx))
	return nil
}

// waitConsumer returns the trigger's consumer on CHAT once the trigger made it.
func waitConsumer(ctx context.Context, nc *nats.Conn, stream, name string) (natsjs.Consumer, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := js.Consumer(ctx, stream, name)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, natsjs.ErrConsumerNotFound) || time.Now().After(deadline) {
			return nil, fmt.Errorf("the trigger's consumer %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (rg *rig) close() {
	for i := len(rg.stops) - 1; i >= 0; i-- {
		_ = rg.stops[i]()
	}
	if rg.dropNS != nil {
		rg.dropNS()
	}
	for _, nc := range rg.conns {
		nc.Close()
	}
	if rg.shutdown != nil {
		rg.shutdown()
	}
	rg.stops, rg.conns, rg.dropNS, rg.shutdown = nil, nil, nil, nil
}

// caughtUp waits (at most TurnWait) until the trigger has handled every message up
// to seq, so a compaction the message calls for is already pending when the turn
// reads its context.
func (rg *rig) caughtUp(ctx context.Context, seq uint64) error {
	deadline := time.Now().Add(rg.cfg.TurnWait)
	pause := time.Millisecond
	for {
		ci, err := rg.consumer.Info(ctx)
		if err != nil {
			return err
		}
		if ci.AckFloor.Stream >= seq || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// settle reads the final context once the conversation has settled: the trigger has
// handled its last message, no compaction is pending, and the context is under the
// threshold, or the last compaction at it was declined (at most TurnWait). A result
// can be followed by one more request while the context is still over budget, and the
// trigger asks again shortly after a refused request: neither is missed.
func (rg *rig) settle(ctx context.Context, conv string, seq uint64, threshold int) (*pipeline.Context, error) {
	if err := rg.caughtUp(ctx, seq); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(rg.cfg.TurnWait)
	var idleSince time.Time
	for {
		cx, err := rg.client.Context(ctx, conv, pipeline.AtLeastSeq(seq), pipeline.WaitPending(max(time.Until(deadline), time.Millisecond)))
		if err != nil {
			return nil, fmt.Errorf("read the final context: %w", err)
		}
		if cx.Tokens < threshold || time.Now().After(deadline) {
			return cx, nil
		}
		req, err := rg.store.Queue().Pending(ctx, conv)
		if err != nil {
			return nil, err
		}
		if req != nil {
			idleSince = time.Time{}
		} else {
			v, err := rg.client.Result(ctx, conv)
			if err != nil {
				return nil, err
			}
			// Declined at the end, or nothing asked for a while (the trigger asks again
			// within its retry delay; after a failed compaction it backs off): settled.
			if v != nil && v.DeclinedAtSeq >= seq {
				return cx, nil
			}
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > settleQuiet {
				return cx, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// settleQuiet is how long no compaction may be pending for a conversation over its
// threshold before its final context is read anyway: several times the trigger's
// retry delay (100 ms here).
const settleQuiet = time.Second

// conversationID names the replay of file i with arm a.
func conversationID(a arm, i int) string {
	if a.rung == "" {
		return fmt.Sprintf("eval-%s-%05d", a.strategy, i)
	}
	return fmt.Sprintf("eval-%s-%s-%05d", a.strategy, a.rung, i)
}

// replay publishes one conversation message by message, reading the context before
// every model turn, and scores the final context.
func (rg *rig) replay(ctx context.Context, c Conversation, index int, a arm) (ConvResult, error) {
	conv := conversationID(a, index)
	res := ConvResult{File: c.Name, Strategy: a.strategy, Rungs: a.rung, Conversation: conv}
	data, err := policy.EncodeConversation(rg.cfg.layer(a))
	if err != nil {
		return res, err
	}
	if err := rg.store.Policies().Put(ctx, conv, data, 0); err != nil {
		return res, fmt.Errorf("set the policy: %w", err)
	}
	msgs, planted := plant(c.Messages, c.Name, rg.cfg.Plant)
	truth := Extract(c.Messages)
	pinned, last, whole, err := rg.publishTurns(ctx, conv, msgs, a, &res)
	if err != nil {
		return res, err
	}
	res.Messages = len(msgs)
	cx, err := rg.settle(ctx, conv, last, rg.threshold[a])
	if err != nil {
		return res, err
	}
	res.BrokenToolPairs += BrokenToolPairs(cx.Messages)
	res.MissingPinned += MissingPinned(cx.Seqs, pinned)
	res.Skipped += len(cx.Skipped)
	res.FinalTokens, res.HistoryTokens = cx.Tokens, whole
	err = rg.scoreFinal(ctx, c, cx, planted, truth, &res)
	return res, err
}

// publishTurns publishes msgs to conv one by one, reading the context before each
// assistant message as the agent behind the proxy would be sent it (the proxy's swap
// rule) and counting into res what it held and what a prompt cache makes of it. It
// returns the sequences of the pinned messages, the last sequence and the tokens of
// the whole history.
func (rg *rig) publishTurns(ctx context.Context, conv string, msgs []schemas.Message, a arm, res *ConvResult) (pinned []uint64, last uint64, whole int, err error) {
	rule := swapRule{ttl: rg.cfg.CacheTTL, gap: rg.cfg.TurnGap, stale: rg.stale[a]}
	var sent, baseline prefixCache
	var history []schemas.Message
	for i := range msgs {
		m := msgs[i]
		if m.Role == schemas.RoleAssistant && last > 0 {
			if err := rg.caughtUp(ctx, last); err != nil {
				return pinned, last, whole, err
			}
			cx, expired, err := rg.turn(ctx, conv, last, &rule)
			if err != nil {
				return pinned, last, whole, fmt.Errorf("read the context before message %d: %w", i+1, err)
			}
			if err := sent.turn(cx.Messages, cx.Tokens, expired); err != nil {
				return pinned, last, whole, err
			}
			if err := baseline.turn(history, whole, expired); err != nil {
				return pinned, last, whole, err
			}
			res.ModelTurns++
			res.TokensWith += int64(cx.Tokens)
			res.TokensWithout += int64(whole)
			res.BrokenToolPairs += BrokenToolPairs(cx.Messages)
			res.MissingPinned += MissingPinned(cx.Seqs, pinned)
			res.Skipped += len(cx.Skipped)
		}
		seq, err := rg.client.Publish(ctx, conv, m)
		if err != nil {
			return pinned, last, whole, fmt.Errorf("publish message %d: %w", i+1, err)
		}
		if (i == 0 && m.Role == schemas.RoleSystem) || m.Pinned() {
			pinned = append(pinned, seq)
		}
		last = seq
		stripped := m.StripMetadata()
		whole += tokens.Message(&stripped)
		history = append(history, stripped)
	}
	res.Cache, res.CacheWithout = sent.t, baseline.t
	return pinned, last, whole, nil
}

// turn reads the context a model turn is sent through the proxy, by its swap rule: with
// the value sent last while the cache likely holds it, the newest when that context
// outgrows the threshold or the cache has likely expired. Each read waits for a
// compaction pending (so a replay does not depend on the machine's speed). It reports
// whether the cache had likely expired since the turn before.
func (rg *rig) turn(ctx context.Context, conv string, last uint64, rule *swapRule) (*pipeline.Context, bool, error) {
	earlier := rule.earlier()
	expired := rule.expired()
	read := func(v *schemas.Result) (*pipeline.Context, error) {
		return rg.client.Context(ctx, conv, pipeline.AtLeastSeq(last), pipeline.WaitPending(rg.cfg.TurnWait), pipeline.Value(v))
	}
	cx, err := read(earlier)
	if err != nil {
		return nil, expired, err
	}
	if rule.swap(earlier, cx.Generation, cx.Tokens) {
		if cx, err = read(nil); err != nil {
			return nil, expired, err
		}
	}
	var live *schemas.Result
	if cx.Generation > 0 && (earlier == nil || earlier.Generation != cx.Generation) {
		if live, err = rg.client.Result(ctx, conv); err != nil {
			return nil, expired, err
		}
	}
	rule.keep(cx.Generation, earlier, live)
	return cx, expired, nil
}

// scoreFinal scores the final context cx of c's replay into res: compactions, what
// survives of the paths, commands and facts (planted and listed), the summarizer's
// tokens and, with a prober, the probes' answers.
func (rg *rig) scoreFinal(ctx context.Context, c Conversation, cx *pipeline.Context, planted []string, truth Truth, res *ConvResult) error {
	conv := res.Conversation
	v, err := rg.client.Result(ctx, conv)
	if err != nil {
		return fmt.Errorf("read the result: %w", err)
	}
	evidence := ""
	if v != nil {
		res.Compactions = int(v.Generation)
		res.Fallback = v.Generation > 0 && v.Fallback
		evidence = v.EvidenceText
	}
	res.EvidenceTokens = 0
	if evidence != "" {
		res.EvidenceTokens = tokens.Text(evidence)
	}
	withText := ContextText(cx.Messages)
	bare := WithoutEvidence(cx.Messages, cx.Seqs, evidence)
	withoutText := ContextText(bare)
	consText := ContextText(ByConstruction(cx.Messages, cx.Seqs, evidence))
	facts := append(slices.Clone(planted), SurvivorsFold(rg.cfg.Facts, ContextText(c.Messages))...)
	res.Paths = score(truth.Paths, withText, withoutText, consText, Survivors)
	res.Commands = score(truth.Commands, withText, withoutText, consText, Survivors)
	res.Facts = score(facts, withText, withoutText, consText, SurvivorsFold)
	sin, sout, calls := rg.counted.of(conv)
	res.SummarizerIn, res.SummarizerOut, res.SummarizerCalls = sin, sout, calls
	if rg.cfg.Prober != nil {
		// A failed probe is reported with the conversation; it does not stop the run.
		if p, err := rg.cfg.Prober.Probe(ctx, bare, truth, c.Name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.ProbeError = err.Error()
		} else {
			res.Probes = &p
		}
	}
	return nil
}

// score counts the items that survive in the final context: with and without the
// evidence section, and by construction (the summary's own text removed); it names up
// to 10 lost ones.
func score(items []string, with, without, byConstruction string, survivors func([]string, string) []string) Count {
	kept := survivors(items, with)
	c := Count{Total: len(items), Kept: len(kept), KeptWithoutEvidence: len(survivors(items, without)),
		KeptByConstruction: len(survivors(items, byConstruction))}
	for _, it := range items {
		if len(c.Lost) == 10 {
			break
		}
		if !slices.Contains(kept, it) {
			c.Lost = append(c.Lost, it)
		}
	}
	return c
}

// plant inserts n unique synthetic facts as user messages right after the first user
// message (or at the start), and returns the messages and the facts.
func plant(msgs []schemas.Message, name string, n int) ([]schemas.Message, []string) {
	if n == 0 {
		return msgs, nil
	}
	at := 0
	for i := range msgs {
		if msgs[i].Role == schemas.RoleUser {
			at = i + 1
			break
		}
	}
	facts := make([]string, n)
	added := make([]schemas.Message, n)
	for k := range n {
		h := fnv.New32a()
		fmt.Fprintf(h, "%s/%d", name, k)
		facts[k] = fmt.Sprintf("PLANTED-%08X", h.Sum32())
		added[k] = schemas.Message{Role: schemas.RoleUser,
			Content: schemas.Text(fmt.Sprintf("Please remember for later: the reference code of item %d is %s.", k+1, facts[k]))}
	}
	return slices.Concat(msgs[:at], added, msgs[at:]), facts
}

// counting counts each conversation's summarizer calls and tokens: the usage the LLM
// reported, else an estimate (the shared token estimate of what it read and wrote,
// plus summarizer.PromptOverhead for its prompt).
type counting struct {
	mu  sync.Mutex
	per map[string]*tally
}

type tally struct {
	in, out int64
	calls   int
}

func newCounting() *counting { return &counting{per: map[string]*tally{}} }

func (c *counting) of(conv string) (in, out int64, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.per[conv]; t != nil {
		return t.in, t.out, t.calls
	}
	return 0, 0, 0
}

func (c *counting) add(conv string, in summary.Input, out summary.Output) {
	var ti, to int64
	if out.Usage != nil && (out.Usage.PromptTokens > 0 || out.Usage.CompletionTokens > 0) {
		ti, to = int64(out.Usage.PromptTokens), int64(out.Usage.CompletionTokens)
	} else {
		ti = int64(summarizer.PromptOverhead + tokens.Text(in.PreviousSummary) + tokens.Text(in.SystemPrompt) +
			tokens.Text(in.Instructions) + tokens.Messages(in.Messages))
		to = int64(tokens.Text(out.Summary))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.per[conv]
	if t == nil {
		t = &tally{}
		c.per[conv] = t
	}
	t.in, t.out, t.calls = t.in+ti, t.out+to, t.calls+1
}

// wrap counts sum's calls; a summarizer that sizes its own requests keeps doing so,
// and an LLM summarizer keeps its endpoint and its compact form, so an eval against a
// small-window endpoint learns its window and shortens its prompt as a worker does.
func (c *counting) wrap(sum summary.Summarizer) summary.Summarizer {
	cs := countedSummarizer{next: sum, c: c}
	rs, sized := sum.(interface{ RequestTokens(summary.Input) int })
	if l, ok := sum.(llmForm); ok && sized {
		return llmSummarizer{sizedSummarizer: sizedSummarizer{countedSummarizer: cs, sizer: rs}, llm: l, c: c}
	}
	if sized {
		return sizedSummarizer{countedSummarizer: cs, sizer: rs}
	}
	return cs
}

// llmForm is what the worker reads of an LLM summarizer beside Summarize.
type llmForm interface {
	Compact() summary.Summarizer
	Endpoint() (baseURL, model string)
}

type llmSummarizer struct {
	sizedSummarizer
	llm llmForm
	c   *counting
}

func (s llmSummarizer) Compact() summary.Summarizer       { return s.c.wrap(s.llm.Compact()) }
func (s llmSummarizer) Endpoint() (baseURL, model string) { return s.llm.Endpoint() }

type countedSummarizer struct {
	next summary.Summarizer
	c    *counting
}

func (s countedSummarizer) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	out, err := s.next.Summarize(ctx, in)
	if err == nil {
		s.c.add(in.Conversation, in, out)
	}
	return out, err
}

type sizedSummarizer struct {
	countedSummarizer
	sizer interface{ RequestTokens(summary.Input) int }
}

func (s sizedSummarizer) RequestTokens(in summary.Input) int { return s.sizer.RequestTokens(in) }

// namespaced is the jetstream config with every name of the contract prefixed with ns.
func namespaced(ns string) jetstream.Config {
	cfg := jetstream.DefaultConfig()
	cfg.Names = jetstream.NamespacedNames(ns)
	return cfg
}

// deleteStreams deletes the named streams (buckets are streams too), those of the run's
// namespace: exactly these, so nothing else on a shared server is touched. One that was
// never made (a failed provision) is not found, which is fine.
func deleteStreams(js natsjs.JetStream, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range names {
		_ = js.DeleteStream(ctx, n)
	}
}
