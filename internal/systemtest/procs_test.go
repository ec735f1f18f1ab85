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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// What the tests that run real processes share: the binaries (this command and a
// standalone nats-server), `compactor serve` processes, nats-server processes that can
// be killed and started again on the same port and data, and each process's own way
// to the fake LLM.

// TestMain removes the binaries the tests built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	binaries.mu.Lock()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
	}
	binaries.mu.Unlock()
	os.Exit(code)
}

// binaries are built once per test run, into one directory TestMain removes.
var binaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]builtBinary
}

type builtBinary struct {
	path string
	err  error
}

// buildBinary runs `go build -o <dir>/name pkg` in this module (so a dependency's
// version is the one go.mod pins) the first time name is asked for, and returns the
// path, or the build's error, every time.
func buildBinary(name, pkg string) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if b, ok := binaries.built[name]; ok {
		return b.path, b.err
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "compactor-test-bin-")
		if err != nil {
			return "", err
		}
		binaries.dir, binaries.built = dir, map[string]builtBinary{}
	}
	b := builtBinary{path: filepath.Join(binaries.dir, name)}
	if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	binaries.built[name] = b
	return b.path, b.err
}

// buildCompactor returns the binary of cmd/compactor, built from the module root.
func buildCompactor(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary("compactor", "github.com/compactor/compactor/cmd/compactor")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// natsServerBinary returns a standalone nats-server built from the module go.mod pins.
// A test that needs it skips when it cannot be built, and fails instead in CI
// (CI=true).
func natsServerBinary(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: a test that needs nats-server fails instead of skipping)", err)
		}
		t.Skipf("cannot build nats-server: %v", err)
	}
	return bin
}

// freePort returns a port of 127.0.0.1 that was free a moment ago: a server that must
// come back on the same port after a crash needs one it is given, not -1.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a child process whose output is kept, and whose exit is expected only when
// the test stopped it.
type proc struct {
	name string
	cmd  *exec.Cmd
	logs *logBuffer
	done chan struct{}
	err  error // set when done is closed
	// stopping is set before the test signals the process: an exit without it is
	// unexpected.
	stopping atomic.Bool
}

// startProc starts bin with args and env (added to this process's environment); it is
// killed at cleanup if still running, and its output is logged when the test failed.
func startProc(t *testing.T, name, bin string, args, env []string) *proc {
	t.Helper()
	p := &proc{name: name, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.exited() {
			p.stopping.Store(true)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d, %v):\n%s", name, p.cmd.Process.Pid, p.err, p.logs.tail(24<<10))
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// unexpectedExit describes the exit of a process the test did not stop, "" when it
// runs or was stopped.
func (p *proc) unexpectedExit() string {
	if !p.exited() || p.stopping.Load() {
		return ""
	}
	return fmt.Sprintf("%s (pid %d) exited on its own: %v\n%s", p.name, p.cmd.Process.Pid, p.err, p.logs.tail(16<<10))
}

// signal sends sig, the exit that follows being expected.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.stopping.Store(true)
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		t.Fatalf("%s %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit, failing t after d.
func (p *proc) wait(t *testing.T, d time.Duration, after string) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s still running %s after %s", p.name, d, after)
		return nil
	}
}

// kill SIGKILLs the process and waits until it is gone.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	_ = p.wait(t, 10*time.Second, "SIGKILL")
}

// logBuffer collects a process's output; safe for the goroutines that write it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitForService waits until the compactor service of p answers on url, failing the
// test at once if p exits meanwhile.
func waitForService(t *testing.T, url string, p *proc, when string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	eventually(t, 60*time.Second, "the compactor service to answer once "+when, func() bool {
		if msg := p.unexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
		m, err := nc.Request("compactor.status", []byte(`{}`), time.Second)
		return err == nil && m.Header.Get("Nats-Service-Error") == ""
	})
}

// tail is the last n bytes of the log, from a line start.
func (b *logBuffer) tail(n int) string {
	s := b.String()
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "[…]\n" + s
}

// serveProc is one `compactor serve` process.
type serveProc struct {
	*proc
	route *llmRoute
}

// startServeProc runs `compactor serve` against natsURL, with route as its LLM and env
// (COMPACTOR_ variables) on top of this process's environment.
func startServeProc(t *testing.T, bin, name, natsURL string, route *llmRoute, env []string) *serveProc {
	t.Helper()
	env = append(env, "COMPACTOR_NATS_URL="+natsURL, "COMPACTOR_LLM_BASE_URL="+route.srv.URL)
	return &serveProc{proc: startProc(t, name, bin, []string{"serve"}, env), route: route}
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

func newLLMRoute(t *testing.T, llm *fakeLLM, onCall func(r *llmRoute)) *llmRoute {
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
		llm.srv.Config.Handler.ServeHTTP(w, req)
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
	proc           *proc
	starts         int
}

// newNATSNode returns a node of the binary with a free port and a data directory of
// its own; start runs it.
func newNATSNode(t *testing.T, bin, name string, extra ...string) *natsNode {
	t.Helper()
	n := &natsNode{name: name, bin: bin, dir: t.TempDir(), port: freePort(t)}
	n.args = append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.dir, "-n", name}, extra...)
	return n
}

// url is the node's client URL.
func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// start starts the node and waits until it takes clients.
func (n *natsNode) start(t *testing.T) {
	t.Helper()
	n.starts++
	n.proc = startProc(t, fmt.Sprintf("%s (start %d)", n.name, n.starts), n.bin, n.args, nil)
	waitFor(t, 30*time.Second, n.name+" to take clients", func() error {
		if n.proc.exited() {
			t.Fatalf("%s exited at start: %v\n%s", n.name, n.proc.err, n.proc.logs.String())
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.port), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// jetStreamReady waits until JetStream at url answers account info.
func jetStreamReady(t *testing.T, url string, within time.Duration) {
	t.Helper()
	waitFor(t, within, "JetStream at "+url, func() error {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
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
