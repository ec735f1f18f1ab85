package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
)

// TriggerCommand is the hidden command a trigger process of the ingest measurement
// runs: `compactor bench-trigger --nats-url URL --namespace NS --window W`. It builds
// an unpartitioned trigger, writes "ready", starts it when a line "start" comes on its
// standard input, and stops when that input ends: so the bench reads the process's CPU
// around the drain and nothing else runs in it. A line "gc", before or after "start",
// collects garbage and returns freed memory to the system, then writes "gc done": the
// bench reads the process's resident set after it.
const TriggerCommand = "bench-trigger"

// RunTrigger runs a trigger in a bench namespace: the trigger process of the ingest
// measurement's drain (see TriggerCommand).
func RunTrigger(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet(TriggerCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("nats-url", "", "")
	ns := fs.String("namespace", "", "")
	window := fs.Int("window", benchWindow, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || !strings.HasPrefix(*ns, "bench") || *window < 1 {
		return errors.New(TriggerCommand + ": needs --nats-url, --namespace bench… and --window ≥ 1")
	}
	nc, st, err := openNamespace(ctx, *url, "bench-trigger-process", *ns)
	if err != nil {
		return err
	}
	defer nc.Close()
	n, err := node.New(node.Config{Roles: node.Roles{Trigger: true}, Trigger: triggerConfig(),
		Policies: fixedPolicy(settings(*window)), Logger: zerolog.Nop()}, nc, st)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	lines := bufio.NewScanner(in)
	for {
		if !lines.Scan() {
			return nil // the bench went away before starting it
		}
		if lines.Text() == "start" {
			break
		}
		obey(lines.Text(), out)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for lines.Scan() {
			obey(lines.Text(), out)
		}
		cancel() // standard input ended: stop
	}()
	return n.Run(ctx)
}

// obey carries out a trigger process's command line other than "start".
func obey(line string, out io.Writer) {
	if line == "gc" {
		debug.FreeOSMemory()
		fmt.Fprintln(out, "gc done")
	}
}

// triggerProcess is a child process running RunTrigger.
type triggerProcess struct{ *child }

// startTriggerProcess starts self as the trigger process of r's namespace and waits
// until it is ready (built, not yet consuming).
func (r *rig) startTriggerProcess(self string, window int) (*triggerProcess, error) {
	c, err := startChild("trigger", self, TriggerCommand, "--nats-url", r.url, "--namespace", r.ns, "--window", strconv.Itoa(window))
	if err != nil {
		return nil, err
	}
	return &triggerProcess{c}, nil
}

// start lets the process's trigger start consuming.
func (p *triggerProcess) start() error {
	_, err := io.WriteString(p.stdin, "start\n")
	return err
}

// rssAfterGC has the process collect its garbage and return freed memory to the
// system, then reads its resident set (-1 when it cannot be read).
func (p *triggerProcess) rssAfterGC() (int64, error) {
	if _, err := io.WriteString(p.stdin, "gc\n"); err != nil {
		return 0, err
	}
	select {
	case line := <-p.lines:
		if line != "gc done" {
			return 0, fmt.Errorf("trigger process answered %q to gc", line)
		}
	case <-time.After(30 * time.Second):
		return 0, errors.New("trigger process did not answer gc within 30s")
	}
	return procRSS(p.cmd.Process.Pid), nil
}

// cpu is the CPU time the process used so far, -1 when it cannot be read.
func (p *triggerProcess) cpu() time.Duration { return procCPU(p.cmd.Process.Pid) }

// stop closes the process's input (it stops its trigger and exits) and waits for it.
func (p *triggerProcess) stop() { p.child.stop(func() { _ = p.stdin.Close() }) }

// child is a child process of the bench (the binary's bench-worker or bench-trigger
// command), which writes "ready" as its first line once it is.
type child struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    chan string // its output after "ready"
	exited   chan error
	stopOnce sync.Once
}

// startChild starts name (args) as the bench's child process what and waits until it
// says it is ready.
func startChild(what, name string, args ...string) (*child, error) {
	cmd := exec.Command(name, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s process: %w", what, err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody waits for it
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		c.exited <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if ok {
			return c, nil
		}
	case <-time.After(30 * time.Second):
	}
	c.stop(func() { _ = cmd.Process.Kill() })
	return nil, fmt.Errorf("%s process not ready: %s", what, stderr.String())
}

// stop asks the process to exit with quit and waits for it, killing it after 20 s. A
// second stop returns at once.
func (c *child) stop(quit func()) {
	c.stopOnce.Do(func() {
		quit()
		select {
		case <-c.exited:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	})
}
