package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/bench"
	"github.com/compactor/compactor/internal/eval"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/split"
	"github.com/compactor/compactor/summarizer/summary"
)

// evalCommand replays conversations through compaction and reports what survives
// (package eval): progress on stderr, the table (or --json) on stdout.
var evalCommand = &command{
	name: "eval", args: "[DIR|FILE...]", interruptible: true,
	summary: "replay conversations (JSONL) through compaction and report tokens and what survives, per strategy",
	about: `Each conversation (one OpenAI chat message a line; a directory gives its *.jsonl) is
replayed with each strategy in a conversation of its own (with no argument, inside a
clone of the repository: the transcripts of examples/transcripts): published message by message,
its context read before every assistant message as an agent would, and its final
context scored against the raw history: distinct paths the agent touched, commands it
ran, planted (--plant) and listed (--fact, --facts) facts, with and without the
evidence section, and by construction (the summary's own text removed: what survives
whatever the summarizer writes); tool pairs broken and pinned messages missing (must be 0: the run
fails otherwise). Runs on an embedded server unless --nats-url names one. With an LLM
endpoint (COMPACTOR_LLM_BASE_URL or OPENAI_BASE_URL, and a key) the LLM summarizes and
the probes ask it which files were changed, what was decided and what the user asked
for (and --probes FILE's questions); without one the extractive summarizer runs, and one
line says the probes are skipped. --rungs all compares summary, mask and mask-then-summary:
tokens sent by the proxy's cache-aware swap rule, how often the forwarded prefix stayed
byte-identical, what a prompt cache reads and writes, summarizer calls, and with a price
table (--prices or COMPACTOR_PRICES) the cost with and without a cache (docs/evaluation.md).
Default strategies: ` + strings.Join(eval.DefaultStrategies, ", ") + `.`,
	define: func(fs *flagSet) func(ctx context.Context, c *call) error {
		f := defineEvalFlags(fs)
		return func(ctx context.Context, c *call) error { return runEval(ctx, c, f) }
	},
}

// evalFlags are the eval command's flags, once parsed.
type evalFlags struct {
	strategies, facts listValue
	rungs, probes     *string
	prices, model     *string
	cacheTTL          setDuration
	turnGap           *time.Duration
	window            *int
	asJSON, markdown  *bool
	factsFile         *string
	plant             *int
	concurrency       *int
	url               *string
	evidence          *string
	turnWait          *time.Duration
}

// defineEvalFlags adds the eval command's flags to fs.
func defineEvalFlags(fs *flagSet) *evalFlags {
	f := &evalFlags{}
	fs.add(&f.strategies, "strategy", "", "S", "a strategy to replay with (repeatable; default: "+strings.Join(eval.DefaultStrategies, ", ")+")", "")
	f.rungs = fs.String("rungs", "", "LIST", "compare these rungs (summary, mask, mask-then-summary, comma-separated, or all), each with every strategy (default strategy: the policy's)")
	f.probes = fs.String("probes", "", "FILE", "more probe questions in the four dimensions (recall, artifact, continuation, decision; docs/evaluation.md, examples/probes.json), asked when an LLM endpoint is configured")
	f.prices = fs.String("prices", "", "FILE", "price the tokens with this price table (default COMPACTOR_PRICES; docs/savings.md); without one, tokens and ratios only")
	f.model = fs.String("model", "", "NAME", "the agent's model whose prices the sent tokens take (default: the price table's default)")
	fs.add(&f.cacheTTL, "cache-ttl", "", "D", "how long the provider's prompt cache lives, for the proxy's swap rule and the cache figures; 0: no prompt cache (default COMPACTOR_PROXY_CACHE_TTL, 5m)", "")
	f.turnGap = fs.Duration("turn-gap", "D", "simulated time between two model turns (default 0: every turn within the cache's life)")
	f.window = fs.Int("window", "N", fmt.Sprintf("the context window W in tokens (default %d)", eval.DefaultWindow))
	f.asJSON = fs.JSON()
	f.markdown = fs.Bool("markdown", "", "print the tables as Markdown (as in docs/evaluation.md) instead of aligned text")
	fs.add(&f.facts, "fact", "", "TEXT", "a fact to look for in the final contexts (repeatable)", "")
	f.factsFile = fs.String("facts", "", "FILE", "facts to look for, one a line")
	f.plant = fs.Int("plant", "N", "plant N unique synthetic facts as user messages early in each conversation")
	f.concurrency = fs.Int("concurrency", "N", "conversations replayed at once (default 8)")
	f.url = fs.String("nats-url", "", "URL", "replay on this NATS server (as a user that may create streams; COMPACTOR_NATS_CREDS and the other auth variables apply), in a namespace of its own deleted afterwards (default: an embedded server)")
	f.evidence = fs.String("evidence-budget", "", "F", "set the policy key evidence_budget of every conversation (fraction of W; 0 turns evidence off); unset by default")
	f.turnWait = fs.Duration("turn-wait", "D", "longest wait of one model turn for a pending compaction (default 30s)")
	return f
}

// runEval checks the flags, finds the conversations, configures the replay, runs it
// and prints its report.
func runEval(ctx context.Context, c *call, f *evalFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	files, err := evalFiles(c.args)
	if err != nil {
		return err
	}
	cfg, err := evalConfig(c, f, files)
	if err != nil {
		return err
	}
	nStrategies := len(f.strategies)
	switch {
	case nStrategies == 0 && len(cfg.Rungs) > 0:
		nStrategies = 1
	case nStrategies == 0:
		nStrategies = len(eval.DefaultStrategies)
	}
	arms := nStrategies * max(1, len(cfg.Rungs))
	what := fmt.Sprintf("%d strategies", nStrategies)
	if len(cfg.Rungs) > 0 {
		what = fmt.Sprintf("%d strategies × %d rungs", nStrategies, len(cfg.Rungs))
	}
	fmt.Fprintf(c.std.err, "eval: %d conversations × %s; summarizer: %s\n", len(files), what, summarizerName(cfg))
	if cfg.Prober == nil {
		which := "probes"
		if *f.probes != "" {
			which = "probes (the built-in ones and those of " + *f.probes + ")"
		}
		fmt.Fprintf(c.std.err, "eval: %s skipped: no LLM endpoint configured (COMPACTOR_LLM_BASE_URL, OPENAI_BASE_URL or an API key)\n", which)
	}
	if bar := newProgress(c.std.err, c.lookup, "eval", "replays", int64(len(files)*arms)); bar != nil {
		defer bar.finish()
		cfg.Progress = func(done, total int) { bar.set(int64(done), fmt.Sprintf("%d of %d replays", done, total)) }
	}
	rep, err := eval.Run(ctx, cfg)
	if err != nil {
		switch {
		case errors.Is(err, eval.ErrConfig), errors.Is(err, eval.ErrNoInput):
			return usagef("%v", err)
		}
		return err
	}
	rep.Command = "compactor eval " + strings.Join(redactArgs(c.raw), " ")
	switch {
	case *f.asJSON:
		err = rep.WriteJSON(c.std.out)
	case *f.markdown:
		err = rep.WriteMarkdown(c.std.out)
	default:
		err = rep.WriteTable(c.std.out)
	}
	if err != nil {
		return err
	}
	if n := rep.Broken(); n > 0 {
		return fmt.Errorf("invariant broken: %d tool pair(s) broken or pinned message(s) missing in the contexts read", n)
	}
	return nil
}

// check checks the flags' values (a usage error for the first wrong one) and adds
// the facts of --facts to those of --fact.
func (f *evalFlags) check() error {
	for _, s := range f.strategies {
		if !slices.Contains(split.Strategies, s) {
			return usagef("--strategy: unknown strategy %q (known: %s)", s, strings.Join(split.Strategies, ", "))
		}
	}
	if *f.rungs != "" {
		if _, err := parseRungs(*f.rungs); err != nil {
			return usagef("--rungs: %v", err)
		}
	}
	if *f.probes != "" {
		if _, err := eval.ReadProbes(*f.probes); err != nil {
			return usagef("--probes: %v", err)
		}
	}
	if f.cacheTTL.d < 0 || *f.turnGap < 0 {
		return usagef("--cache-ttl and --turn-gap must not be negative")
	}
	if *f.window != 0 && *f.window < 1000 {
		return usagef("--window: must be at least 1000 tokens, got %d", *f.window)
	}
	if *f.plant < 0 || *f.plant > 100 {
		return usagef("--plant: must be 0 to 100, got %d", *f.plant)
	}
	if *f.concurrency < 0 || *f.concurrency > 256 {
		return usagef("--concurrency: must be 1 to 256, got %d", *f.concurrency)
	}
	if *f.evidence != "" {
		if v, err := strconv.ParseFloat(*f.evidence, 64); err != nil || v < 0 || v >= 1 {
			return usagef("--evidence-budget: must be a fraction from 0 to below 1, got %q", *f.evidence)
		}
	}
	if *f.factsFile != "" {
		more, err := readFacts(*f.factsFile)
		if err != nil {
			return usagef("--facts: %v", err)
		}
		f.facts = append(f.facts, more...)
	}
	return nil
}

// evalFiles lists the conversation files the arguments name (with none, the
// transcripts the repository ships, when run inside a clone).
func evalFiles(args []string) ([]string, error) {
	if len(args) == 0 {
		// The transcripts the repository ships, when run inside a clone.
		if d := bench.DefaultCorpus(); d != "" {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				args = []string{d}
			}
		}
	}
	files, err := eval.Expand(args)
	if err != nil {
		if errors.Is(err, eval.ErrNoInput) {
			return nil, usagef("%v", err)
		}
		return nil, err
	}
	return files, nil
}

// evalConfig configures the replay of files: the flags, the environment's policy
// resolver and logger, and the LLM summarizer and prober when an endpoint is set.
func evalConfig(c *call, f *evalFlags, files []string) (eval.Config, error) {
	env, err := c.loadEnv()
	if err != nil {
		return eval.Config{}, err
	}
	r, err := env.resolver()
	if err != nil {
		return eval.Config{}, newError(errConfig, err, "%v", err)
	}
	// Errors only (a dead letter, a broken trigger): the report says the rest.
	log := newLogger(env, c.std.err).Level(zerolog.ErrorLevel)
	cfg := eval.Config{Files: files, Strategies: f.strategies, Window: *f.window, Facts: f.facts, Plant: *f.plant,
		Concurrency: *f.concurrency, EvidenceBudget: *f.evidence, NATSURL: *f.url, Resolver: r, TurnWait: *f.turnWait, Logger: log}
	if *f.rungs != "" {
		cfg.Rungs, _ = parseRungs(*f.rungs)
	}
	cfg.CacheTTL, cfg.TurnGap, cfg.Model = env.ProxyCacheTTL, *f.turnGap, *f.model
	if f.cacheTTL.set {
		cfg.CacheTTL = f.cacheTTL.d
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = eval.NoCache // as the proxy takes a TTL of 0
	}
	if path := cmp.Or(*f.prices, env.Prices); path != "" {
		if cfg.Prices, err = savings.ReadPrices(path); err != nil {
			return eval.Config{}, usagef("--prices: %v", err)
		}
		if cfg.Prices.For(cfg.Model) == nil {
			return eval.Config{}, usagef("--model: the price table prices no model %q and has no default: name a model it prices with --model, or add a \"default\" entry", cfg.Model)
		}
	}
	if *f.url != "" {
		// The named server authenticates as the commands' connections do.
		cfg.NATSOptions = []nats.Option{env.natsAuth().Option()}
	}
	fallback := extractive.New()
	sums := node.NewSummarizers(node.Config{Resolver: r, Profiles: env.Profiles, Lookup: env.lookup, Logger: log}, fallback)
	sum, err := sums.For(r.Base())
	if err != nil {
		return eval.Config{}, newError(errConfig, err, "%v", err)
	}
	if sum != summary.Summarizer(fallback) {
		base, key := sums.EndpointAndKey(r.Base())
		if base == "" {
			base = node.DefaultEndpoint
		}
		cfg.Summarizers = sums.For
		cfg.SummarizerName = fmt.Sprintf("LLM %s at %s", r.Base().LLMModel, policy.RedactURL(base))
		cfg.Prober = eval.NewProber(base, key, r.Base().LLMModel)
		cfg.Prober.MaxCompletionTokens = r.Base().LLMMaxTokensField == "max_completion_tokens"
		if *f.probes != "" {
			if cfg.Prober.Questions, err = eval.ReadProbes(*f.probes); err != nil {
				return eval.Config{}, usagef("--probes: %v", err)
			}
		}
	}
	return cfg, nil
}

func summarizerName(cfg eval.Config) string {
	if cfg.SummarizerName == "" {
		return "extractive (no LLM endpoint configured: COMPACTOR_LLM_BASE_URL, OPENAI_BASE_URL or an API key)"
	}
	return cfg.SummarizerName
}

// parseRungs reads --rungs: values of the policy key rungs, comma-separated, or all.
func parseRungs(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(policy.Rungs), nil
	}
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		v = strings.TrimSpace(v)
		if !slices.Contains(policy.Rungs, v) {
			return nil, fmt.Errorf("unknown rungs %q (known: %s, or all)", v, strings.Join(policy.Rungs, ", "))
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("%q named twice", v)
		}
		out = append(out, v)
	}
	return out, nil
}

// listValue is a repeatable flag.
type listValue []string

func (l *listValue) Set(s string) error { *l = append(*l, s); return nil }
func (l *listValue) String() string     { return strings.Join(*l, ",") }

// readFacts reads one fact a line (blank lines and lines starting with # skipped).
func readFacts(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(out) == 1000 {
			return nil, fmt.Errorf("%s: more than 1000 facts", path)
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

// redactArgs returns args with the user info of every URL hidden (--nats-url
// nats://user:password@host, also as --nats-url=...): the report echoes its command
// line and is meant to be shared.
func redactArgs(args []string) []string {
	urlFlag := func(s string) bool { return strings.TrimLeft(s, "-") == "nats-url" }
	out := make([]string, len(args))
	for i, a := range args {
		name, value, isFlag := strings.Cut(a, "=")
		switch {
		case i > 0 && urlFlag(args[i-1]):
			out[i] = natsconn.RedactURL(a)
		case isFlag && urlFlag(name):
			out[i] = name + "=" + natsconn.RedactURL(value)
		case !strings.Contains(a, "://"):
			out[i] = a
		case isFlag && strings.HasPrefix(name, "-") && strings.Contains(value, "://"):
			out[i] = name + "=" + natsconn.RedactURL(value)
		default:
			out[i] = natsconn.RedactURL(a)
		}
	}
	return out
}
