package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// OpsServer is the operators' HTTP listener (COMPACTOR_HTTP_LISTEN): /healthz, /readyz,
// /metrics and the profiles of net/http/pprof. Its handlers live on a mux of its own:
// importing net/http/pprof also registers them on http.DefaultServeMux, which nothing
// here serves, so no other listener of the process can expose them by accident.
type OpsServer struct {
	ln  net.Listener
	srv *http.Server
	log zerolog.Logger
}

// NewOpsServer binds addr now, so a port in use stops start-up instead of failing later.
// ready answers /readyz; m, when not nil, is served on /metrics.
func NewOpsServer(addr string, log zerolog.Logger, ready *Readiness, m *Metrics) (*OpsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("COMPACTOR_HTTP_LISTEN: %w", err)
	}
	mux := http.NewServeMux()
	// Liveness: the process answers. It never depends on NATS, so an orchestrator does
	// not restart a healthy process because NATS is away (Readiness says that).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		err := ready.Check(r.Context())
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
		} else {
			_, _ = w.Write([]byte("ok\n"))
		}
		// What an operator should know that does not make the process unready.
		for _, d := range ready.Details() {
			_, _ = fmt.Fprintln(w, d)
		}
	})
	if m != nil {
		mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(m.Registry(), promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{
			Registry:            m.Registry(),
			MaxRequestsInFlight: 4,
			Timeout:             10 * time.Second,
		})))
	}
	// Not /debug/pprof/cmdline: it answers the command line, where serve may have been
	// given --token or --password, to anyone who can scrape this listener.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &OpsServer{ln: ln, log: log, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
	}}, nil
}

// Addr is the address the listener is bound to (the port chosen for ":0").
func (o *OpsServer) Addr() string { return o.ln.Addr().String() }

// Run serves until ctx is done, then lets the requests in flight finish for a few
// seconds: a 30-second CPU profile being taken is cut, not waited for.
func (o *OpsServer) Run(ctx context.Context) error {
	o.log.Info().Str("addr", o.Addr()).Msg("HTTP listener for operators (/healthz, /readyz, /metrics, /debug/pprof/)")
	return ServeUntilDone(ctx, o.srv, o.ln, "HTTP listener")
}

// ServeUntilDone serves srv on ln until ctx is done, then lets the requests in flight
// finish for up to 5 seconds and closes what is left. An error of the server's own
// (not its closing) is returned, prefixed with what.
func ServeUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, what string) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("%s: %w", what, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Readiness probes are cheap for the server: one JetStream call per readyTTL at most,
// whatever the number of probes, each bounded by readyTimeout.
const (
	readyTTL     = time.Second
	readyTimeout = 2 * time.Second
	// refusedFor is how long a refused pull or ack keeps the process not ready: a
	// refused consumer is refused again at each of its pulls, every half minute or so.
	refusedFor = 90 * time.Second
)

// Readiness answers /readyz: ready when start-up has connected and provisioned, the
// NATS connection is connected, JetStream answers (jetstream.Store.Ping), and the
// server has not refused a pull from or an ack to one of the process's consumers
// within refusedFor (jetstream.Store.ConsumerRefused: its work would stall). The
// answer is kept for readyTTL; probes that come while one is asked wait for it.
type Readiness struct {
	mu      sync.Mutex
	store   Health // nil until provisioned
	phase   string // why not ready before or after running ("" while running)
	at      time.Time
	lastErr error
	details map[string]string // name: line, shown after the answer
}

// Detail sets a line /readyz adds after its answer, "name: line", ready or not (e.g.
// whether the servers sync every write); it never makes the process unready.
func (r *Readiness) Detail(name, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.details == nil {
		r.details = map[string]string{}
	}
	r.details[name] = line
}

// Details are the lines Detail set, sorted by name.
func (r *Readiness) Details() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.details))
	for k, v := range r.details {
		out = append(out, k+": "+v)
	}
	sort.Strings(out)
	return out
}

// NewReadiness is not ready: it is connecting to NATS.
func NewReadiness() *Readiness { return &Readiness{phase: "connecting to NATS"} }

// Starting says what start-up waits for.
func (r *Readiness) Starting(phase string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = phase
}

// Health is what readiness asks once the roles run: a store, or a node's tenants.
type Health interface {
	// Ping is nil while the connection and JetStream answer.
	Ping(ctx context.Context) error
	// ConsumerRefused is the server's refusal of a consumer within d (nil: none).
	ConsumerRefused(d time.Duration) error
}

// Running makes the Readiness follow st's connection and JetStream.
func (r *Readiness) Running(st Health) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.store, r.phase, r.at = st, "", time.Time{}
}

// Stopping reports not ready from now on.
func (r *Readiness) Stopping() { r.Starting("shutting down") }

// Check is nil when ready, else what readiness waits for or the error JetStream gave.
func (r *Readiness) Check(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase != "" {
		return errors.New(r.phase)
	}
	if time.Since(r.at) < readyTTL {
		return r.lastErr
	}
	// The answer is shared with the probes waiting for it: one that gives up does not
	// make it a cancellation.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	r.lastErr = r.store.Ping(ctx)
	if r.lastErr == nil {
		r.lastErr = r.store.ConsumerRefused(refusedFor)
	}
	r.at = time.Now()
	return r.lastErr
}
