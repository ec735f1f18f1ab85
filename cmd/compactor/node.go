package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/view"
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
	w = env.idHasher().Writer(w) // hashes the JSON event before any formatting
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// serve runs the roles of env until ctx is done, then drains them within
// COMPACTOR_DRAIN_TIMEOUT.
func serve(ctx context.Context, env Env, std stdio) error {
	if env.Tenant != "" && env.Roles != "" {
		return errors.New("configuration: COMPACTOR_TENANT is for the commands an operator runs on one tenant's conversations, " +
			"and for a proxy of one tenant's (compactor proxy); serve serves the tenants of COMPACTOR_TENANTS_FILE")
	}
	log := newLogger(env, std.err)
	ncfg, err := env.node(log, telemetry.Telemetry{})
	if err != nil {
		return err
	}
	tenantsFile := env.tenants()
	if env.Tenant != "" {
		// One tenant's proxy: that tenant's settings when the tenants file is given.
		if ncfg, err = tenantProxyConfig(env, ncfg); err != nil {
			return err
		}
		tenantsFile = nil
	}
	err = node.Serve(ctx, node.ServeConfig{
		Node:    ncfg,
		NATSURL: env.NATSURL, Listen: env.Listen, DataDir: env.DataDir,
		NATSOptions:     []nats.Option{env.natsAuth().Option()},
		NATSMonitorURLs: env.monitorURLs(),
		JetStream:       env.jetstream(),
		HTTPListen:      env.HTTPListen,
		OTelEndpoint:    env.OTelEndpoint,
		Version:         buildVersion().Version,
		DrainTimeout:    env.DrainTimeout,
		Tenants:         tenantsFile,
	})
	var ce *node.ConnectError
	switch {
	case errors.Is(err, jetstream.ErrConflict):
		return conflictError(err, "serve")
	case errors.As(err, &ce):
		return connectError(ce.Err)
	}
	return err
}

// conflictError is what serve and provision say of existing settings that differ:
// every difference (err names them), and how to apply them on purpose with command.
func conflictError(err error, command string) error {
	return fmt.Errorf("%w. Fix this process's settings, or, to change the existing ones for every process "+
		"on purpose, run once with COMPACTOR_UPDATE_STREAMS=true or %s --update-streams", err, command)
}

// tenantProxyConfig is the node config of COMPACTOR_TENANT's proxy: with
// COMPACTOR_TENANTS_FILE, the tenant's policy defaults and profiles (its window, its
// limits); without, the process's own settings.
func tenantProxyConfig(env Env, ncfg node.Config) (node.Config, error) {
	if env.TenantsFile == "" {
		ncfg.Logger.Warn().Str("tenant", env.Tenant).Msg("a tenant's proxy without COMPACTOR_TENANTS_FILE sizes contexts " +
			"with this process's settings, not the tenant's")
		return ncfg, nil
	}
	f, err := tenants.Read(env.TenantsFile)
	if err != nil {
		return ncfg, fmt.Errorf("configuration: COMPACTOR_TENANTS_FILE: %w", err)
	}
	t, ok := f.Tenants[env.Tenant]
	if !ok {
		return ncfg, fmt.Errorf("configuration: COMPACTOR_TENANT %q is not a tenant of %s (tenants: %s)",
			env.Tenant, env.TenantsFile, strings.Join(f.Names(), ", "))
	}
	r, err := t.Resolver(env.Tenant, ncfg.Resolver)
	if err != nil {
		return ncfg, fmt.Errorf("configuration: %w", err)
	}
	ncfg.Resolver, ncfg.Profiles = r, t.ProfileFile()
	return ncfg, nil
}

// node is the configuration of the node env describes, observed by tel. env was
// validated when it was loaded, so its errors name the variables at fault.
func (e Env) node(log zerolog.Logger, tel telemetry.Telemetry) (node.Config, error) {
	return e.settings().Config(log, tel)
}

// validateView checks COMPACTOR_VIEW_LISTEN and COMPACTOR_VIEW_TOKEN. The view shows
// conversation content, so it runs only with a credential, except on a loopback
// address; and only in a process with the api role, whose NATS user may read what it
// shows.
func (e Env) validateView() error {
	if e.ViewToken != "" {
		if err := view.ValidateToken(e.ViewToken); err != nil {
			return bad("VIEW_TOKEN", "%v", strings.TrimPrefix(err.Error(), view.ErrConfig.Error()+": "))
		}
	}
	if e.ViewListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(e.ViewListen)
	if err != nil {
		return bad("VIEW_LISTEN", "must be host:port (e.g. 127.0.0.1:8080): %v", err)
	}
	if r, _ := e.roles(); !r.API {
		return bad("VIEW_LISTEN", "is set but COMPACTOR_ROLES (%s) has no api role: the view is served by the api role", e.Roles)
	}
	if e.ViewToken == "" && !loopbackAddress(host) {
		return bad("VIEW_LISTEN", "is %s, not a loopback address, and COMPACTOR_VIEW_TOKEN is empty: the view shows conversation content, "+
			"so it needs a token on any other address (or listen on 127.0.0.1)", e.ViewListen)
	}
	return nil
}

// loopbackAddress reports whether a listen host binds only the loopback interface. An
// empty host binds every interface; a name other than localhost may resolve to anything.
func loopbackAddress(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
