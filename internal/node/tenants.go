package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas/policy"
)

// Tenant is what a node serving one tenant knows of it beyond its store and resolver.
type Tenant struct {
	// Name is the tenant's name (its NATS account's).
	Name string
	// Deployment is the deployment's resolver: its endpoint is the default endpoint,
	// and the deployment's key goes only there.
	Deployment *policy.Resolver
	// KeyEnv is the variable the tenant's own settings name for its summarizer's key
	// ("": none; then its own endpoint gets no key but its profiles').
	KeyEnv string
	// Quotas bound the tenant.
	Quotas tenants.Quotas
}

// TenantsSource is where a serving process finds its tenants: a tenants file, read
// again when it changes.
type TenantsSource struct {
	// Path is the tenants file (COMPACTOR_TENANTS_FILE).
	Path string
	// Every is how often the file is read again (0: 5 s).
	Every time.Duration
}

// tenantSet runs a node's roles once per tenant of the tenants file: each tenant's
// roles on its own store, started, stopped and restarted on their own, so a tenant
// added, changed or removed (or one whose streams are broken) leaves the others running.
type tenantSet struct {
	cfg ServeConfig
	nc  *nats.Conn
	log zerolog.Logger

	mu      sync.Mutex
	running map[string]*tenantRun
	wg      sync.WaitGroup
	// metrics are the running tenants' metrics: kept while a tenant restarts with new
	// settings, removed with the tenant.
	metrics map[string]*telemetry.Tenant
	// views is the web view (nil: off): each tenant's view is shown while its roles run.
	views *tenantViews
}

// tenantRun is one tenant's roles running.
type tenantRun struct {
	fingerprint string
	cancel      context.CancelFunc
	done        chan struct{}
}

func newTenantSet(cfg ServeConfig, nc *nats.Conn) *tenantSet {
	return &tenantSet{cfg: cfg, nc: nc, log: cfg.Node.Logger, running: map[string]*tenantRun{}, metrics: map[string]*telemetry.Tenant{}}
}

// read reads and checks the tenants file against the deployment's tiers.
func (ts *tenantSet) read() (*tenants.File, error) {
	f, err := tenants.Read(ts.cfg.Tenants.Path)
	if err != nil {
		return nil, err
	}
	if err := f.Check(ts.cfg.Node.Resolver); err != nil {
		return nil, fmt.Errorf("%s: %w", ts.cfg.Tenants.Path, err)
	}
	return f, nil
}

// run serves f's tenants until ctx is done, reading the file again every Every: a
// tenant added is started, one removed is stopped (its data stays: forgetting a tenant
// is the operator's, docs/tenants.md), one changed is restarted with its new settings.
// A file that no longer reads keeps the tenants running as they are, and says so.
func (ts *tenantSet) run(ctx context.Context, f *tenants.File) error {
	every := ts.cfg.Tenants.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	ts.apply(ctx, f)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			ts.stopAll()
			return nil
		case <-tick.C:
		}
		nf, err := ts.read()
		if err != nil {
			if err.Error() != lastErr {
				ts.log.Error().Err(err).Msg("the tenants file does not read: its tenants keep running as they were")
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		ts.apply(ctx, nf)
	}
}

// apply starts, restarts and stops tenants so that f's run. It waits for nothing: a
// tenant stopping drains on its own (a compaction held at its endpoint may take
// minutes), and the run that replaces it starts once it has, so one tenant's drain
// never holds up another tenant's start or stop.
func (ts *tenantSet) apply(ctx context.Context, f *tenants.File) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	stopped := map[string]chan struct{}{}
	for name, r := range ts.running {
		t, ok := f.Tenants[name]
		if ok && t.Fingerprint() == r.fingerprint {
			continue
		}
		what := "removed from"
		if ok {
			what = "changed in"
		}
		ts.log.Info().Str("tenant", name).Msgf("tenant %s the tenants file: stopping its roles", what)
		r.cancel()
		delete(ts.running, name)
		stopped[name] = r.done
		if !ok {
			ts.wg.Go(func() {
				<-r.done
				ts.dropMetrics(name)
			})
		}
	}
	for _, name := range f.Names() {
		if _, ok := ts.running[name]; ok {
			continue
		}
		t := f.Tenants[name]
		if m := ts.cfg.Node.Telemetry.Metrics; m != nil && ts.metrics[name] == nil {
			ts.metrics[name] = m.Tenant(name)
		}
		tm := ts.metrics[name]
		cctx, cancel := context.WithCancel(ctx)
		r := &tenantRun{fingerprint: t.Fingerprint(), cancel: cancel, done: make(chan struct{})}
		ts.running[name] = r
		before := stopped[name] // the run this one replaces, still draining (nil: none)
		ts.wg.Go(func() {
			defer close(r.done)
			if before != nil {
				select {
				case <-before:
				case <-cctx.Done():
					return
				}
			}
			ts.serveTenant(cctx, name, t, tm)
		})
	}
}

// dropMetrics deletes the series of tenant name once its last run is done, unless it
// runs again meanwhile (added back to the file).
func (ts *tenantSet) dropMetrics(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, again := ts.running[name]; again {
		return
	}
	if tm := ts.metrics[name]; tm != nil {
		tm.Remove()
		delete(ts.metrics, name)
	}
}

// stopAll stops every tenant and waits until each has drained.
func (ts *tenantSet) stopAll() {
	ts.mu.Lock()
	for _, r := range ts.running {
		r.cancel()
	}
	ts.mu.Unlock()
	ts.wg.Wait()
}

// serveTenant provisions (or finds) the tenant's streams and runs its roles until ctx
// is done. A failure stops only this tenant's roles: it is reported and tried again
// after a backoff, the other tenants untouched.
func (ts *tenantSet) serveTenant(ctx context.Context, name string, t tenants.Tenant, tm *telemetry.Tenant) {
	log := ts.log.With().Str("tenant", name).Logger()
	backoff := jetstream.DefaultBackoff()
	for attempt := 0; ; attempt++ {
		err := ts.runTenant(ctx, name, t, tm, log)
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Delay(attempt)
		if errors.Is(err, jetstream.ErrConflict) || errors.Is(err, tenants.ErrFile) {
			wait = time.Minute // the operator's to fix: no hurry to read the same answer again
		}
		log.Error().Err(err).Dur("retry_in", wait).Msg("tenant's roles stopped; the other tenants run on")
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// runTenant is one life of a tenant's roles.
func (ts *tenantSet) runTenant(ctx context.Context, name string, t tenants.Tenant, tm *telemetry.Tenant, log zerolog.Logger) error {
	jcfg, err := t.JetStream(ts.cfg.JetStream, name)
	if err != nil {
		return err
	}
	st, err := ts.provision(ctx, jcfg, log)
	if err != nil {
		return err
	}
	ncfg, err := ts.tenantConfig(name, t, log)
	if err != nil {
		return err
	}
	if tm != nil {
		tm.Watch(st)
		ncfg.Telemetry.Tenant = tm
	}
	n, err := New(ncfg, ts.nc, st)
	if err != nil {
		return err
	}
	if ts.views != nil {
		defer ts.views.serve(ctx, name, t, st, ncfg.Resolver, log)()
	}
	policyDone := make(chan struct{})
	pctx, stopPolicy := context.WithCancel(ctx)
	go func() {
		defer close(policyDone)
		AnnouncePolicy(pctx, ncfg, st)
	}()
	defer func() {
		stopPolicy()
		<-policyDone
	}()
	log.Info().Msg("tenant's roles started")
	if err := n.Run(ctx); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return errors.New("the tenant's roles returned")
	}
	return nil
}

// provision finds (or, as admin, creates) the tenant's streams. A stored_bytes quota
// changed in the file differs from the tenant's CHAT and objects bucket until an admin
// applies it
// (compactor provision --update-streams): the tenant is served meanwhile on its streams as
// they are, with a warning, since no other process relies on that bound. Any other
// difference stops the tenant's roles, as it stops serve.
func (ts *tenantSet) provision(ctx context.Context, cfg jetstream.Config, log zerolog.Logger) (*jetstream.Store, error) {
	st, err := jetstream.ProvisionRetrying(ctx, ts.nc, cfg, jetstream.DefaultBackoff(), log)
	var ce *jetstream.ConflictError
	if err == nil || !errors.As(err, &ce) {
		return st, err
	}
	for _, d := range ce.Differences {
		if d.Name != cfg.ChatStream && d.Name != cfg.ObjectsBucket || (d.Setting != "max_bytes" && d.Setting != "discard") {
			return nil, err
		}
	}
	log.Warn().Err(err).Msg("the tenant's stored_bytes quota in the tenants file is not its chat stream's and objects bucket's yet: " +
		"apply it with compactor provision --update-streams as admin; served meanwhile with the stream as it is")
	return jetstream.Open(ctx, ts.nc, cfg)
}

// tenantConfig is the node config of tenant name's roles: the process's roles and
// settings, with the tenant's resolver, profiles and service subjects. The web view and
// the proxy are the process's, not a tenant's.
func (ts *tenantSet) tenantConfig(name string, t tenants.Tenant, log zerolog.Logger) (Config, error) {
	ncfg := ts.cfg.Node
	r, err := t.Resolver(name, ncfg.Resolver)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", tenants.ErrFile, err)
	}
	keyEnv, _ := t.Policy["llm_api_key_env"].(string)
	ncfg.Tenant = &Tenant{Name: name, Deployment: ncfg.Resolver, KeyEnv: keyEnv, Quotas: t.Quotas}
	ncfg.Resolver, ncfg.Profiles = r, t.ProfileFile()
	scfg := service.DefaultConfig()
	if ncfg.Service != nil {
		scfg = *ncfg.Service
	}
	scfg.Tenant = name
	ncfg.Service = &scfg
	ncfg.Roles.Proxy, ncfg.Proxy, ncfg.ViewListen = false, nil, ""
	ncfg.Logger = log
	return ncfg, nil
}

// Ping is nil while the connection is up: a tenant's own trouble (its streams, a
// refusal) is that tenant's, logged and retried, not the process's readiness, which
// would take every other tenant's service down with it.
func (ts *tenantSet) Ping(context.Context) error {
	if st := ts.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("%w (%s)", jetstream.ErrDisconnected, st)
	}
	return nil
}

// ConsumerRefused is nil: a refused consumer is its tenant's trouble.
func (ts *tenantSet) ConsumerRefused(time.Duration) error { return nil }
