package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

// Roles says which roles a node runs.
type Roles struct {
	// Trigger counts the chat messages and queues compaction requests.
	Trigger bool
	// Worker runs the summarizer pool.
	Worker bool
	// API runs the compactor service (and the web view, when it has an address). It
	// is a role of its own because it writes policies: a worker or trigger process
	// runs without that right.
	API bool
	// Proxy runs the proxy's HTTP server (Config.Proxy says how).
	Proxy bool
}

// Config is how a node is built. Resolver is required, and so are Trigger and
// Summarizer for their roles: start from triggers.DefaultConfig and
// summarizer.DefaultConfig. Every other zero value is a default or off. Only the
// command line reads the environment: it fills this in.
type Config struct {
	Roles Roles
	// Resolver resolves the operator's tiers (environment and profiles) of the policy
	// keys.
	Resolver *policy.Resolver
	// Profiles is the profiles file Resolver was built from (nil: none): which profile
	// names a key variable of its own.
	Profiles *policy.File
	// Lookup reads the variables that hold LLM API keys (a profile's
	// llm_api_key_env, COMPACTOR_LLM_API_KEY, OPENAI_API_KEY); nil reads none.
	Lookup func(string) (string, bool)
	// Counters returns the token counter of a tokenizer name, for the web view (the
	// trigger's and the pool's are in their configurations); nil: chars/4.
	Counters func(string) (tokens.Counter, error)

	Trigger    triggers.Config
	Summarizer summarizer.Config
	// Service is the compactor service's configuration; the zero value is
	// service.DefaultConfig.
	Service *service.Config
	// MemberID names this process among the trigger partitions' members ("": a
	// random one). Used only with more than one partition.
	MemberID string

	// Proxy is the proxy role's configuration (required with Roles.Proxy).
	Proxy *proxy.Config

	// Tenant, when set, is the tenant whose conversations this node serves: the store is
	// the tenant's, Resolver and Profiles are the tenant's (tenants.Tenant.Resolver), and
	// the service answers on the tenant's subjects (docs/tenants.md).
	Tenant *Tenant

	// ViewListen is the web view's host:port ("": off; only with the API role), and
	// ViewToken its credential ("": only requests to localhost).
	ViewListen, ViewToken string
	// ViewPrices is the price table of the view's savings pages (COMPACTOR_PRICES;
	// nil: tokens only).
	ViewPrices *savings.Prices

	Telemetry telemetry.Telemetry
	Logger    zerolog.Logger
	// IDs, when set, hashes conversation ids in the spans exported (see Settings.IDs).
	IDs *telemetry.IDHasher

	// Policies, when set, replaces the policies in KV as every role's source of
	// settings (bench: one fixed policy).
	Policies PolicySourcer
	// Summarizers, when set, replaces the summarizer each profile configures (eval
	// counts the tokens of its calls; tests give a fake).
	Summarizers func(policy.Settings) (summary.Summarizer, error)
	// Fallback is the summary written when the LLM fails past the hard limit (nil:
	// the extractive one).
	Fallback summary.Summarizer
}

// PolicySourcer is what every role asks a conversation's settings of.
type PolicySourcer interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// Validate reports what makes cfg unusable.
func (c Config) Validate() error {
	switch {
	case !c.Roles.Trigger && !c.Roles.Worker && !c.Roles.API && !c.Roles.Proxy:
		return errors.New("node: no role to run")
	case c.Roles.Proxy && c.Proxy == nil:
		return errors.New("node: the proxy role needs its configuration")
	case c.Resolver == nil && (c.Policies == nil || c.Roles.API || c.Roles.Worker && c.Summarizers == nil):
		// The service checks policies with it, and the workers build each profile's
		// summarizer from it.
		return errors.New("node: no policy resolver")
	case c.ViewListen != "" && !c.Roles.API:
		return errors.New("node: the web view needs the api role")
	}
	if c.Roles.Trigger {
		if err := c.Trigger.Validate(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	if c.Roles.Worker {
		if err := c.Summarizer.Validate(); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	return nil
}

// component is anything a node runs: it returns when ctx is done and its work drained.
type component interface {
	Run(ctx context.Context) error
}

// TriggerRole is a running trigger: one consumer with standbys, or this process's
// share of the partitions.
type TriggerRole interface {
	component
	telemetry.TriggerRole
}

// Node is the roles of one process, built and ready to run.
type Node struct {
	log     zerolog.Logger
	comps   []component
	trigger TriggerRole
	pool    *summarizer.Pool
	service *service.Service
	view    *viewServer
	proxy   *proxy.Server
}

// New wires the roles of cfg on nc and st. It binds the web view's address now, so a
// port in use stops start-up; nothing else runs before Run.
func New(cfg Config, nc *nats.Conn, st *jetstream.Store) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	var policies PolicySourcer = cfg.Policies
	n := &Node{log: log}
	tel := cfg.Telemetry
	if policies == nil {
		src := NewPolicySourceLog(st, cfg.Resolver, log)
		policies = src
		n.comps = append(n.comps, src) // its watch, for the cache
		if m := tel.Metrics; m != nil && cfg.Tenant == nil {
			m.PolicyCache(src.CacheStats)
		}
	}
	if cfg.Roles.API {
		scfg := service.DefaultConfig()
		if cfg.Service != nil {
			scfg = *cfg.Service
		}
		scfg.Tracer = tel.Traces
		var resolve func(policy.Layer) (policy.Settings, error)
		if cfg.Resolver != nil {
			resolve = cfg.Resolver.Resolve
		}
		svc, err := service.New(scfg, nc, st, policies, resolve, log)
		if err != nil {
			return nil, err
		}
		n.comps = append(n.comps, svc, newForgetSweep(st, log))
		n.service = svc
	}
	if cfg.Roles.Trigger {
		t, err := newTrigger(cfg, st, policies)
		if err != nil {
			return nil, err
		}
		n.comps = append(n.comps, t)
		n.trigger = t
	}
	if cfg.Roles.Worker {
		p, err := newPool(cfg, st, policies)
		if err != nil {
			return nil, err
		}
		n.comps = append(n.comps, p)
		n.pool = p
	}
	if m := tel.Metrics; m != nil && cfg.Tenant == nil { // a tenant's: its tenant metrics (tenants.go)
		if n.pool != nil {
			m.Pool(n.pool)
			m.LearnedWindows(st, log)
		}
		m.Connection(nc)
		var parts func() []jetstream.Partition
		if n.trigger != nil {
			m.Trigger(n.trigger)
			parts = n.trigger.Partitions
		}
		m.Backlog(st, parts, log)
	}
	// The web view reads what the service reads; it binds its address last, so no
	// error after it leaves the port bound.
	if cfg.Roles.API && cfg.ViewListen != "" {
		vs, err := newViewServer(cfg, st, policies)
		if err != nil {
			return nil, err
		}
		n.comps = append(n.comps, vs)
		n.view = vs
	}
	if cfg.Roles.Proxy {
		ps, err := newProxy(cfg, nc, st, policies)
		if err != nil {
			if n.view != nil {
				_ = n.view.ln.Close() // no port left bound by a node that is not built
			}
			return nil, err
		}
		n.comps = append(n.comps, ps)
		n.proxy = ps
	}
	return n, nil
}

// newTrigger is the trigger role: with one partition, the wire contract's single
// pinned trigger consumer; with more, this process takes its share of them.
func newTrigger(cfg Config, st *jetstream.Store, policies PolicySourcer) (TriggerRole, error) {
	tcfg := cfg.Trigger
	cfg.Telemetry.Triggers(&tcfg)
	if st.Config().TriggerPartitions > 1 {
		return triggers.NewPartitions(tcfg, st, policies, cfg.Logger, cfg.MemberID)
	}
	return triggers.New(tcfg, st, policies, cfg.Logger)
}

// newPool is the worker role. It builds the summarizer of the default profile and of
// every named one now, so a bad endpoint stops start-up.
func newPool(cfg Config, st *jetstream.Store, policies PolicySourcer) (*summarizer.Pool, error) {
	log := cfg.Logger
	fallback := cfg.Fallback
	if fallback == nil {
		fallback = extractive.New()
	}
	var quota *tenants.Quota
	if t := cfg.Tenant; t != nil {
		// Every tenant's: it counts what the tenant's LLM calls spend, and bounds it when a
		// quota is set.
		quota = tenants.NewQuota(t.Name, t.Quotas, st, log)
		if tm := cfg.Telemetry.Tenant; tm != nil {
			quota.Declined, quota.Charged = tm.Declined, tm.Tokens
		}
	}
	summarizersFor := cfg.Summarizers
	if summarizersFor == nil {
		sums := NewSummarizers(cfg, fallback)
		if quota != nil {
			sums.usage = quota.Charge
		}
		if sum, err := sums.For(cfg.Resolver.Base()); err != nil {
			return nil, err
		} else if sum == fallback {
			log.Warn().Msg("no COMPACTOR_LLM_BASE_URL or API key: summaries are extractive (no LLM) and marked fallback")
		}
		for _, name := range cfg.Resolver.Profiles() {
			s, err := cfg.Resolver.Resolve(policy.Layer{policy.ProfileKey: name})
			if err != nil {
				return nil, fmt.Errorf("configuration: %w", err)
			}
			if _, err := sums.For(s); err != nil {
				return nil, fmt.Errorf("configuration: profile %q: %w", name, err)
			}
		}
		summarizersFor = sums.For
	}
	opts := summarizer.Options{Policies: policies, Summarizers: summarizersFor, Fallback: fallback, Retryable: llm.Retryable, Logger: log}
	if quota != nil {
		opts.Quota = quota
	}
	cfg.Telemetry.Pool(&opts)
	return summarizer.NewPool(cfg.Summarizer, st, opts)
}

// Trigger is the node's trigger role (nil without it).
func (n *Node) Trigger() TriggerRole { return n.trigger }

// Service is the node's compactor service (nil without the api role).
func (n *Node) Service() *service.Service { return n.service }

// Pool is the node's worker pool (nil without the worker role).
func (n *Node) Pool() *summarizer.Pool { return n.pool }

// ViewAddr is the address the web view listens on ("" without it).
func (n *Node) ViewAddr() string {
	if n.view == nil {
		return ""
	}
	return n.view.Addr()
}

// ProxyAddr is the address the proxy listens on ("" without the proxy role).
func (n *Node) ProxyAddr() string {
	if n.proxy == nil {
		return ""
	}
	return n.proxy.Addr()
}

// Start runs n in a goroutine until stop is called: stop cancels it, waits until it has
// drained, and returns what Run returned (the same on every call).
func (n *Node) Start(ctx context.Context) (stop func() error) {
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- n.Run(cctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// Run runs every role until ctx is done and their in-flight work has drained, or until
// one of them fails: then it stops the others and returns that error.
func (n *Node) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range n.comps {
		g.Go(func() error { return c.Run(gctx) })
	}
	return g.Wait()
}

// PolicySource resolves a conversation's settings: the resolver's tiers plus the
// conversation's policy in KV compaction-policy. It is what the trigger, the workers,
// the service and the view are given, so they all resolve alike.
//
// While Run holds its watch of the policies, it answers from memory what it read
// before and reads a conversation's policy again only when it changed (see the policy
// cache's bounds in policycache.go); otherwise every call reads the policy from the
// bucket's stream leader.
type PolicySource struct {
	store    *jetstream.Store
	resolver *policy.Resolver
	cache    *policyCache
	// none is the settings of a conversation without a policy, resolved once.
	none *policy.Settings
	// noneErr is what resolving no policy gave (then none is the resolver's base).
	noneErr error
}

// NewPolicySource resolves with r's tiers and the policies st holds. Run caches them.
func NewPolicySource(st *jetstream.Store, r *policy.Resolver) PolicySource {
	return NewPolicySourceLog(st, r, zerolog.Nop())
}

// NewPolicySourceLog is NewPolicySource whose watch reports to log.
func NewPolicySourceLog(st *jetstream.Store, r *policy.Resolver, log zerolog.Logger) PolicySource {
	none, err := r.Resolve(nil)
	if err != nil {
		none = r.Base()
	}
	return PolicySource{store: st, resolver: r, cache: newPolicyCache(st, log), none: &none, noneErr: err}
}

// Run watches the policies until ctx is done, and meanwhile Settings answers from
// memory what it read before (a node runs it with its roles).
func (ps PolicySource) Run(ctx context.Context) error { return ps.cache.run(ctx) }

// CacheStats reports what the cache did (the figures its metrics export).
func (ps PolicySource) CacheStats() telemetry.PolicyCacheFigures { return ps.cache.stats() }

// Settings resolves conv's settings. When its policy is invalid, the error matches
// policy.ErrPolicy and the settings returned are those without the policy.
func (ps PolicySource) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	e, st, ok := ps.cache.get(conv)
	if ok {
		ps.cache.hits.Add(1)
		return *e.s, e.err
	}
	if ps.cache.hasNoPolicy(conv, st) {
		ps.cache.hits.Add(1)
		ps.cache.absent.Add(1)
		e = ps.resolve(conv, nil)
		return *e.s, e.err
	}
	ps.cache.misses.Add(1)
	b := ps.cache.begin(st)
	data, _, err := ps.store.Policies().Get(ctx, conv)
	if err != nil {
		return policy.Settings{}, err
	}
	e = ps.resolve(conv, data)
	ps.cache.put(conv, b, e)
	return *e.s, e.err
}

// resolve is the settings of conv with the policy data (nil: none).
func (ps PolicySource) resolve(conv string, data []byte) cacheEntry {
	if data == nil && ps.noneErr == nil {
		return cacheEntry{s: ps.none}
	}
	var l policy.Layer
	var err error
	if data != nil {
		l, err = policy.DecodeConversation(data)
	}
	var s policy.Settings
	if err == nil {
		s, err = ps.resolver.Resolve(l)
	}
	if err != nil {
		return cacheEntry{s: ps.none, err: fmt.Errorf("policy of %s: %w", conv, err)}
	}
	return cacheEntry{s: &s}
}

// DefaultEndpoint is where summaries go when no endpoint is configured but a key is.
const DefaultEndpoint = "https://api.openai.com/v1"

// Summarizers hands out one summarizer per endpoint, model, key and timeout: the
// extractive one when a profile has neither endpoint nor key.
//
// Keys go only to the endpoint they were configured for. The default key (the variable
// the environment tier's llm_api_key_env names, COMPACTOR_LLM_API_KEY by default, falling
// back to OPENAI_API_KEY) goes only to the default endpoint: the environment tier's
// llm_base_url, or DefaultEndpoint when none. A profile with an endpoint of its own gets
// only the key of the variable its own llm_api_key_env names, and no key when it names
// none or that variable is empty: never another endpoint's key.
type Summarizers struct {
	lookup   func(string) (string, bool)
	fallback summary.Summarizer
	log      zerolog.Logger
	// base is the deployment's settings without a profile: its endpoint is the default
	// endpoint (for a tenant too: the deployment's, not the tenant's).
	base policy.Settings
	// profiles is the profiles file (nil: none): which profile names a key variable.
	profiles *policy.File
	// tenantKeyEnv is the variable a tenant's own settings name for its key ("": the
	// tenant names none, or this is no tenant's).
	tenantKeyEnv string
	// tenant says these are a tenant's summarizers.
	tenant bool
	// usage hears what every LLM call spent (a tenant's quota; nil: nobody).
	usage func(context.Context, schemas.Usage)

	// tel observes the LLM calls.
	tel telemetry.Telemetry

	mu    sync.Mutex
	cache map[llm.Config]*llm.Summarizer
}

// NewSummarizers returns the summarizers of cfg's tiers (Resolver, Profiles, Lookup,
// Telemetry, Logger); fallback is the one of a profile with neither endpoint nor key.
func NewSummarizers(cfg Config, fallback summary.Summarizer) *Summarizers {
	lookup := cfg.Lookup
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	f := &Summarizers{lookup: lookup, fallback: fallback, log: cfg.Logger, base: cfg.Resolver.Base(), profiles: cfg.Profiles,
		tel: cfg.Telemetry, cache: map[llm.Config]*llm.Summarizer{}}
	if t := cfg.Tenant; t != nil {
		f.base, f.tenantKeyEnv, f.tenant = t.Deployment.Base(), t.KeyEnv, true
		f.log = f.log.With().Str("tenant", t.Name).Logger()
	}
	return f
}

// For is the summarizer of s: one per endpoint, model, key and timeout, built once.
func (f *Summarizers) For(s policy.Settings) (summary.Summarizer, error) {
	base, key := f.EndpointAndKey(s)
	if base == "" && key == "" {
		return f.fallback, nil
	}
	if base == "" {
		base = DefaultEndpoint
	}
	cfg := llm.Config{BaseURL: base, APIKey: key, Model: s.LLMModel, Timeout: s.LLMTimeout, MaxTokensField: s.LLMMaxTokensField,
		RequestShape: s.LLMRequestShape}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sum, ok := f.cache[cfg]; ok {
		return f.tel.LLM(sum), nil
	}
	sum, err := llm.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_LLM_BASE_URL/COMPACTOR_LLM_MODEL: %w", err)
	}
	if f.usage != nil {
		sum = sum.WithUsage(f.usage)
	}
	f.cache[cfg] = sum
	f.log.Info().Str("llm_base_url", policy.RedactURL(base)).Str("model", s.LLMModel).Str("profile", s.Profile).
		Bool("api_key", key != "").Msg("summaries by LLM")
	return f.tel.LLM(sum), nil
}

// EndpointAndKey is the endpoint of s ("" for none configured) and the key it may be
// sent (see summarizers).
func (f *Summarizers) EndpointAndKey(s policy.Settings) (base, key string) {
	get := func(name string) string {
		if name == "" {
			return ""
		}
		v, _ := f.lookup(name)
		return v
	}
	base = s.LLMBaseURL
	if orDefault(base) != orDefault(f.base.LLMBaseURL) {
		// A profile's or a tenant's own endpoint: only the variable the profile itself
		// names, else the one the tenant's settings name. (Only those tiers set an
		// endpoint: a conversation's policy cannot.)
		switch {
		case s.Profile != "" && f.profileSets(s.Profile, "llm_api_key_env"):
			key = get(s.LLMAPIKeyEnv)
		case f.tenantKeyEnv != "":
			key = get(f.tenantKeyEnv)
		}
		return base, key
	}
	// The default endpoint: the profile's variable (when it names one), then the
	// default key. A tenant's settings and profiles are the tenant's: its key goes only
	// to its own endpoint, and the deployment's endpoint gets the deployment's key.
	names := []string{s.LLMAPIKeyEnv, f.base.LLMAPIKeyEnv, "OPENAI_API_KEY"}
	if f.tenant {
		names = names[1:]
	}
	for _, name := range names {
		if key = get(name); key != "" {
			break
		}
	}
	return base, key
}

// orDefault is the endpoint a base URL setting calls.
func orDefault(base string) string {
	if base == "" {
		return DefaultEndpoint
	}
	return base
}

// profileSets reports whether the profiles file gives profile a value of key.
func (f *Summarizers) profileSets(profile, key string) bool {
	if f.profiles == nil {
		return false
	}
	_, ok := f.profiles.Profiles[profile][key]
	return ok
}
