package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/jetstream"
)

// WorkerCommand is the hidden command a worker process of the scale-out measurement
// runs: `compactor bench-worker --nats-url URL --namespace NS --slots N --llm-url URL
// --window W`.
const WorkerCommand = "bench-worker"

// RunWorker runs a summarizer pool in a bench namespace until ctx is done: the second
// process of the scale-out measurement. It writes "ready" on out once the pool is
// built.
func RunWorker(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(WorkerCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	url := fs.String("nats-url", "", "")
	ns := fs.String("namespace", "", "")
	slots := fs.Int("slots", 1, "")
	llmURL := fs.String("llm-url", "", "")
	window := fs.Int("window", scaleWindow, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || !strings.HasPrefix(*ns, "bench") || *llmURL == "" || *slots < 1 {
		return errors.New(WorkerCommand + ": needs --nats-url, --namespace bench…, --llm-url and --slots ≥ 1")
	}
	nc, err := natsconn.Connect(*url, "bench-worker-process", zerolog.Nop())
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := jetstream.Open(ctx, nc, configFor(*ns))
	if err != nil {
		return err
	}
	sum, err := llmSummarizer(*llmURL)
	if err != nil {
		return err
	}
	n, err := node.New(poolConfig(settings(*window), *slots, sum), nc, st)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	return n.Run(ctx)
}

// workerProcess is a child process running RunWorker.
type workerProcess struct {
	cmd    *exec.Cmd
	exited chan error
}

// startWorkerProcess starts self as a worker process of r's namespace and waits until
// it is ready.
func (r *rig) startWorkerProcess(self, llmURL string, slots, window int) (*workerProcess, error) {
	cmd := exec.Command(self, WorkerCommand, "--nats-url", r.url, "--namespace", r.ns,
		"--slots", strconv.Itoa(slots), "--llm-url", llmURL, "--window", strconv.Itoa(window))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	w := &workerProcess{cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := sc.Scan() && sc.Text() == "ready"
		ready <- ok
		_, _ = io.Copy(io.Discard, stdout)
		w.exited <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if ok {
			return w, nil
		}
	case <-time.After(30 * time.Second):
	}
	w.stop()
	return nil, fmt.Errorf("worker process not ready: %s", stderr.String())
}

// stop interrupts the process (it drains like serve) and waits for it.
func (w *workerProcess) stop() {
	_ = w.cmd.Process.Signal(os.Interrupt)
	select {
	case <-w.exited:
	case <-time.After(20 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
}
