package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/embedded"
)

// server is the NATS server a run measures against.
type server struct {
	URL string
	// Kind says where it runs, for the report: "external", "process" or "embedded".
	Kind string
	// Note explains the choice when it matters for the figures.
	Note string
	stop func()
}

// startServer connects to cfg.NATSURL, or starts a nats-server process (cfg.NATSServer,
// else nats-server on PATH), or, when there is none, an embedded server: then the
// process's heap holds the server's too, which the report says.
func startServer(cfg Config) (*server, error) {
	if cfg.NATSURL != "" {
		return &server{URL: cfg.NATSURL, Kind: "external", Note: "the server at --nats-url", stop: func() {}}, nil
	}
	bin := cfg.NATSServer
	if bin == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			bin = p
		}
	}
	dir, err := os.MkdirTemp("", "compactor-bench-")
	if err != nil {
		return nil, err
	}
	if bin == "" {
		srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir})
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &server{URL: srv.ClientURL(), Kind: "embedded",
			Note: "no nats-server found (--nats-server PATH, or nats-server on PATH): the server runs inside this process, sharing its CPU and heap; the heap per conversation includes the server's share",
			stop: func() { srv.Shutdown(); os.RemoveAll(dir) }}, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js"))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			break
		}
		select {
		case err := <-exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s exited: %v\n%s", bin, err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New(bin + " did not accept connections within 20s")
		}
	}
	return &server{URL: url, Kind: "process", Note: "nats-server " + bin + " in its own process", stop: stop}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// wait polls cond every few milliseconds until it holds, ctx ends or d passes.
func wait(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
