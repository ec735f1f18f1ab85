package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// cpu is the CPU time the server's process used so far, -1 when it is not a child
	// process of the bench's that can be read (an external or embedded server).
	cpu func() time.Duration
	// bin is the nats-server binary of a "process" server: the durability measurement
	// starts two more of it. monitor is its monitoring URL, where the durability
	// measurement checks the setting it started it with.
	bin, monitor string
}

// The JetStream flushing of the servers the bench starts. The measurements but the
// durability one run on nats-server's own default (a flush every 2 minutes), as the
// figures recorded before the shipped settings changed were; the durability one
// compares it with syncing every write, the shipped setting.
const (
	syncDefault = ""
	syncAlways  = "always"
)

func noCPU() time.Duration { return -1 }

// startServer connects to cfg.NATSURL, or starts a nats-server process (cfg.NATSServer,
// else nats-server on PATH), or, when there is none, an embedded server: then the
// process's heap holds the server's too, which the report says.
func startServer(cfg Config) (*server, error) {
	if cfg.NATSURL != "" {
		return &server{URL: cfg.NATSURL, Kind: "external", Note: "the server at --nats-url", stop: func() {}, cpu: noCPU}, nil
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
	var buildErr error
	built := false
	if bin == "" {
		bin, buildErr = buildNATSServer(dir, cfg.Progress)
		built = bin != ""
	}
	if bin == "" {
		return startEmbedded(dir, buildErr, syncDefault)
	}
	return startProcess(bin, dir, built, syncDefault)
}

// startLike starts another server of srv's kind (not an external one), flushing as
// sync says (syncDefault or syncAlways).
func startLike(srv *server, sync string) (*server, error) {
	dir, err := os.MkdirTemp("", "compactor-bench-")
	if err != nil {
		return nil, err
	}
	switch srv.Kind {
	case "process":
		return startProcess(srv.bin, dir, false, sync)
	case "embedded":
		return startEmbedded(dir, nil, sync)
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("cannot start another %s server", srv.Kind)
}

// startEmbedded starts an embedded server storing into dir, its note saying why
// (buildErr: why go build made no nats-server).
func startEmbedded(dir string, buildErr error, sync string) (*server, error) {
	interval := 2 * time.Minute // nats-server's own default
	if sync == syncAlways {
		interval = 0 // embedded: every write
	}
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir, SyncInterval: interval})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &server{URL: srv.ClientURL(), Kind: "embedded",
		Note: fmt.Sprintf("no nats-server (--nats-server PATH, nats-server on PATH, or go build of the module's: %v): "+
			"the server runs inside this process, sharing its CPU and heap; the heap per conversation includes the server's share", buildErr),
		stop: func() { srv.Shutdown(); os.RemoveAll(dir) }, cpu: noCPU}, nil
}

// startProcess starts the nats-server bin (built: by go build) in a process of its
// own, storing into dir, and waits until it accepts connections.
func startProcess(bin, dir string, built bool, sync string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var logs bytes.Buffer
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-m", strconv.Itoa(mport), "-js", "-sd", filepath.Join(dir, "js")}
	if sync == syncAlways {
		conf := filepath.Join(dir, "sync.conf")
		if err := os.WriteFile(conf, []byte("jetstream {\n  sync_interval: always\n}\n"), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, "-c", conf)
	}
	cmd := exec.Command(bin, args...)
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
	if err := awaitServer(url, bin, dir, exited, &logs, stop); err != nil {
		return nil, err
	}
	version := "nats-server"
	if out, err := exec.Command(bin, "--version").Output(); err == nil {
		version = string(bytes.TrimSpace(out))
	}
	how := bin
	if built {
		how = "built by go build from the version go.mod pins"
	}
	pid := cmd.Process.Pid
	return &server{URL: url, Kind: "process", Note: fmt.Sprintf("%s (%s) in its own process", version, how), stop: stop,
		cpu: func() time.Duration { return procCPU(pid) }, bin: bin, monitor: fmt.Sprintf("http://127.0.0.1:%d", mport)}, nil
}

// awaitServer waits until the server process of bin accepts connections at url: an
// error (dir removed) when it exited first, with its logs, or (stopped) when 20s
// passed.
func awaitServer(url, bin, dir string, exited <-chan error, logs *bytes.Buffer, stop func()) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return nil
		}
		select {
		case err := <-exited:
			os.RemoveAll(dir)
			return fmt.Errorf("%s exited: %v\n%s", bin, err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return errors.New(bin + " did not accept connections within 20s")
		}
	}
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

// buildNATSServer builds the nats-server go.mod pins (the go tool, in the module the
// working directory is in) into dir: the version the embedded server and the tests
// run.
func buildNATSServer(dir string, progress io.Writer) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	if progress != nil {
		fmt.Fprintln(progress, "building nats-server (the version go.mod pins)")
	}
	bin := filepath.Join(dir, "nats-server")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server: %v: %s", err, bytes.TrimSpace(out))
	}
	return bin, nil
}
