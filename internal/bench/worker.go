package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
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
	nc, st, err := openNamespace(ctx, *url, "bench-worker-process", *ns)
	if err != nil {
		return err
	}
	defer nc.Close()
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
type workerProcess struct{ *child }

// startWorkerProcess starts self as a worker process of r's namespace and waits until
// it is ready.
func (r *rig) startWorkerProcess(self, llmURL string, slots, window int) (*workerProcess, error) {
	c, err := startChild("worker", self, WorkerCommand, "--nats-url", r.url, "--namespace", r.ns,
		"--slots", strconv.Itoa(slots), "--llm-url", llmURL, "--window", strconv.Itoa(window))
	if err != nil {
		return nil, err
	}
	return &workerProcess{c}, nil
}

// stop interrupts the process (it drains like serve) and waits for it.
func (w *workerProcess) stop() { w.child.stop(func() { _ = w.cmd.Process.Signal(os.Interrupt) }) }

// openNamespace connects to url as name and opens the bench namespace ns's store: a
// child process's start.
func openNamespace(ctx context.Context, url, name, ns string) (*nats.Conn, *jetstream.Store, error) {
	nc, err := natsconn.Connect(url, name, zerolog.Nop())
	if err != nil {
		return nil, nil, err
	}
	st, err := jetstream.Open(ctx, nc, configFor(ns))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, st, nil
}
