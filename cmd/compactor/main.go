// Command compactor runs the Compactor pipeline (serve) and talks to a running one
// (publish, context, compact, status, policy, forget). Run `compactor help` for the
// commands and every COMPACTOR_ variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/compactor/compactor/cmd/compactor/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.LookupEnv)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(os.Stderr, "compactor: %v\nRun 'compactor help' for usage.\n", err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "compactor: %v\n", err)
		os.Exit(1)
	}
}

type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run parses the command and runs it; lookup reads the environment.
func run(ctx context.Context, args []string, std stdio, lookup func(string) (string, bool)) error {
	cmd := "serve"
	// Flags without a command are serve's (compactor --update-streams).
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || isHelp(args[0])) {
		cmd, args = args[0], args[1:]
	}
	if isHelp(cmd) {
		return help(std.out)
	}
	switch cmd {
	case "bench":
		// The bench runs its own servers and pipeline: the environment's are not its.
		return benchCmd(ctx, args, std)
	case bench.WorkerCommand:
		// Hidden: a worker process the bench starts for its scale-out measurement.
		return bench.RunWorker(ctx, args, std.out)
	}
	env, err := loadEnv(lookup)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		update := fs.Bool("update-streams", false, "")
		if err := fs.Parse(args); err != nil {
			return usagef("serve: %v", err)
		}
		if fs.NArg() > 0 {
			return usagef("serve takes no arguments besides --update-streams")
		}
		if *update {
			env.UpdateStreams = true
		}
		return serve(ctx, env, std)
	case "publish":
		return publishCmd(ctx, env, args, std)
	case "context":
		return contextCmd(ctx, env, args, std)
	case "compact":
		return compactCmd(ctx, env, args, std)
	case "status":
		return statusCmd(ctx, env, args, std)
	case "policy":
		return policyCmd(ctx, env, args, std)
	case "forget":
		return forgetCmd(ctx, env, args, std)
	}
	return usagef("unknown command %q", cmd)
}

func isHelp(arg string) bool { return arg == "help" || arg == "-h" || arg == "--help" }

const usageText = `Compactor keeps LLM agent conversations inside their context window.

Usage:
  compactor [serve] [--update-streams]
                                    run the pipeline (trigger and summarizer workers);
                                    with no COMPACTOR_NATS_URL, an embedded NATS server
                                    listens on COMPACTOR_LISTEN. Missing streams, buckets
                                    and consumers are created; existing ones are never
                                    changed: a setting that differs stops start-up,
                                    naming it, unless --update-streams (or
                                    COMPACTOR_UPDATE_STREAMS=true) applies it on purpose.
                                    While JetStream is not ready, serve retries.
  compactor publish <conv>          publish JSONL chat messages read from stdin; prints
                                    one stream sequence per line
  compactor context <conv> [--raw] [--max-tokens N] [--at-least-seq N]
                                    print the assembled context (pinned + summary + tail)
                                    as JSONL
  compactor compact <conv> [--instructions T] [--wait D]
                                    ask for a compaction now; --wait waits up to D for
                                    its outcome
  compactor status [<conv>]         the pipeline's streams, or one conversation's value
  compactor policy get <conv>       the conversation's policy and the settings it resolves to
  compactor policy set <conv> key=value...
                                    set safe keys of the conversation's policy (an empty
                                    value removes a key); profile=<name> picks a profile
  compactor policy clear <conv>     remove the conversation's policy
  compactor forget <conv>           delete the conversation everywhere, for good: its
                                    messages, value and history, policy, pending
                                    request, idle timer, events, dead letters and stored
                                    objects (through the compactor service); work in
                                    flight does not bring it back; messages published
                                    to the same id afterwards start a new conversation.
                                    Prints what was deleted; nothing stored is no error
  compactor bench [--quick] [--json] [--charts DIR] [--doc FILE] [--nats-url URL] [--nats-server PATH]
                  [--corpus DIR] [--seed N] [--only m1,m2] [--cpuprofile FILE]
                  [--heapprofile FILE]
                                    measure Compactor against plain JetStream on the
                                    same server (docs/benchmarks.md): progress on
                                    stderr, a Markdown table (or --json, one object) on
                                    stdout, PNG charts into --charts, the whole
                                    docs/benchmarks.md into --doc. Without
                                    --nats-url it starts --nats-server (default
                                    nats-server on PATH, else one go build makes of
                                    the version go.mod pins), else an embedded server,
                                    which the output notes. --corpus defaults to
                                    ../shared/corpus beside the module. --quick: under
                                    a minute. --only: ingest, latency, read, cost,
                                    scaleout, heap, tokens. --cpuprofile: a CPU profile
                                    of this process (client, trigger, workers) for
                                    go tool pprof; --heapprofile: the heap once the
                                    trigger tracks every conversation (heap measurement)
  compactor help                    this text

Environment (variable, default, meaning):
`

func help(w io.Writer) error {
	if _, err := io.WriteString(w, usageText); err != nil {
		return err
	}
	return printEnvHelp(w)
}
