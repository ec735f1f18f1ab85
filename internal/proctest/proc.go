package proctest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process whose output is kept, and whose exit is expected only when
// the test stopped it (Signal, Kill) or said it would (ExpectExit).
type Proc struct {
	// Name names the process in failures and logs.
	Name string
	// Cmd is the running command.
	Cmd *exec.Cmd
	// Logs is the process's output, standard output and error together.
	Logs *LogBuffer

	done chan struct{}
	err  error // set when done is closed
	// stopping is set before the test signals the process: an exit without it is
	// unexpected.
	stopping atomic.Bool
}

// Start starts bin with args and env (added to this process's environment); it is
// killed at cleanup if still running, and its output is logged when the test failed.
func Start(t testing.TB, name, bin string, args, env []string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Logs: &LogBuffer{}, done: make(chan struct{})}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if !p.Exited() {
			p.stopping.Store(true)
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s (pid %d, %v):\n%s", name, p.Cmd.Process.Pid, p.err, p.Logs.Tail(24<<10))
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is how the process exited (nil: status 0); it is set once Done is closed.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExpectExit marks the process's exit as expected: one that ends on its own.
func (p *Proc) ExpectExit() { p.stopping.Store(true) }

// UnexpectedExit describes the exit of a process the test did not stop, "" when it
// runs or was stopped.
func (p *Proc) UnexpectedExit() string {
	if !p.Exited() || p.stopping.Load() {
		return ""
	}
	return fmt.Sprintf("%s (pid %d) exited on its own: %v\n%s", p.Name, p.Cmd.Process.Pid, p.err, p.Logs.Tail(16<<10))
}

// Signal sends sig, the exit that follows being expected.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	p.stopping.Store(true)
	if err := p.Cmd.Process.Signal(sig); err != nil && !p.Exited() {
		t.Fatalf("%s %s: %v", sig, p.Name, err)
	}
}

// Wait waits for the process to exit and returns how it exited, failing t after d
// (after says after what, for the failure).
func (p *Proc) Wait(t testing.TB, d time.Duration, after string) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s still running %s after %s", p.Name, d, after)
		return nil
	}
}

// Kill SIGKILLs the process and waits until it is gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	_ = p.Wait(t, 10*time.Second, "SIGKILL")
}

// LogBuffer collects a process's output; safe for the goroutines that write it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail is the last n bytes written, from a line start.
func (b *LogBuffer) Tail(n int) string {
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

// FreePort returns a port of 127.0.0.1 that was free a moment ago: a server that must
// come back on the same port after a crash needs one it is given, not -1.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// WaitFor polls cond until it returns nil, failing t with cond's last error after d;
// what says what it waited for.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
