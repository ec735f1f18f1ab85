// Command compactor runs the Compactor pipeline (serve) and talks to a running one
// (publish, context, compact, status, policy, forget). Run `compactor help` for the
// commands and every COMPACTOR_ variable, `compactor <command> --help` for a command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// The first SIGINT or SIGTERM cancels the command's context with the signal as its
	// cause (exitCode reports it: 130 for ctrl-C); serve drains. A second one does not
	// cut serve's drain short (its bound is COMPACTOR_DRAIN_TIMEOUT), but ends any other
	// command at once: one stuck on a NATS that does not answer need not wait its timeout.
	name, _, _ := splitCommand(os.Args[1:])
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		cancel(signalled{<-sigs})
		for s := range sigs {
			if name != "serve" {
				fmt.Fprintf(os.Stderr, "compactor: %v again; exiting now\n", s)
				os.Exit(exitCode(signalled{s}))
			}
		}
	}()
	err := run(ctx, os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.LookupEnv)
	if err != nil {
		stderr := newTextOut(os.Stderr) // an error may quote what a server answered
		fmt.Fprintf(stderr, "compactor: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			if ue.usage != "" {
				fmt.Fprintf(stderr, "\n%s", ue.usage)
			} else {
				fmt.Fprintln(stderr, "Run 'compactor help' for usage.")
			}
		}
	}
	os.Exit(exitCode(err))
}

type stdio struct {
	in       io.Reader
	out, err io.Writer
}
