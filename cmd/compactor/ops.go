package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/rs/zerolog"
)

// opsServer is the operators' HTTP listener (COMPACTOR_HTTP_LISTEN): /healthz and the
// profiles of net/http/pprof. Its handlers live on a mux of its own: importing
// net/http/pprof also registers them on http.DefaultServeMux, which nothing here serves,
// so no other listener of the process can expose them by accident.
type opsServer struct {
	ln  net.Listener
	srv *http.Server
	log zerolog.Logger
}

// newOpsServer binds addr now, so a port in use stops start-up instead of failing later.
func newOpsServer(addr string, log zerolog.Logger) (*opsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_HTTP_LISTEN: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &opsServer{ln: ln, log: log, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}}, nil
}

// Addr is the address the listener is bound to (the port chosen for ":0").
func (o *opsServer) Addr() string { return o.ln.Addr().String() }

// Run serves until ctx is done, then lets the requests in flight finish for a few
// seconds: a 30-second CPU profile being taken is cut, not waited for.
func (o *opsServer) Run(ctx context.Context) error {
	o.log.Info().Str("addr", o.Addr()).Msg("HTTP listener for operators (/healthz, /debug/pprof/)")
	served := make(chan error, 1)
	go func() { served <- o.srv.Serve(o.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("HTTP listener: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.srv.Shutdown(sctx); err != nil {
		_ = o.srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("HTTP listener: %w", err)
	}
	return nil
}
