package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Exit codes a script can tell apart (docs/cli.md). Codes 3 to 9 say
// what to do next: 4, 6 and 7 may succeed later as they are; 2, 3, 5 and 8 will not
// without a change; 9 reports damage to repair.
const (
	exitOK = 0
	// exitError is anything not classified below.
	exitError = 1
	// exitUsage: a mistake in the command line or the configuration (flags, variables,
	// a nats context). Retrying will not help.
	exitUsage = 2
	// exitNotFound: the conversation has nothing stored (never published to, or
	// forgotten).
	exitNotFound = 3
	// exitBusy: a compaction is already pending, or the service cannot take the request
	// now. Nothing was done: try again later.
	exitBusy = 4
	// exitFailed: the compaction failed (its attempts are used up; see the dead letter).
	exitFailed = 5
	// exitTimeout: no answer or no outcome in time. The request may still complete.
	exitTimeout = 6
	// exitUnavailable: NATS cannot be reached, has no Compactor streams, or no compactor
	// service answers.
	exitUnavailable = 7
	// exitPermission: the server refused to let this user publish or subscribe to a
	// subject the command needed. What needed it was not done; retrying as the same
	// user will not help.
	exitPermission = 8
	// exitHoles: compactor verify found a hole in a conversation's raw history (messages
	// acknowledged and seen, no longer stored, neither forgotten nor aged out).
	exitHoles = 9
	// exitInterrupted is 128 + SIGINT, as shells report a process ended by ctrl-C.
	exitInterrupted = 130
)

// Sentinels of the outcomes a command reports with an exit code of its own.
var (
	errBusy        = errors.New("busy")
	errFailed      = errors.New("failed")
	errTimeout     = errors.New("timed out")
	errUnavailable = errors.New("unavailable")
	errPermission  = errors.New("permission denied")
	errInterrupted = errors.New("interrupted")
	errHoles       = errors.New("holes in the raw history")
	// errConfig marks a configuration that cannot work (variables, a nats context):
	// exitUsage, like a bad flag.
	errConfig = errors.New("configuration")
)

// cliError is an error a command words itself: Error() is the message alone, and
// Unwrap gives both the kind (a sentinel above, for the exit code) and the cause (for
// errors.Is and As), whose library wording is not shown.
type cliError struct {
	kind  error
	msg   string
	cause error
}

func (e *cliError) Error() string { return e.msg }

func (e *cliError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func newError(kind, cause error, format string, args ...any) error {
	return &cliError{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}

// signalled is the cause a signal gives the command's context.
type signalled struct{ sig os.Signal }

func (s signalled) Error() string { return "interrupted by " + s.sig.String() }

// interrupted is the error of a command its context stopped: the message, and the
// signal (for the exit code).
func interrupted(ctx context.Context, format string, args ...any) error {
	return newError(errInterrupted, context.Cause(ctx), format, args...)
}

// exitCode is the code main exits with for run's error.
func exitCode(err error) int {
	var ue usageError
	var sig signalled
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &sig):
		if s, ok := sig.sig.(syscall.Signal); ok {
			return 128 + int(s)
		}
		return exitInterrupted
	case errors.Is(err, errInterrupted):
		return exitInterrupted
	case errors.As(err, &ue), errors.Is(err, errConfig), errors.Is(err, schemas.ErrInvalid), errors.Is(err, jetstream.ErrConfig),
		errors.Is(err, natsconn.ErrConfig):
		return exitUsage
	case errors.Is(err, errPermission), errors.Is(err, jetstream.ErrPermission):
		return exitPermission
	case errors.Is(err, pipeline.ErrNotFound):
		return exitNotFound
	case errors.Is(err, errBusy), errors.Is(err, pipeline.ErrBusy):
		return exitBusy
	case errors.Is(err, errFailed):
		return exitFailed
	case errors.Is(err, errHoles):
		return exitHoles
	case errors.Is(err, errUnavailable), errors.Is(err, pipeline.ErrNoService):
		return exitUnavailable
	case errors.Is(err, errTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return exitTimeout
	}
	return exitError
}

// refusedError is the error of a command the server refused a subject to (the command's
// context was cancelled with the refusal as its cause, see call.connect), whatever the
// command made of its cancelled context.
func refusedError(ctx context.Context) error {
	var pe *jetstream.PermissionError
	if !errors.As(context.Cause(ctx), &pe) {
		return nil
	}
	hint := "use a user whose permissions allow it (deploy/nats/accounts.conf lists what each role may)"
	if pe.Op == "subscribe" {
		hint = "check the inbox prefix (--inbox-prefix, COMPACTOR_NATS_INBOX_PREFIX) against what the user may subscribe to"
	}
	return newError(errPermission, pe, "%v; nothing that needed it was done: %s", pe, hint)
}
