package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
	"github.com/compactor/compactor/triggers"
)

func parseLevel(s string) (zerolog.Level, error) {
	l, err := zerolog.ParseLevel(s)
	if err != nil || s == "" {
		return 0, fmt.Errorf("unknown log level %q (trace, debug, info, warn, error)", s)
	}
	return l, nil
}

func newLogger(env Env, w io.Writer) zerolog.Logger {
	lvl, _ := parseLevel(env.LogLevel)
	if env.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// component is anything serve runs: it returns when ctx is done and its work drained.
type component interface {
	Run(ctx context.Context) error
}

// serve runs the roles until ctx is done, then drains them within DrainTimeout.
func serve(ctx context.Context, env Env, std stdio) error {
	log := newLogger(env, std.err)
	// What runs after the roles stopped (the listener's last requests, the last spans)
	// gets at most 5 s, and never more than what COMPACTOR_DRAIN_TIMEOUT has left once
	// ctx is done: the process exits within it.
	var stopBy atomic.Pointer[time.Time]
	context.AfterFunc(ctx, func() {
		t := time.Now().Add(env.DrainTimeout)
		stopBy.Store(&t)
	})
	within := func() time.Duration {
		if t := stopBy.Load(); t != nil {
			return min(5*time.Second, max(time.Until(*t), time.Millisecond))
		}
		return 5 * time.Second
	}
	var tel telemetry
	tp, err := newTracing(ctx, env)
	if err != nil {
		return err
	}
	if tp != nil {
		otel.SetErrorHandler(otelErrors(log, 10*time.Second))
		tel.traces = tp
		defer func() {
			if err := shutdownTracing(tp, within()); err != nil {
				log.Warn().Err(err).Msg("flush the last spans")
			}
		}()
		log.Info().Msg("traces on (OTLP/HTTP)")
	}
	// The operators' listener binds before NATS is dialled and serves from the start:
	// /healthz answers while serve waits for NATS, /readyz says what it waits for, and
	// both stay up while the roles drain.
	ready := newReadiness()
	if env.HTTPListen != "" {
		tel.metrics = newMetrics()
		ops, err := newOpsServer(env.HTTPListen, log, ready, tel.metrics)
		if err != nil {
			return err
		}
		octx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
		opsDone := make(chan struct{})
		go func() {
			defer close(opsDone)
			// Compaction goes on without it; a liveness probe that fails then has the
			// process restarted.
			if err := ops.Run(octx); err != nil {
				log.Error().Err(err).Msg("HTTP listener for operators stopped")
			}
		}()
		defer func() {
			stopOps()
			select {
			case <-opsDone:
			case <-time.After(within()): // a profile being taken is cut by the exit
			}
		}()
	}
	url := env.NATSURL
	if url == "" {
		srv, err := embedded.Start(embedded.Config{Listen: env.Listen, DataDir: env.DataDir, Logger: log})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
		log.Info().Str("url", url).Str("data_dir", env.DataDir).Msg("embedded NATS server started")
	}
	// A service waits for NATS and JetStream instead of exiting: an orchestrator may
	// start it first, and a cluster has no JetStream until it elects a meta leader. A
	// server that refuses the credentials or TLS stops it at once.
	nc, err := jetstream.ConnectRetrying(ctx, url, "compactor", jetstream.DefaultBackoff(), log, env.natsAuth().Option())
	switch {
	case err != nil && ctx.Err() != nil:
		log.Info().Err(err).Msg("stopped before NATS was reachable")
		return nil
	case err != nil:
		return connectError(err)
	}
	defer nc.Close()
	ready.starting("provisioning JetStream")
	st, err := jetstream.ProvisionRetrying(ctx, nc, env.jetstream(), jetstream.DefaultBackoff(), log)
	switch {
	case errors.Is(err, jetstream.ErrConflict):
		return conflictError(err, "serve")
	case err != nil && ctx.Err() != nil:
		log.Info().Err(err).Msg("stopped before JetStream was ready")
		return nil
	case err != nil:
		return err
	}
	comps, err := buildWith(env, nc, st, log, tel)
	if err != nil {
		return err
	}
	ready.running(st)
	defer ready.stopping()
	// Components stop taking work when ctx is done; their in-flight jobs finish on
	// their own. The group's context only stops the others when one fails.
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range comps {
		g.Go(func() error { return c.Run(gctx) })
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	ready.stopping()
	log.Info().Dur("drain_timeout", env.DrainTimeout).Msg("shutting down; draining in-flight work")
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		log.Info().Msg("stopped")
		return nil
	case <-time.After(env.DrainTimeout):
		return fmt.Errorf("in-flight work did not drain within %s (COMPACTOR_DRAIN_TIMEOUT); unacked requests will be redelivered", env.DrainTimeout)
	}
}

// conflictError is what serve and provision say of existing settings that differ:
// every difference (err names them), and how to apply them on purpose with command.
func conflictError(err error, command string) error {
	return fmt.Errorf("%w. Fix this process's settings, or, to change the existing ones for every process "+
		"on purpose, run once with COMPACTOR_UPDATE_STREAMS=true or %s --update-streams", err, command)
}

// build wires the roles of this process, without telemetry.
func build(env Env, nc *nats.Conn, st *jetstream.Store, log zerolog.Logger) ([]component, error) {
	return buildWith(env, nc, st, log, telemetry{})
}

// buildWith wires the roles of this process and what tel observes of them.
func buildWith(env Env, nc *nats.Conn, st *jetstream.Store, log zerolog.Logger, tel telemetry) ([]component, error) {
	roles, _ := env.roles()
	r, err := env.resolver()
	if err != nil {
		return nil, err
	}
	policies := policySource{store: st, resolver: r}
	var comps []component
	var trig triggerRole // nil without the trigger role
	// The compactor service runs in the processes with the api role; the instances
	// share the endpoints' queue group. It is a role of its own because it writes
	// policies: a worker or trigger process runs without that right (deploy/nats).
	if roles.api {
		scfg := service.DefaultConfig()
		scfg.Tracer = tel.traces
		svc, err := service.New(scfg, nc, st, policies, r.Resolve, log)
		if err != nil {
			return nil, err
		}
		comps = append(comps, svc)
	}
	if roles.trigger {
		// One partition: the wire contract's single pinned trigger consumer. More: this
		// process takes its share of them (README, "Scaling the trigger").
		cfg := env.triggers()
		tel.triggers(&cfg)
		var t interface {
			component
			triggerRole
		}
		var err error
		if st.Config().TriggerPartitions > 1 {
			t, err = triggers.NewPartitions(cfg, st, policies, log, "")
		} else {
			t, err = triggers.New(cfg, st, policies, log)
		}
		if err != nil {
			return nil, err
		}
		comps = append(comps, t)
		trig = t
	}
	if roles.worker {
		fallback := extractive.New()
		sums := newSummarizers(env, r, fallback, log)
		sums.tel = tel
		// Build the default profile's summarizer now, so a bad endpoint stops start-up.
		if sum, err := sums.For(r.Base()); err != nil {
			return nil, err
		} else if sum == summary.Summarizer(fallback) {
			log.Warn().Msg("no COMPACTOR_LLM_BASE_URL or API key: summaries are extractive (no LLM) and marked fallback")
		}
		for _, name := range r.Profiles() {
			s, err := r.Resolve(policy.Layer{policy.ProfileKey: name})
			if err != nil {
				return nil, fmt.Errorf("configuration: %w", err)
			}
			if _, err := sums.For(s); err != nil {
				return nil, fmt.Errorf("configuration: profile %q: %w", name, err)
			}
		}
		opts := summarizer.Options{Policies: policies, Summarizers: sums.For, Fallback: fallback, Retryable: llm.Retryable, Logger: log}
		tel.pool(&opts)
		p, err := summarizer.NewPool(env.summarizer(), st, opts)
		if err != nil {
			return nil, err
		}
		comps = append(comps, p)
		if tel.metrics != nil {
			tel.metrics.pool(p)
		}
	}
	if tel.metrics != nil {
		tel.metrics.connection(nc)
		var parts func() []jetstream.Partition
		if trig != nil {
			tel.metrics.trigger(trig)
			parts = trig.Partitions
		}
		tel.metrics.backlog(st, parts, log)
	}
	// The web view reads what the service reads; it binds its address last, so no
	// error after it leaves the port bound.
	if roles.api && env.ViewListen != "" {
		vs, err := newViewServer(env, st, policies, log)
		if err != nil {
			return nil, err
		}
		comps = append(comps, vs)
	}
	return comps, nil
}

// policySource resolves a conversation's settings: the resolver's tiers plus the
// conversation's policy in KV compaction-policy.
type policySource struct {
	store    *jetstream.Store
	resolver *policy.Resolver
}

// Settings resolves conv's settings. When its policy is invalid, the error matches
// policy.ErrPolicy and the settings returned are those without the policy.
func (ps policySource) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	data, _, err := ps.store.Policies().Get(ctx, conv)
	if err != nil {
		return policy.Settings{}, err
	}
	var l policy.Layer
	if data != nil {
		l, err = policy.DecodeConversation(data)
	}
	var s policy.Settings
	if err == nil {
		s, err = ps.resolver.Resolve(l)
	}
	if err != nil {
		base, berr := ps.resolver.Resolve(nil)
		if berr != nil {
			base = ps.resolver.Base()
		}
		return base, fmt.Errorf("policy of %s: %w", conv, err)
	}
	return s, nil
}

// defaultEndpoint is where summaries go when no endpoint is configured but a key is.
const defaultEndpoint = "https://api.openai.com/v1"

// summarizers hands out one summarizer per endpoint, model, key and timeout: the
// extractive one when a profile has neither endpoint nor key.
//
// Keys go only to the endpoint they were configured for. The default key (the variable
// the environment tier's llm_api_key_env names, COMPACTOR_LLM_API_KEY by default, falling
// back to OPENAI_API_KEY) goes only to the default endpoint: the environment tier's
// llm_base_url, or defaultEndpoint when none. A profile with an endpoint of its own gets
// only the key of the variable its own llm_api_key_env names, and no key when it names
// none or that variable is empty: never another endpoint's key.
type summarizers struct {
	lookup   func(string) (string, bool)
	fallback summary.Summarizer
	log      zerolog.Logger
	// base is the settings without a profile: its endpoint is the default endpoint.
	base policy.Settings
	// profiles is the profiles file (nil: none): which profile names a key variable.
	profiles *policy.File

	// tel observes the LLM calls.
	tel telemetry

	mu    sync.Mutex
	cache map[llm.Config]*llm.Summarizer
}

// newSummarizers returns the summarizers of env's tiers, as resolved by r.
func newSummarizers(env Env, r *policy.Resolver, fallback summary.Summarizer, log zerolog.Logger) *summarizers {
	return &summarizers{lookup: env.lookup, fallback: fallback, log: log, base: r.Base(), profiles: env.Profiles,
		cache: map[llm.Config]*llm.Summarizer{}}
}

func (f *summarizers) For(s policy.Settings) (summary.Summarizer, error) {
	base, key := f.endpointAndKey(s)
	if base == "" && key == "" {
		return f.fallback, nil
	}
	if base == "" {
		base = defaultEndpoint
	}
	cfg := llm.Config{BaseURL: base, APIKey: key, Model: s.LLMModel, Timeout: s.LLMTimeout, MaxTokensField: s.LLMMaxTokensField,
		RequestShape: s.LLMRequestShape}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sum, ok := f.cache[cfg]; ok {
		return f.tel.llm(sum), nil
	}
	sum, err := llm.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_LLM_BASE_URL/COMPACTOR_LLM_MODEL: %w", err)
	}
	f.cache[cfg] = sum
	f.log.Info().Str("llm_base_url", policy.RedactURL(base)).Str("model", s.LLMModel).Str("profile", s.Profile).
		Bool("api_key", key != "").Msg("summaries by LLM")
	return f.tel.llm(sum), nil
}

// endpointAndKey is the endpoint of s ("" for none configured) and the key it may be
// sent (see summarizers).
func (f *summarizers) endpointAndKey(s policy.Settings) (base, key string) {
	get := func(name string) string {
		if name == "" {
			return ""
		}
		v, _ := f.lookup(name)
		return v
	}
	base = s.LLMBaseURL
	if s.Profile != "" && orDefault(base) != orDefault(f.base.LLMBaseURL) {
		// The profile's own endpoint: only the variable the profile itself names.
		if f.profileSets(s.Profile, "llm_api_key_env") {
			key = get(s.LLMAPIKeyEnv)
		}
		return base, key
	}
	// The default endpoint: the profile's variable (when it names one), then the
	// default key.
	for _, name := range []string{s.LLMAPIKeyEnv, f.base.LLMAPIKeyEnv, "OPENAI_API_KEY"} {
		if key = get(name); key != "" {
			break
		}
	}
	return base, key
}

// orDefault is the endpoint a base URL setting calls.
func orDefault(base string) string {
	if base == "" {
		return defaultEndpoint
	}
	return base
}

// profileSets reports whether the profiles file gives profile a value of key.
func (f *summarizers) profileSets(profile, key string) bool {
	if f.profiles == nil {
		return false
	}
	_, ok := f.profiles.Profiles[profile][key]
	return ok
}
