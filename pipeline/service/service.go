// Package service is the NATS micro service "compactor": any client, in any language,
// asks for a compaction and may wait for its outcome (compactor.compact), reads where a
// conversation's context starts (compactor.context), its status (compactor.status),
// reads or changes its policy (compactor.policy), deletes it for good
// (compactor.forget), and returns its raw messages behind a summary (compactor.recall). One file per endpoint; the policy's read-modify-write lives here
// only (the CLI asks this service too).
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid service config")

// PolicySource resolves a conversation's settings (defaults, environment, profile and
// the conversation's own policy). When the conversation's policy is invalid, it returns
// an error matching policy.ErrPolicy.
type PolicySource interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// Config sets up the compactor service.
type Config struct {
	// MaxWait caps wait_ms. 0: 5m.
	MaxWait time.Duration
	// MaxConcurrentWaits bounds the compact requests waiting for their outcome at once;
	// one more is answered 503. 0: 256.
	MaxConcurrentWaits int
	// MaxConcurrentRequests bounds the requests each endpoint of this instance serves
	// at once (a forget may take up to a minute, a recall reads CHAT); one more is
	// answered Busy at once: code 503, a description that starts "busy: ". A compact
	// request waiting for its outcome counts against MaxConcurrentWaits instead. 0: 16.
	MaxConcurrentRequests int
	// Version is the service's SemVer, shown by $SRV.INFO. "": 1.0.0.
	Version string
	// Tracer, when set, makes each manual compaction a trace that the request's headers
	// carry to the worker (W3C trace context). nil: no traces.
	Tracer trace.TracerProvider
	// Tenant, when set, serves that tenant's conversations (the store must be the
	// tenant's, jetstream.Config.ForTenant) on compactor.<tenant>.<endpoint>: the subjects
	// a tenant's account imports as compactor.<endpoint> (docs/tenants.md). "": the
	// deployment's own conversations, on compactor.<endpoint>.
	Tenant string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{MaxWait: 5 * time.Minute, MaxConcurrentWaits: 256, MaxConcurrentRequests: 16, Version: "1.0.0"}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxWait == 0 {
		c.MaxWait = d.MaxWait
	}
	if c.MaxConcurrentWaits == 0 {
		c.MaxConcurrentWaits = d.MaxConcurrentWaits
	}
	if c.MaxConcurrentRequests == 0 {
		c.MaxConcurrentRequests = d.MaxConcurrentRequests
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	return c
}

// Validate checks the config (zero fields mean the defaults).
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.MaxWait < 0:
		return bad("max wait must not be negative")
	case c.MaxConcurrentWaits < 0:
		return bad("max concurrent waits must not be negative")
	case c.MaxConcurrentRequests < 0:
		return bad("max concurrent requests must not be negative")
	}
	if c.Tenant != "" {
		if err := jetstream.ValidateTenant(c.Tenant); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// Service is the NATS micro service "compactor": any client, in any language, asks
// for a compaction (and may wait for its outcome), reads where a conversation's context
// starts, its status, and reads or changes its policy. Every serve process may run it:
// the endpoints share a queue group, so requests are spread over the instances. Its
// name, subjects and payloads are the wire contract in package schemas
// (schemas.CompactSubject, schemas.CompactRequest, ... and the service-*.v1.json files).
type Service struct {
	cfg      Config
	nc       *nats.Conn
	store    *jetstream.Store
	policies PolicySource
	check    func(policy.Layer) (policy.Settings, error)
	log      zerolog.Logger
	// forget is store.Forget; a test makes it wait on something it controls.
	forget func(ctx context.Context, conv string) (schemas.ForgetResponse, error)

	waits    chan struct{} // one token per compact request waiting for its outcome
	stopping chan struct{} // closed when Run's ctx is done: waits answer at once

	mu       sync.Mutex
	closed   bool           // set once no handler may start work any more
	inFlight sync.WaitGroup // handlers and waits: Add under mu while !closed, or by a handler counted in it
}

// opTimeout bounds the NATS calls of one request.
const opTimeout = 10 * time.Second

// New returns the service; Run adds it to nc. check resolves a conversation policy
// against the server's tiers (environment, profiles).
func New(cfg Config, nc *nats.Conn, store *jetstream.Store, policies PolicySource,
	check func(policy.Layer) (policy.Settings, error), log zerolog.Logger) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case nc == nil || store == nil:
		return nil, fmt.Errorf("%w: a connection and a store are required", ErrConfig)
	case store.Config().Tenant != cfg.Tenant:
		return nil, fmt.Errorf("%w: the service of tenant %q needs that tenant's store, not tenant %q's", ErrConfig, cfg.Tenant, store.Config().Tenant)
	case policies == nil:
		return nil, fmt.Errorf("%w: a policy source is required", ErrConfig)
	case check == nil:
		return nil, fmt.Errorf("%w: a policy check is required", ErrConfig)
	}
	lctx := log.With().Str("component", "service")
	if cfg.Tenant != "" {
		lctx = lctx.Str("tenant", cfg.Tenant)
	}
	return &Service{cfg: cfg, nc: nc, store: store, policies: policies, check: check, forget: store.Forget,
		log:   lctx.Logger(),
		waits: make(chan struct{}, cfg.MaxConcurrentWaits), stopping: make(chan struct{})}, nil
}

// Run adds the service and serves until ctx is done; then it stops taking requests,
// answers the waiting compact requests (status queued, the service is stopping), lets
// the requests in hand finish and returns. Run is called once.
func (s *Service) Run(ctx context.Context) error {
	nc := s.nc
	group, meta := schemas.ServiceName, map[string]string(nil)
	if s.cfg.Tenant != "" {
		group, meta = schemas.ServiceName+"."+s.cfg.Tenant, map[string]string{"tenant": s.cfg.Tenant}
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        schemas.ServiceName,
		Version:     s.cfg.Version,
		Metadata:    meta,
		Description: "Compactor: compaction requests, context pointers, status, policies, recall and deletion of LLM conversations",
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Error().Str("subject", e.Subject).Str("error", e.Description).Msg("service subscription error")
		},
	})
	if err != nil {
		s.shutdown(nc, nil)
		return fmt.Errorf("add service %s: %w", schemas.ServiceName, err)
	}
	g := svc.AddGroup(group)
	for _, ep := range []struct {
		name, request string
		h             handler
	}{
		{"compact", `{conversation, request_id?, instructions?, wait_ms?}`, s.onCompact},
		{"context", `{conversation, format?: openai|anthropic|responses|gemini}`, s.onContext},
		{"status", `{conversation?}`, s.onStatus},
		{"policy", `{conversation, set?: {key: value}, clear?: bool}`, s.onPolicy},
		{"forget", `{conversation}`, s.onForget},
		{"recall", `{conversation, query?, from_seq?, to_seq?, max_tokens?}`, s.onRecall},
	} {
		if err := g.AddEndpoint(ep.name, s.wrap(ep.name, ep.h),
			micro.WithEndpointMetadata(map[string]string{"format": "application/json", "request": ep.request})); err != nil {
			s.shutdown(nc, svc)
			return fmt.Errorf("add endpoint %s.%s: %w", group, ep.name, err)
		}
	}
	s.log.Info().Str("id", svc.Info().ID).Msg("compactor service started")
	<-ctx.Done()
	s.shutdown(nc, svc)
	s.log.Info().Msg("compactor service stopped")
	return nil
}

// shutdown stops the service and waits for the work in hand. The endpoints' pending
// requests (received before the unsubscribe) are still handled: the flush makes sure
// the server sends no more, the barrier that every callback before it has returned.
func (s *Service) shutdown(nc *nats.Conn, svc micro.Service) {
	close(s.stopping)
	if svc != nil {
		if err := svc.Stop(); err != nil {
			s.log.Warn().Err(err).Msg("stop service")
		}
		if err := nc.FlushTimeout(5 * time.Second); err == nil {
			drained := make(chan struct{})
			if nc.Barrier(func() { close(drained) }) == nil {
				select {
				case <-drained:
				case <-time.After(opTimeout):
					s.log.Warn().Msg("service requests still queued after 10s; answering the rest as stopping")
				}
			}
		}
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.inFlight.Wait()
}
