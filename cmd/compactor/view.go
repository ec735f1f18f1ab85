package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/view"
)

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
	if r, _ := e.roles(); !r.api {
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

// viewServer is the web view's listener (COMPACTOR_VIEW_LISTEN).
type viewServer struct {
	ln  net.Listener
	srv *http.Server
	log zerolog.Logger
	tok bool
}

// newViewServer binds addr now, so a port in use stops start-up instead of failing later.
func newViewServer(env Env, st *jetstream.Store, policies policySource, log zerolog.Logger) (*viewServer, error) {
	cfg := view.DefaultConfig()
	cfg.Token = env.ViewToken
	v, err := view.New(cfg, st, policies, env.counters.get, log)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	ln, err := net.Listen("tcp", env.ViewListen)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_VIEW_LISTEN: %w", err)
	}
	return &viewServer{ln: ln, log: log, tok: env.ViewToken != "", srv: &http.Server{
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
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("web view: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web view: %w", err)
	}
	return nil
}
