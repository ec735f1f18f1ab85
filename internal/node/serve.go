package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
)

// ServeConfig is a whole node's life: where NATS is (or an embedded server), the
// streams it provisions, the operators' listener and traces, and how long it drains.
type ServeConfig struct {
	Node Config

	// NATSURL is the server to connect to; "" starts an embedded server that listens
	// on Listen and stores its data in DataDir.
	NATSURL, Listen, DataDir string
	// NATSOptions authenticate the connection and set its TLS and inbox prefix.
	NATSOptions []nats.Option
	// NATSMonitorURLs are the servers' monitoring URLs, where the node reads whether
	// they sync every write (none: the system account is asked; see
	// jetstream.ReadDurability).
	NATSMonitorURLs []string
	// JetStream is the contract's streams, buckets and consumers, created when
	// missing and compared when present.
	JetStream jetstream.Config

	// HTTPListen is the operators' listener's host:port ("": off).
	HTTPListen string
	// OTelEndpoint and the OTEL_ variables that Node.Lookup finds say where traces
	// go (see telemetry.TracesEndpoint).
	OTelEndpoint string
	// Version is the build's version, in metrics and traces.
	Version string

	// DrainTimeout bounds the drain once ctx is done.
	DrainTimeout time.Duration

	// Tenants, when set, makes the node serve the tenants of a tenants file, each with
	// the roles of Node on streams of its own (JetStream.ForTenant), instead of the
	// deployment's own layout (docs/tenants.md).
	Tenants *TenantsSource
}

// ConnectError is a connection to NATS that could not be made: the server refused the
// credentials or TLS (a server that is away is waited for).
type ConnectError struct{ Err error }

func (e *ConnectError) Error() string { return e.Err.Error() }
func (e *ConnectError) Unwrap() error { return e.Err }

// Serve runs a node until ctx is done, then drains it within DrainTimeout. It binds the
// operators' listener first, starts the embedded server when no URL is given, waits
// for NATS and JetStream (retrying), provisions the contract and runs the roles.
// Provisioning that finds settings differing from cfg.JetStream's returns an error
// matching jetstream.ErrConflict; a refused connection, a *ConnectError. ctx done
// before NATS or JetStream was ready is no error.
func Serve(ctx context.Context, cfg ServeConfig) error {
	within := shutdownWithin(ctx, cfg.DrainTimeout)
	stopTracing, err := startTracing(ctx, &cfg, within)
	if err != nil {
		return err
	}
	defer stopTracing()
	log := cfg.Node.Logger
	// The operators' listener binds before NATS is dialled and serves from the start:
	// /healthz answers while serve waits for NATS, /readyz says what it waits for, and
	// both stay up while the roles drain.
	ready := telemetry.NewReadiness()
	if cfg.HTTPListen != "" {
		cfg.Node.Telemetry.Metrics = telemetry.NewMetrics(cfg.Version)
		stop, err := runOps(ctx, cfg, ready, within)
		if err != nil {
			return err
		}
		defer stop()
	}
	url := cfg.NATSURL
	var own *jetstream.Durability // the embedded server's setting
	if url == "" {
		srv, err := embedded.Start(embedded.Config{Listen: cfg.Listen, DataDir: cfg.DataDir, Logger: log})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
		log.Info().Str("url", url).Str("data_dir", cfg.DataDir).Msg("embedded NATS server started")
		d := jetstream.EmbeddedDurability(srv.NATS().Name(), srv.SyncsEveryWrite(), srv.NATS().JetStreamConfig().SyncInterval)
		own = &d
	}
	// A service waits for NATS and JetStream instead of exiting: an orchestrator may
	// start it first, and a cluster has no JetStream until it elects a meta leader. A
	// server that refuses the credentials or TLS stops it at once.
	nc, err := natsconn.ConnectRetrying(ctx, url, "compactor", jetstream.DefaultBackoff(), log, cfg.NATSOptions...)
	switch {
	case err != nil && ctx.Err() != nil:
		log.Info().Err(err).Msg("stopped before NATS was reachable")
		return nil
	case err != nil:
		return &ConnectError{Err: err}
	}
	defer nc.Close()
	if own != nil {
		// The CLI's users have no system account to ask the embedded server: this
		// process says what it knows.
		if _, err := jetstream.AnswerDurability(nc, *own); err != nil {
			log.Warn().Err(err).Msg("answer on " + jetstream.DurabilitySubject)
		}
	}
	// In the background: reading the servers' settings never holds up the start.
	durabilityRead := make(chan struct{})
	go func() {
		defer close(durabilityRead)
		reportDurability(ctx, cfg, nc, own, ready)
	}()
	defer func() { <-durabilityRead }()
	if cfg.Tenants != nil {
		return serveTenants(ctx, cfg, nc, ready)
	}
	ready.Starting("provisioning JetStream")
	st, err := jetstream.ProvisionRetrying(ctx, nc, cfg.JetStream, jetstream.DefaultBackoff(), log)
	switch {
	case errors.Is(err, jetstream.ErrConflict):
		return err
	case err != nil && ctx.Err() != nil:
		log.Info().Err(err).Msg("stopped before JetStream was ready")
		return nil
	case err != nil:
		return err
	}
	n, err := New(cfg.Node, nc, st)
	if err != nil {
		return err
	}
	// In the background: recording the policy defaults never holds up the start; they
	// are withdrawn when ctx is done.
	policyChecked := make(chan struct{})
	pctx, stopPolicy := context.WithCancel(ctx)
	go func() {
		defer close(policyChecked)
		AnnouncePolicy(pctx, cfg.Node, st)
	}()
	defer func() {
		stopPolicy()
		<-policyChecked
	}()
	ready.Running(st)
	defer ready.Stopping()
	return runUntilDrained(ctx, n.Run, cfg.DrainTimeout, ready, n.log)
}

// shutdownWithin is how long what runs after the roles stopped (the listener's last
// requests, the last spans) gets: at most 5 s, and never more than what the drain
// timeout has left once ctx is done, so the process exits within it.
func shutdownWithin(ctx context.Context, drainTimeout time.Duration) func() time.Duration {
	var stopBy atomic.Pointer[time.Time]
	context.AfterFunc(ctx, func() {
		t := time.Now().Add(drainTimeout)
		stopBy.Store(&t)
	})
	return func() time.Duration {
		if t := stopBy.Load(); t != nil {
			return min(5*time.Second, max(time.Until(*t), time.Millisecond))
		}
		return 5 * time.Second
	}
}

// startTracing turns traces on when an OTLP endpoint is configured, giving the node
// its tracer provider; stop flushes the last spans, waiting at most within().
func startTracing(ctx context.Context, cfg *ServeConfig, within func() time.Duration) (stop func(), err error) {
	log := cfg.Node.Logger
	tp, err := telemetry.NewTracing(ctx, cfg.OTelEndpoint, cfg.Node.Lookup, cfg.Version, cfg.Node.IDs)
	if err != nil {
		return nil, err
	}
	if tp == nil {
		return func() {}, nil
	}
	otel.SetErrorHandler(telemetry.ErrorHandler(log, 10*time.Second))
	cfg.Node.Telemetry.Traces = tp
	log.Info().Msg("traces on (OTLP/HTTP)")
	return func() {
		if err := telemetry.ShutdownTracing(tp, within()); err != nil {
			log.Warn().Err(err).Msg("flush the last spans")
		}
	}, nil
}

// runOps starts the operators' listener; stop ends it, waiting at most within().
func runOps(ctx context.Context, cfg ServeConfig, ready *telemetry.Readiness, within func() time.Duration) (stop func(), err error) {
	log := cfg.Node.Logger
	ops, err := telemetry.NewOpsServer(cfg.HTTPListen, log, ready, cfg.Node.Telemetry.Metrics)
	if err != nil {
		return nil, err
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
	return func() {
		stopOps()
		select {
		case <-opsDone:
		case <-time.After(within()): // a profile being taken is cut by the exit
		}
	}, nil
}

// runUntilDrained runs the roles; once ctx is done they stop taking work and finish
// what they hold, within drain.
func runUntilDrained(ctx context.Context, run func(context.Context) error, drain time.Duration, ready *telemetry.Readiness, log zerolog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	ready.Stopping()
	log.Info().Dur("drain_timeout", drain).Msg("shutting down; draining in-flight work")
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		log.Info().Msg("stopped")
		return nil
	case <-time.After(drain):
		return fmt.Errorf("in-flight work did not drain within %s (COMPACTOR_DRAIN_TIMEOUT); unacked requests will be redelivered", drain)
	}
}

// serveTenants runs the roles of every tenant of the tenants file until ctx is done,
// then drains them within the drain timeout. With a web view address, one listener serves
// each running tenant's view (tenantViews). A tenants file that does not read or
// check at start stops the process: nothing would be served.
func serveTenants(ctx context.Context, cfg ServeConfig, nc *nats.Conn, ready *telemetry.Readiness) error {
	if cfg.Node.Roles.Proxy {
		return errors.New("node: a proxy serves one tenant: run `compactor proxy` with COMPACTOR_TENANT=<tenant>, one per tenant, " +
			"not with COMPACTOR_TENANTS_FILE")
	}
	ts := newTenantSet(cfg, nc)
	f, err := ts.read()
	if err != nil {
		return err
	}
	run := func(ctx context.Context) error { return ts.run(ctx, f) }
	if cfg.Node.ViewListen != "" {
		if ts.views, err = newTenantViews(cfg.Node); err != nil {
			return err
		}
		run = ts.views.alongside(run)
	}
	if m := cfg.Node.Telemetry.Metrics; m != nil {
		m.Connection(nc) // the process's; each tenant's roles report as that tenant's
	}
	cfg.Node.Logger.Info().Strs("tenants", f.Names()).Str("file", cfg.Tenants.Path).Msg("serving tenants")
	ready.Running(ts)
	defer ready.Stopping()
	return runUntilDrained(ctx, run, cfg.DrainTimeout, ready, cfg.Node.Logger)
}

// reportDurability says at start whether the NATS servers sync every write to disk
// (own: the embedded server's setting; else read from the servers), and keeps it in
// /readyz's answer. A server that does not, or a setting this process cannot read, is
// a warning: an OS crash or a power loss may lose what it acknowledged.
func reportDurability(ctx context.Context, cfg ServeConfig, nc *nats.Conn, own *jetstream.Durability, ready *telemetry.Readiness) {
	log := cfg.Node.Logger
	var d jetstream.Durability
	if own != nil {
		d = *own
	} else {
		d = readDurability(ctx, cfg, nc)
		if ctx.Err() != nil {
			return
		}
	}
	ready.Detail("durability", d.String())
	if m := cfg.Node.Telemetry.Metrics; m != nil {
		m.SyncsEveryWrite(d.Known(), d.SyncsEveryWrite())
	}
	switch {
	case d.SyncsEveryWrite():
		log.Info().Str("durability", d.String()).Msg("the NATS servers sync every write to disk before acknowledging it")
	case !d.Known():
		log.Warn().Str("durability", d.String()).Msg("whether the NATS servers sync every write to disk is unknown: " +
			"with nats-server's default (a flush every 2 minutes) an OS crash or power loss loses acknowledged messages")
	default:
		log.Warn().Str("durability", d.String()).Msg("a NATS server does not sync every write to disk: " +
			"an OS crash or power loss loses the messages it acknowledged since its last flush (set sync_interval: always)")
	}
}

// readDurability reads the servers' setting from the monitoring URLs, else from the
// system account on a connection of its own, like nc's: a publish the server refuses
// this user is not one of the node's refusals (logged, counted, in /readyz).
func readDurability(ctx context.Context, cfg ServeConfig, nc *nats.Conn) jetstream.Durability {
	if len(cfg.NATSMonitorURLs) > 0 {
		return jetstream.ReadDurability(ctx, nil, cfg.NATSMonitorURLs)
	}
	if nc.AuthRequired() {
		return jetstream.ReadDurabilityAsJetStreamUser(ctx, nc, nil) // never asked: unknown, saying why
	}
	// Its async errors are not the node's: a refused $SYS request is the expected
	// answer for an ordinary account's user (nats.go would print it on stderr).
	ask, err := nats.Connect(nc.ConnectedUrl(), append(slices.Clone(cfg.NATSOptions), nats.Name("compactor-durability"), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {}))...)
	if err != nil {
		return jetstream.Durability{Unknown: fmt.Sprintf("%s: %v", jetstream.UnknownDurabilityHint, err)}
	}
	defer ask.Close()
	return jetstream.ReadDurability(ctx, ask, nil)
}
