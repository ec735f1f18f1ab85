package systemtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// What the tests that run real processes share beyond proctest (the binaries and their
// processes): `compactor serve` processes, nats-server processes that can be killed and
// started again on the same port and data, and each process's own way to the fake LLM.

// TestMain removes the binaries the tests built for this run.
func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

// waitForService waits until the compactor service of p answers on url, failing the
// test at once if p exits meanwhile.
func waitForService(t *testing.T, url string, p *proctest.Proc, when string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	eventually(t, 60*time.Second, "the compactor service to answer once "+when, func() bool {
		if msg := p.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
		m, err := nc.Request("compactor.status", []byte(`{}`), time.Second)
		return err == nil && m.Header.Get("Nats-Service-Error") == ""
	})
}

// serveProc is one `compactor serve` process.
type serveProc struct {
	*proctest.Proc
	route *llmRoute
}

// startServeProc runs `compactor serve` against natsURL, with route as its LLM and env
// (COMPACTOR_ variables) on top of this process's environment.
func startServeProc(t *testing.T, bin, name, natsURL string, route *llmRoute, env []string) *serveProc {
	t.Helper()
	env = append(env, "COMPACTOR_NATS_URL="+natsURL, "COMPACTOR_LLM_BASE_URL="+route.srv.URL)
	return &serveProc{Proc: proctest.Start(t, name, bin, []string{"serve"}, env), route: route}
}

// llmRoute is one process's way to the shared fake LLM: a server of its own in front
// of it, so that the test can hold that process's calls open.
type llmRoute struct {
	srv *httptest.Server
	// onCall, when set, runs first on every call.
	onCall func(r *llmRoute)

	calls     atomic.Int32 // every call
	inFlight  atomic.Int32 // calls not answered yet
	held      atomic.Int32 // calls that were held
	answered  atomic.Int32 // held calls let go on to the fake LLM
	abandoned atomic.Int32 // held calls whose caller went away first

	mu   sync.Mutex
	hold chan struct{} // non-nil: calls wait until it is closed
}

func newLLMRoute(t *testing.T, llm *fakellm.LLM, onCall func(r *llmRoute)) *llmRoute {
	t.Helper()
	r := &llmRoute{onCall: onCall}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.calls.Add(1)
		r.inFlight.Add(1)
		defer r.inFlight.Add(-1)
		if r.onCall != nil {
			r.onCall(r)
		}
		r.mu.Lock()
		hold := r.hold
		r.mu.Unlock()
		if hold != nil {
			r.held.Add(1)
			// Read the body now, so the server notices when the caller goes away.
			body, err := io.ReadAll(req.Body)
			if err != nil {
				r.abandoned.Add(1)
				return
			}
			select {
			case <-req.Context().Done(): // the process gave up the call, or died
				r.abandoned.Add(1)
				return
			case <-hold:
			}
			r.answered.Add(1)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		llm.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(r.release) // before Close: held calls go
	return r
}

// holdCalls makes this route's calls wait, from now on, until release or until their
// caller goes away.
func (r *llmRoute) holdCalls() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold == nil {
		r.hold = make(chan struct{})
	}
}

// release lets the held calls go on to the fake LLM, and later calls pass.
func (r *llmRoute) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

// natsNode is one nats-server process of the standalone binary, with JetStream, that
// can be killed and started again on the same port and data directory.
type natsNode struct {
	name, bin, dir string
	port           int
	args           []string // the cluster's, for a node of one
	proc           *proctest.Proc
	starts         int
}

// newNATSNode returns a node of the binary with a free port and a data directory of
// its own; start runs it.
func newNATSNode(t *testing.T, bin, name string, extra ...string) *natsNode {
	t.Helper()
	n := &natsNode{name: name, bin: bin, dir: t.TempDir(), port: proctest.FreePort(t)}
	n.args = append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.dir, "-n", name}, extra...)
	return n
}

// url is the node's client URL.
func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// start starts the node and waits until it takes clients.
func (n *natsNode) start(t *testing.T) {
	t.Helper()
	n.starts++
	n.proc = proctest.Start(t, fmt.Sprintf("%s (start %d)", n.name, n.starts), n.bin, n.args, nil)
	proctest.WaitFor(t, 30*time.Second, n.name+" to take clients", func() error {
		if n.proc.Exited() {
			t.Fatalf("%s exited at start: %v\n%s", n.name, n.proc.Err(), n.proc.Logs.String())
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// jetStreamReady waits until JetStream at url answers account info, connecting with
// opts (a user's credentials).
func jetStreamReady(t *testing.T, url string, within time.Duration, opts ...nats.Option) {
	t.Helper()
	proctest.WaitFor(t, within, "JetStream at "+url, func() error {
		nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(time.Second)}, opts...)...)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := natsjs.New(nc)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err
	})
}
