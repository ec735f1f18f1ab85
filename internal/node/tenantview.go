package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/internal/savings/savingsview"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas/policy"
)

// tenantViews is the web view of a process serving tenants (COMPACTOR_VIEW_LISTEN with
// COMPACTOR_TENANTS_FILE): one listener, the operator's list of tenants at /, and under
// /t/<tenant>/ the view of each tenant whose roles run, on the tenant's store with its
// policies (view.Tenants). A tenant's view comes and goes with its roles.
type tenantViews struct {
	*viewServer
	cfg   Config
	views *view.Tenants
}

// newTenantViews binds the listener of cfg (a process's node config), serving no
// tenant yet.
func newTenantViews(cfg Config) (*tenantViews, error) {
	if !cfg.Roles.API {
		return nil, errors.New("node: the web view needs the api role")
	}
	vt, err := view.NewTenants(cfg.ViewToken, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	vt.SetSavings(savingsview.Reader(cfg.ViewPrices))
	s, err := listenView(cfg, vt.Handler())
	if err != nil {
		return nil, err
	}
	return &tenantViews{viewServer: s, cfg: cfg, views: vt}, nil
}

// alongside is run (the tenants' roles) with the listener beside it: it returns when
// both have, the one failing stopping the other.
func (tv *tenantViews) alongside(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return tv.Run(gctx) })
		g.Go(func() error { return run(gctx) })
		return g.Wait()
	}
}

// serve shows tenant name's view of st, with the policies of r (the tenant's
// resolver), until stop is called or ctx is done (stop must be called all the same):
// tenantSet calls it while the tenant's roles run. A view that cannot be built is
// logged, and the tenant's roles run without it.
func (tv *tenantViews) serve(ctx context.Context, name string, t tenants.Tenant, st *jetstream.Store, r *policy.Resolver, log zerolog.Logger) (stop func()) {
	src := NewPolicySourceLog(st, r, log)
	v, err := view.New(viewConfig(tv.cfg, name), st, src, counters(tv.cfg), log)
	if err != nil {
		log.Error().Err(err).Msg("the tenant's web view is off")
		return func() {}
	}
	if err := tv.views.Add(v, tv.token(t, log)); err != nil {
		log.Error().Err(err).Msg("the tenant's own view token is refused: only the operator's token opens its view")
		if err := tv.views.Add(v, ""); err != nil {
			log.Error().Err(err).Msg("the tenant's web view is off")
			return func() {}
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = src.Run(wctx) // the policy cache's watch; it returns nil when wctx is done
	}()
	return func() {
		tv.views.Remove(v)
		cancel()
		<-watched
	}
}

// token is tenant t's own view token, read from the variable its view_token_env names
// ("" when it names none, or one that is not set: said in the log). The token is never
// logged.
func (tv *tenantViews) token(t tenants.Tenant, log zerolog.Logger) string {
	if t.ViewTokenEnv == "" {
		return ""
	}
	var tok string
	if tv.cfg.Lookup != nil {
		tok, _ = tv.cfg.Lookup(t.ViewTokenEnv)
	}
	if tok == "" {
		log.Error().Str("view_token_env", t.ViewTokenEnv).
			Msg("the tenant's view_token_env names a variable that is not set: only the operator's token opens its view")
	}
	return tok
}
