package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// A process that exits on its own is an unexpected exit, with its status and output;
// one the test signalled is not.
func TestProcExits(t *testing.T) {
	p := Start(t, "failing", "/bin/sh", []string{"-c", "echo out; echo err >&2; exit 3"}, nil)
	err := p.Wait(t, 10*time.Second, "start")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || p.Err() != err {
		t.Fatalf("Wait = %v, Err = %v; want exit status 3 from both", err, p.Err())
	}
	if logs := p.Logs.String(); logs != "out\nerr\n" {
		t.Errorf("logs %q; want standard output and error", logs)
	}
	if msg := p.UnexpectedExit(); !strings.Contains(msg, "failing (pid") || !strings.Contains(msg, "exit status 3") {
		t.Errorf("UnexpectedExit = %q; want the name and the status", msg)
	}

	q := Start(t, "sleeper", "/bin/sh", []string{"-c", "echo up; exec sleep 60"}, []string{"PROCTEST_X=1"})
	WaitFor(t, 10*time.Second, "the sleeper's output", func() error {
		if !strings.Contains(q.Logs.String(), "up") {
			return fmt.Errorf("logs %q", q.Logs.String())
		}
		return nil
	})
	if q.Exited() || q.UnexpectedExit() != "" {
		t.Fatalf("a running process exited: %s", q.UnexpectedExit())
	}
	q.Signal(t, syscall.SIGTERM)
	if err := q.Wait(t, 10*time.Second, "SIGTERM"); err == nil || !q.Exited() {
		t.Fatalf("Wait after SIGTERM = %v; want a signalled exit", err)
	}
	if msg := q.UnexpectedExit(); msg != "" {
		t.Errorf("a signalled exit counted as unexpected: %s", msg)
	}
}

// Tail starts at a line start and says it cut.
func TestLogBufferTail(t *testing.T) {
	var b LogBuffer
	fmt.Fprint(&b, "first line\nsecond line\nthird\n")
	if got := b.Tail(100); got != b.String() {
		t.Errorf("Tail of a short log = %q; want all of it", got)
	}
	if got := b.Tail(14); got != "[…]\nthird\n" {
		t.Errorf("Tail(14) = %q", got)
	}
}

// A binary is built once per name, its error kept, all in one directory.
func TestBuildWithOnce(t *testing.T) {
	calls := 0
	build := func(out string) error {
		calls++
		return os.WriteFile(out, []byte("#!/bin/sh\n"), 0o755)
	}
	a, err := BuildWith("proctest-a", build)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := BuildWith("proctest-a", build); err != nil || again != a || calls != 1 {
		t.Fatalf("second BuildWith = %q, %v after %d builds; want %q from the first", again, err, calls, a)
	}
	broken := errors.New("does not build")
	for range 2 {
		if _, err := BuildWith("proctest-b", func(string) error { calls++; return broken }); err != broken {
			t.Fatalf("BuildWith = %v; want the build's error", err)
		}
	}
	if calls != 2 {
		t.Errorf("%d builds; want one per name", calls)
	}
	if _, err := os.Stat(a); err != nil {
		t.Error(err)
	}
}

// FreePort's port takes a listener.
func TestFreePort(t *testing.T) {
	port := FreePort(t)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("port %d: %v", port, err)
	}
	ln.Close()
}
