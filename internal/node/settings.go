package node

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/schemas/tokens/bpe"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/split"
	"github.com/compactor/compactor/triggers"
)

// Settings are what an operator tells one process, as plain values: its roles, the
// environment tier of the policy keys and the profiles, and the knobs of the roles and
// the streams. `compactor serve` reads them from its COMPACTOR_ variables (whose
// defaults the command line documents); Config turns them into the configuration of a
// node, the same way for serve and for the tests that build a node of the same
// settings.
type Settings struct {
	// Roles are the roles to run, comma separated: trigger, worker, api.
	Roles string
	// Policy is the environment tier of the policy keys, by key; Profiles the profiles
	// file (nil: none); Lookup reads the variables that hold LLM API keys (nil: none).
	Policy   policy.Layer
	Profiles *policy.File
	Lookup   func(string) (string, bool)

	Workers, MaxAttempts    int
	BackoffBase, BackoffMax time.Duration
	RetryDelay              time.Duration
	// AckWait is how long a request may go without a worker's heartbeat; heartbeats go
	// every third of it, and at least every 2 s.
	AckWait time.Duration
	// DrainTimeout bounds the drain at shutdown (see StopBudgets).
	DrainTimeout time.Duration

	Replicas, TriggerPartitions int
	ChatMaxAge, ForgetTTL       time.Duration
	// LedgerMaxAge and LedgerMaxBytes bound the savings ledger (0: jetstream's
	// defaults, as every process of a deployment must agree on them).
	LedgerMaxAge     time.Duration
	LedgerMaxBytes   int64
	TriggerHeartbeat time.Duration
	MaxObject        int64
	UpdateStreams    bool

	ViewListen, ViewToken string
	// ViewPrices is the price table of the view's savings pages (nil: tokens only).
	ViewPrices *savings.Prices
	// APIConcurrency bounds the requests each endpoint of the compactor service serves
	// at once (0: service.DefaultConfig's); one more is answered Busy.
	APIConcurrency int

	// Counters hands out the token counters; nil: a set of its own.
	Counters *Counters

	// Proxy, when set, adds the proxy role (COMPACTOR_PROXY_LISTEN). With Roles
	// empty, the proxy is the node's only role (compactor proxy).
	Proxy *proxy.Config

	// IDs, when set, hashes conversation ids in the spans the node exports
	// (COMPACTOR_LOG_HASH_IDS; the logger's writer hashes them in logs).
	IDs *telemetry.IDHasher
}

// ParseRoles reads a comma-separated list of roles. It names what it does not know,
// and refuses a list that names none.
func ParseRoles(list string) (Roles, error) {
	var r Roles
	for _, s := range strings.Split(list, ",") {
		switch strings.TrimSpace(s) {
		case "trigger":
			r.Trigger = true
		case "worker":
			r.Worker = true
		case "api":
			r.API = true
		case "":
		default:
			return r, fmt.Errorf("has unknown role %q (known: trigger, worker, api)", s)
		}
	}
	if !r.Trigger && !r.Worker && !r.API {
		return r, fmt.Errorf("names no role (use trigger, worker, api or several)")
	}
	return r, nil
}

// CheckStrategy is what the policy package cannot know of a conversation's settings:
// whether its strategy exists.
func CheckStrategy(s policy.Settings) error {
	if !slices.Contains(split.Strategies, s.Strategy) {
		return fmt.Errorf("strategy %q is unknown (known: %s)", s.Strategy, strings.Join(split.Strategies, ", "))
	}
	return nil
}

// Resolver is the policy resolver of s's environment tier and profiles.
func (s Settings) Resolver() (*policy.Resolver, error) {
	return policy.NewResolver(s.Policy, s.Profiles, CheckStrategy)
}

// JetStream is the configuration of the streams, buckets and consumers s provisions.
func (s Settings) JetStream() jetstream.Config {
	c := jetstream.DefaultConfig()
	c.Replicas = s.Replicas
	c.ChatMaxAge = s.ChatMaxAge
	c.MaxObjectSize = s.MaxObject
	c.WorkerAckWait = s.AckWait
	c.ForgetTTL = s.ForgetTTL
	if s.LedgerMaxAge > 0 {
		c.LedgerMaxAge = s.LedgerMaxAge
	}
	if s.LedgerMaxBytes > 0 {
		c.LedgerMaxBytes = s.LedgerMaxBytes
	}
	c.UpdateExisting = s.UpdateStreams
	c.TriggerPartitions = s.TriggerPartitions
	c.TriggerHeartbeat = s.TriggerHeartbeat
	return c
}

// Summarizer is the worker pool's configuration.
func (s Settings) Summarizer() summarizer.Config {
	c := summarizer.DefaultConfig()
	c.Workers = s.Workers
	c.MaxAttempts = s.MaxAttempts
	c.BackoffBase = s.BackoffBase
	c.BackoffMax = s.BackoffMax
	c.Counters = s.counters().Get
	// Three heartbeats per ack wait (one lost heartbeat does not cost a redelivery), and
	// never fewer than one per 2 s, so a consumer another process provisioned with a
	// shorter ack wait is kept alive too.
	c.InProgressEvery = min(max(s.AckWait/3, time.Second), summarizer.MaxInProgressEvery)
	c.DrainTimeout, c.HandBackTimeout = StopBudgets(s.DrainTimeout)
	return c
}

// Trigger is the trigger's configuration.
func (s Settings) Trigger() triggers.Config {
	c := triggers.DefaultConfig()
	c.RetryDelay = s.RetryDelay
	c.Counters = s.counters().Get
	// Like the workers, done before the process gives up.
	c.DrainTimeout, c.HandBackTimeout = StopBudgets(s.DrainTimeout)
	return c
}

// Config is the node of s, logging to log and observed by tel.
func (s Settings) Config(log zerolog.Logger, tel telemetry.Telemetry) (Config, error) {
	if s.Counters == nil {
		s.Counters = NewCounters() // one set, shared by every role of the node
	}
	r, err := s.Resolver()
	if err != nil {
		return Config{}, err
	}
	roles, err := s.roles()
	if err != nil {
		return Config{}, err
	}
	return Config{
		Roles:    roles,
		Resolver: r, Profiles: s.Profiles, Lookup: s.Lookup, Counters: s.counters().Get,
		Trigger: s.Trigger(), Summarizer: s.Summarizer(),
		ViewListen: s.ViewListen, ViewToken: s.ViewToken, ViewPrices: s.ViewPrices, Service: s.service(),
		Telemetry: tel, Logger: log, IDs: s.IDs, Proxy: s.Proxy,
	}, nil
}

// roles are the roles of s: those Roles names, and the proxy when s has its
// configuration (alone when Roles names none).
func (s Settings) roles() (Roles, error) {
	if s.Proxy != nil && strings.TrimSpace(s.Roles) == "" {
		return Roles{Proxy: true}, nil
	}
	roles, err := ParseRoles(s.Roles)
	if err != nil {
		return Roles{}, fmt.Errorf("roles %w", err)
	}
	roles.Proxy = s.Proxy != nil
	return roles, nil
}

// service is the compactor service's configuration: the defaults, with the settings'
// concurrency when one is given.
func (s Settings) service() *service.Config {
	cfg := service.DefaultConfig()
	if s.APIConcurrency > 0 {
		cfg.MaxConcurrentRequests = s.APIConcurrency
	}
	return &cfg
}

func (s Settings) counters() *Counters {
	if s.Counters == nil {
		return NewCounters()
	}
	return s.Counters
}

// StopBudgets splits the drain timeout d, after which the process gives up, between
// the drain of the pool and the trigger (their jobs and messages in hand finish) and
// what follows a drain that timed out (hand-back naks, tombstone checks, flushing
// acks, unpinning partitions), which can take seconds while a stream elects a leader:
// the last tenth of d, and at least 5 s (half of d when shorter). Two hand-back steps
// (a partition's flush, then its unpin) fit into that rest with time to spare, so
// every component returns before d.
func StopBudgets(d time.Duration) (drain, handBack time.Duration) {
	rest := max(d/10, min(5*time.Second, d/2))
	return d - rest, max(rest*2/5, 1) // never 0, which means the default
}

// Counters builds each token counter once and shares it among the roles.
type Counters struct {
	mu   sync.Mutex
	bpes map[string]*bpe.Counter
}

// NewCounters is an empty set.
func NewCounters() *Counters { return &Counters{bpes: map[string]*bpe.Counter{}} }

// Get returns the counter of a tokenizer name: chars4, or an exact BPE encoding.
func (cs *Counters) Get(name string) (tokens.Counter, error) {
	if name == "" || name == "chars4" {
		return tokens.Chars4{}, nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.bpes[name]; ok {
		return c, nil
	}
	c, err := bpe.New(name)
	if err != nil {
		return nil, err
	}
	cs.bpes[name] = c
	return c, nil
}
