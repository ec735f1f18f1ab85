package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/triggers"
)

// envPrefix starts every variable Compactor reads.
const envPrefix = "COMPACTOR"

// Env is every COMPACTOR_ variable; only cmd reads the environment.
type Env struct {
	NATSURL  string `envconfig:"NATS_URL" desc:"NATS server URL(s), comma separated; empty runs an embedded server (serve) or connects to COMPACTOR_LISTEN (other commands)"`
	Listen   string `envconfig:"LISTEN" default:"127.0.0.1:4222" desc:"host:port the embedded NATS server listens on"`
	DataDir  string `envconfig:"DATA_DIR" default:"compactor-data" desc:"where the embedded NATS server stores JetStream data"`
	Roles    string `envconfig:"ROLES" default:"trigger,worker" desc:"roles serve runs: trigger, worker, or both"`
	Replicas int    `envconfig:"REPLICAS" default:"1" desc:"replicas of every stream and bucket (3 in a cluster)"`

	ContextWindow    int     `envconfig:"CONTEXT_WINDOW" default:"128000" desc:"the agent model's context window W, in tokens"`
	Threshold        float64 `envconfig:"THRESHOLD" default:"0.75" desc:"compact when the context reaches this fraction of W"`
	Target           float64 `envconfig:"TARGET" default:"0.5" desc:"a compaction brings the context to at most this fraction of W"`
	HardLimit        float64 `envconfig:"HARD_LIMIT" default:"0.95" desc:"past this fraction of W with the LLM failing, a fallback summary keeps the bound"`
	MaxSummaryTokens int     `envconfig:"MAX_SUMMARY_TOKENS" default:"0" desc:"summary length cap; 0 = 2048, scaled up for windows over 128k, at most W/8"`

	Workers       int           `envconfig:"WORKERS" default:"4" desc:"summarizer jobs this process runs at once"`
	Strategy      string        `envconfig:"STRATEGY" default:"keep-last-n" desc:"split strategy"`
	KeepLastN     int           `envconfig:"KEEP_LAST_N" default:"20" desc:"messages keep-last-n keeps verbatim (within the tail budget)"`
	MinProgress   float64       `envconfig:"MIN_PROGRESS" default:"0.1" desc:"a result must shrink the context by this fraction or it is declined"`
	ToolOutputCap int           `envconfig:"TOOL_OUTPUT_CAP" default:"2000" desc:"tokens of each tool output the summarizer sees (head and tail kept)"`
	MaxAttempts   int           `envconfig:"MAX_ATTEMPTS" default:"5" desc:"deliveries of one request before it is dead-lettered"`
	BackoffBase   time.Duration `envconfig:"BACKOFF_BASE" default:"2s" desc:"delay before the second attempt of a failed compaction (doubles each attempt, ±25% jitter)"`
	BackoffMax    time.Duration `envconfig:"BACKOFF_MAX" default:"2m" desc:"longest delay between attempts"`
	SummaryRole   string        `envconfig:"SUMMARY_ROLE" default:"user" desc:"role of the summary message readers build: user, system or assistant"`
	RetryDelay    time.Duration `envconfig:"RETRY_DELAY" default:"5s" desc:"trigger: wait before asking again when a request is already pending"`

	LLMBaseURL string        `envconfig:"LLM_BASE_URL" desc:"OpenAI-compatible endpoint (falls back to OPENAI_BASE_URL); empty with no key = extractive summaries, no LLM"`
	LLMAPIKey  string        `envconfig:"LLM_API_KEY" desc:"API key (falls back to OPENAI_API_KEY); never logged"`
	LLMModel   string        `envconfig:"LLM_MODEL" default:"gpt-4o-mini" desc:"summarizer model"`
	LLMTimeout time.Duration `envconfig:"LLM_TIMEOUT" default:"2m" desc:"timeout of one summarization call"`

	ChatMaxAge   time.Duration `envconfig:"CHAT_MAX_AGE" default:"0" desc:"how long CHAT keeps raw history; 0 = forever"`
	DrainTimeout time.Duration `envconfig:"DRAIN_TIMEOUT" default:"3m" desc:"on SIGINT/SIGTERM, how long in-flight work may take to finish"`
	LogLevel     string        `envconfig:"LOG_LEVEL" default:"info" desc:"trace, debug, info, warn or error"`
	LogFormat    string        `envconfig:"LOG_FORMAT" default:"json" desc:"json (one line per event) or console"`
}

// loadEnv reads and checks every variable; an error names the variable at fault.
func loadEnv(lookup func(string) (string, bool)) (Env, error) {
	var e Env
	if err := envconfig.Process(envPrefix, &e); err != nil {
		return e, fmt.Errorf("configuration: %w", err)
	}
	if e.LLMBaseURL == "" {
		e.LLMBaseURL, _ = lookup("OPENAI_BASE_URL")
	}
	if e.LLMAPIKey == "" {
		e.LLMAPIKey, _ = lookup("OPENAI_API_KEY")
	}
	return e, e.validate()
}

func bad(name, format string, args ...any) error {
	return fmt.Errorf("configuration: %s_%s %s", envPrefix, name, fmt.Sprintf(format, args...))
}

func (e Env) validate() error {
	roles, err := e.roles()
	if err != nil {
		return err
	}
	_ = roles
	if e.Replicas < 1 || e.Replicas > 5 {
		return bad("REPLICAS", "must be 1 to 5, got %d", e.Replicas)
	}
	checks := []struct {
		ok   bool
		name string
		msg  string
	}{
		{e.ContextWindow >= 1000, "CONTEXT_WINDOW", fmt.Sprintf("must be at least 1000 tokens, got %d", e.ContextWindow)},
		{e.Target > 0 && e.Target < 1, "TARGET", fmt.Sprintf("must be between 0 and 1, got %g", e.Target)},
		{e.Threshold > e.Target && e.Threshold < 1, "THRESHOLD", fmt.Sprintf("must be above COMPACTOR_TARGET (%g) and below 1, got %g", e.Target, e.Threshold)},
		{e.HardLimit > e.Threshold && e.HardLimit <= 1, "HARD_LIMIT", fmt.Sprintf("must be above COMPACTOR_THRESHOLD (%g) and at most 1, got %g", e.Threshold, e.HardLimit)},
		{e.MaxSummaryTokens >= 0 && e.MaxSummaryTokens < e.budget().TargetTokens(), "MAX_SUMMARY_TOKENS",
			fmt.Sprintf("must be 0 (scaled) or below the target of %d tokens, got %d", e.budget().TargetTokens(), e.MaxSummaryTokens)},
		{e.Workers >= 1, "WORKERS", "must be at least 1"},
		{e.KeepLastN >= 1, "KEEP_LAST_N", "must be at least 1"},
		{e.MinProgress >= 0 && e.MinProgress < 1, "MIN_PROGRESS", "must be in [0, 1)"},
		{e.ToolOutputCap >= 0, "TOOL_OUTPUT_CAP", "must not be negative"},
		{e.MaxAttempts >= 1, "MAX_ATTEMPTS", "must be at least 1"},
		{e.RetryDelay > 0, "RETRY_DELAY", "must be positive"},
		{e.BackoffBase > 0, "BACKOFF_BASE", "must be positive"},
		{e.BackoffMax >= e.BackoffBase, "BACKOFF_MAX", "must be at least COMPACTOR_BACKOFF_BASE"},
		{e.LLMTimeout > 0, "LLM_TIMEOUT", "must be positive"},
		{e.ChatMaxAge >= 0, "CHAT_MAX_AGE", "must not be negative"},
		{e.DrainTimeout > 0, "DRAIN_TIMEOUT", "must be positive"},
		{e.Strategy == "keep-last-n", "STRATEGY", "must be keep-last-n (the only strategy so far)"},
		{e.SummaryRole == "user" || e.SummaryRole == "system" || e.SummaryRole == "assistant", "SUMMARY_ROLE", "must be user, system or assistant"},
		{e.LogFormat == "json" || e.LogFormat == "console", "LOG_FORMAT", "must be json or console"},
		{strings.TrimSpace(e.LLMModel) != "", "LLM_MODEL", "must not be empty"},
	}
	for _, c := range checks {
		if !c.ok {
			return bad(c.name, "%s", c.msg)
		}
	}
	if err := e.budget().Validate(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if _, err := parseLevel(e.LogLevel); err != nil {
		return bad("LOG_LEVEL", "%v", err)
	}
	return nil
}

type roles struct{ trigger, worker bool }

func (e Env) roles() (roles, error) {
	var r roles
	for _, s := range strings.Split(e.Roles, ",") {
		switch strings.TrimSpace(s) {
		case "trigger":
			r.trigger = true
		case "worker":
			r.worker = true
		case "":
		default:
			return r, bad("ROLES", "has unknown role %q (known: trigger, worker)", s)
		}
	}
	if !r.trigger && !r.worker {
		return r, bad("ROLES", "names no role (use trigger, worker or both)")
	}
	return r, nil
}

func (e Env) budget() budget.Budget {
	return budget.Budget{ContextWindow: e.ContextWindow, Threshold: e.Threshold, Target: e.Target,
		HardLimit: e.HardLimit, MaxSummaryTokens: e.MaxSummaryTokens}
}

func (e Env) jetstream() jetstream.Config {
	c := jetstream.DefaultConfig()
	c.Replicas = e.Replicas
	c.ChatMaxAge = e.ChatMaxAge
	return c
}

func (e Env) summarizer() summarizer.Config {
	c := summarizer.DefaultConfig()
	c.Workers = e.Workers
	c.Budget = e.budget()
	c.Strategy = e.Strategy
	c.KeepLastN = e.KeepLastN
	c.MinProgress = e.MinProgress
	c.ToolOutputCap = e.ToolOutputCap
	c.MaxAttempts = e.MaxAttempts
	c.BackoffBase = e.BackoffBase
	c.BackoffMax = e.BackoffMax
	c.SummaryRole = schemas.Role(e.SummaryRole)
	return c
}

func (e Env) triggers() triggers.Config {
	c := triggers.DefaultConfig()
	c.Budget = e.budget()
	c.RetryDelay = e.RetryDelay
	return c
}

// usesLLM reports whether an endpoint or key is configured.
func (e Env) usesLLM() bool { return e.LLMBaseURL != "" || e.LLMAPIKey != "" }

// printEnvHelp lists every variable with its default.
func printEnvHelp(w io.Writer) error {
	var e Env
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	if err := envconfig.Usagef(envPrefix, &e, tw, "{{range .}}  {{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}"); err != nil {
		return err
	}
	fmt.Fprintf(tw, "  OPENAI_BASE_URL, OPENAI_API_KEY\t\tused when the COMPACTOR_LLM_ ones are empty\n")
	return tw.Flush()
}
