package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/savings/savingsview"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas/tokens"
)

// viewServer is the web view's listener (COMPACTOR_VIEW_LISTEN).
type viewServer struct {
	ln  net.Listener
	srv *http.Server
	log zerolog.Logger
	tok bool
}

// newViewServer binds addr now, so a port in use stops start-up instead of failing later.
func newViewServer(cfg Config, st *jetstream.Store, policies PolicySourcer) (*viewServer, error) {
	v, err := view.New(viewConfig(cfg, ""), st, policies, counters(cfg), cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	return listenView(cfg, v.Handler())
}

// viewConfig is the view's configuration in a node of cfg, for tenant ("": the
// deployment's own view).
func viewConfig(cfg Config, tenant string) view.Config {
	vcfg := view.DefaultConfig()
	vcfg.Token, vcfg.Savings = cfg.ViewToken, savingsview.Reader(cfg.ViewPrices)
	if tenant != "" {
		vcfg.Token, vcfg.Tenant = "", tenant // the Tenants handler checks the credentials
	}
	return vcfg
}

// counters is the view's token counters: the node's, or chars/4.
func counters(cfg Config) func(string) (tokens.Counter, error) {
	if cfg.Counters == nil {
		return func(string) (tokens.Counter, error) { return tokens.Chars4{}, nil }
	}
	return cfg.Counters
}

// listenView binds COMPACTOR_VIEW_LISTEN for handler h.
func listenView(cfg Config, h http.Handler) (*viewServer, error) {
	ln, err := net.Listen("tcp", cfg.ViewListen)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	return &viewServer{ln: ln, log: cfg.Logger, tok: cfg.ViewToken != "", srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}}, nil
}

// Addr is the address the listener is bound to.
func (s *viewServer) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx is done, then lets the pages being built finish for a few
// seconds.
func (s *viewServer) Run(ctx context.Context) error {
	ev := s.log.Info().Str("addr", s.Addr()).Bool("token", s.tok)
	if !s.tok {
		ev = s.log.Warn().Str("addr", s.Addr()).Bool("token", false)
	}
	ev.Msg("web view listening (read-only; it shows conversation content)")
	return telemetry.ServeUntilDone(ctx, s.srv, s.ln, "web view")
}
