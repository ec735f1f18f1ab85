package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

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
	log := cfg.Logger
	vcfg := view.DefaultConfig()
	vcfg.Token = cfg.ViewToken
	counters := cfg.Counters
	if counters == nil {
		counters = func(string) (tokens.Counter, error) { return tokens.Chars4{}, nil }
	}
	v, err := view.New(vcfg, st, policies, counters, log)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.ViewListen)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	return &viewServer{ln: ln, log: log, tok: cfg.ViewToken != "", srv: &http.Server{
		Handler:           v.Handler(),
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
