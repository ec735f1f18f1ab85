package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/bench"
	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// command is one subcommand. Every command is parsed the same way (flagSet): its own
// flags, and for the commands that talk to NATS the connection flags.
type command struct {
	name string
	// args is the synopsis of its arguments, as help shows them.
	args    string
	summary string
	// about is what `compactor <name> --help` says beyond the synopsis and the flags.
	about string
	conn  connMode
	// interruptible commands end with exitInterrupted when ctrl-C stops them (serve
	// shuts down cleanly instead).
	interruptible bool
	hidden        bool
	// define adds the command's flags and returns what runs once they are parsed.
	define func(fs *flagSet) func(ctx context.Context, c *call) error
}

type connMode int

const (
	noConn connMode = iota
	// explicitConn: the connection flags and COMPACTOR_NATS_* only (serve).
	explicitConn
	// fullConn: also NATS_* and the nats CLI's contexts (docs/cli.md, "Where the commands connect").
	fullConn
)

// call is one run of a command.
type call struct {
	cmd    *command
	args   []string // the positional arguments
	raw    []string // the arguments as given, after the command's name
	std    stdio
	lookup func(string) (string, bool)
	conn   *connFlags
	env    *Env
	// refuse cancels the command's context with a refusal of the server's (connect
	// watches the connection for them): the command then ends at once, and run reports
	// the refusal.
	refuse context.CancelCauseFunc
}

// loadEnv reads the COMPACTOR_ variables once.
func (c *call) loadEnv() (Env, error) {
	if c.env != nil {
		return *c.env, nil
	}
	var env Env
	var err error
	if c.cmd.conn == fullConn {
		// The connection is checked when it is resolved, with the flags and contexts.
		env, err = loadClientEnv(c.lookup)
	} else {
		env, err = loadEnv(c.lookup)
	}
	if err != nil {
		return env, newError(errConfig, err, "%v", err)
	}
	c.env = &env
	return env, nil
}

// conversation is the command's one argument, a conversation id.
func (c *call) conversation() (string, error) {
	switch len(c.args) {
	case 0:
		return "", usagef("%s needs a conversation id", c.cmd.name)
	case 1:
	default:
		return "", usagef("%s takes one conversation id, got %d arguments: %s", c.cmd.name, len(c.args), strings.Join(quoteAll(c.args), " "))
	}
	if err := schemas.ValidateConversationID(c.args[0]); err != nil {
		return "", usagef("%v", err)
	}
	return c.args[0], nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// connect opens a client of a running compactor.
func (c *call) connect(ctx context.Context) (*pipeline.Client, *nats.Conn, error) {
	env, err := c.loadEnv()
	if err != nil {
		return nil, nil, err
	}
	nc, conn, err := c.dial(env)
	if err != nil {
		return nil, nil, err
	}
	cl, err := c.open(ctx, nc, env)
	if err != nil {
		nc.Close()
		return nil, nil, openError(conn, env, err)
	}
	c.watchRefusals(nc)
	return cl, nc, nil
}

// dial connects as the client commands do (their flags, variables and nats contexts).
func (c *call) dial(env Env) (*nats.Conn, *natsconn.Connection, error) {
	conn, err := resolveConnection(env, c.conn, true)
	if err != nil {
		return nil, nil, err
	}
	nc, err := natsconn.Connect(conn.URL, "compactor-cli", zerolog.Nop(), append(conn.Options(), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, nil, connectionError(conn, err)
	}
	return nc, conn, nil
}

// watchRefusals ends the command at the server's first refusal on nc: a refused publish
// or subscription gets no answer, and without this the command would wait for its
// timeout and report that instead.
func (c *call) watchRefusals(nc *nats.Conn) {
	if c.refuse != nil {
		jetstream.OnRefusal(nc, func(pe *jetstream.PermissionError) { c.refuse(pe) })
	}
}

// open binds a client to the pipeline: to its streams, or in service mode to the
// compactor service (COMPACTOR_VIA_SERVICE, or when the streams cannot be looked up
// because the server refuses this user their API or the account has no JetStream: a
// tenant's user), saying so with -v. Any other refusal while opening ends the command
// as one after it does.
func (c *call) open(ctx context.Context, nc *nats.Conn, env Env) (*pipeline.Client, error) {
	cfg := pipeline.WithConfig(env.jetstream())
	if env.ViaService {
		return pipeline.New(ctx, nc, cfg, pipeline.ViaService())
	}
	octx, cancel := jetstream.RefusedContext(ctx, nc, nil)
	defer cancel()
	cl, err := pipeline.New(octx, nc, cfg)
	err = jetstream.PermissionCause(octx, err)
	if err == nil {
		return cl, nil
	}
	why := viaServiceReason(err)
	if why == "" {
		var pe *jetstream.PermissionError
		if errors.As(err, &pe) && c.refuse != nil {
			c.refuse(pe)
		}
		return nil, err
	}
	if c.conn != nil && c.conn.verbose != nil && *c.conn.verbose {
		// How a tenant's user works, and no error: a note, with -v only.
		fmt.Fprintf(c.std.err, "note: %s, so the command goes through the compactor service (COMPACTOR_VIA_SERVICE=true chooses it up front)\n", why)
	}
	return pipeline.New(ctx, nc, cfg, pipeline.ViaService())
}

// viaServiceReason says why the streams could not be opened when that calls for the
// service mode: the server refused this user the lookup of a stream, or the account
// has no JetStream. "" for any other error.
func viaServiceReason(err error) string {
	var pe *jetstream.PermissionError
	switch {
	case errors.As(err, &pe) && pe.Op == "publish" && strings.HasPrefix(pe.Subject, "$JS.API.STREAM.INFO."):
		return "this user may not look up Compactor's streams (" + pe.Subject + " refused)"
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled), errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return "this user's account has no JetStream"
	}
	return ""
}

// connectError adds to serve's failed connection what to check: whether NATS runs, or
// the variables of the credentials or TLS it refused. A refusal is a mistake in the
// configuration, exit 2 as for the other commands; no server answering, exit 7.
func connectError(err error) error {
	switch {
	case natsconn.Unreachable(err):
		return newError(errUnavailable, err, "%v (is NATS running at COMPACTOR_NATS_URL?)", err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return newError(errConfig, err, "%v (check COMPACTOR_NATS_CREDS, COMPACTOR_NATS_NKEY, COMPACTOR_NATS_TOKEN, "+
			"COMPACTOR_NATS_USER and COMPACTOR_NATS_PASSWORD, or the user in COMPACTOR_NATS_URL)", err)
	case natsconn.Refused(err):
		return newError(errConfig, err, "%v (check COMPACTOR_NATS_CA, COMPACTOR_NATS_CERT and COMPACTOR_NATS_KEY, "+
			"and whether COMPACTOR_NATS_URL should be tls://)", err)
	}
	return err
}

// connectionError says what a client command's failed connection means and what to
// check, naming the settings in use by where they came from.
func connectionError(conn *natsconn.Connection, err error) error {
	named := func(fields ...string) string {
		var set []string
		for _, f := range fields {
			if natsconn.Field(conn.Auth, f) != "" {
				set = append(set, conn.Name(f))
			}
		}
		return strings.Join(set, ", ")
	}
	switch {
	case natsconn.Unreachable(err):
		fix := "check that it runs and that the URL is right"
		if conn.Local {
			fix = "start `compactor serve`, or name the server with -s/--server, COMPACTOR_NATS_URL, NATS_URL or a nats context"
		}
		return newError(errUnavailable, err, "cannot reach NATS at %s: no server answered; %s", conn.Describe(), fix)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		check := named(natsconn.AuthFields...)
		if natsconn.URLHasUserInfo(conn.URL) {
			check = strings.TrimPrefix(check+", "+conn.Name("URL")+" (its user info)", ", ")
		}
		if check == "" {
			check = "the server wants credentials: set COMPACTOR_NATS_CREDS, COMPACTOR_NATS_NKEY, COMPACTOR_NATS_TOKEN or COMPACTOR_NATS_USER " +
				"and COMPACTOR_NATS_PASSWORD (or --creds, --nkey, --token, --user and --password, or a nats context)"
		}
		return newError(errConfig, err, "NATS at %s refused the connection: %v (check %s)", conn.Describe(), errors.Unwrap(err), check)
	case natsconn.Refused(err):
		check := named("CAFile", "CertFile", "KeyFile")
		if check == "" {
			check = "COMPACTOR_NATS_CA, COMPACTOR_NATS_CERT and COMPACTOR_NATS_KEY (or --tlsca, --tlscert and --tlskey)"
		}
		return newError(errConfig, err, "NATS at %s refused the TLS connection: %v (check %s, and whether the URL should be tls://)",
			conn.Describe(), errors.Unwrap(err), check)
	}
	return newError(errConfig, err, "connect to NATS at %s: %v", conn.Describe(), errors.Unwrap(err))
}

// openError says why a connected client could not bind to the pipeline's streams.
func openError(conn *natsconn.Connection, env Env, err error) error {
	switch {
	case errors.Is(err, natsjs.ErrBucketNotFound), errors.Is(err, natsjs.ErrStreamNotFound):
		return newError(errUnavailable, err, "NATS at %s has no Compactor streams (bucket %s not found): run `compactor serve` "+
			"against it once, as a user that may create streams", conn.Describe(), env.jetstream().ResultsBucket)
	case errors.Is(err, natsjs.ErrJetStreamNotEnabled), errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
		return newError(errUnavailable, err, "JetStream is not enabled on NATS at %s (or not for this account): enable it in the server's "+
			"configuration (jetstream: enabled) and give the account JetStream limits", conn.Describe())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return newError(errTimeout, err, "NATS at %s did not answer in time: is JetStream ready, and may this user use its API?", conn.Describe())
	}
	return err
}

// serviceError words the errors of a call to the compactor service.
func serviceError(err error) error {
	switch {
	case errors.Is(err, pipeline.ErrNoService):
		return newError(errUnavailable, err, "no compactor service answers on this NATS: run `compactor serve` (with the api role) against it")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return newError(errTimeout, err, "the compactor service did not answer in time; what was asked may still be done")
	}
	return err
}

// usageError is a mistake in the command line; usage is the command's synopsis and
// flags, which main prints after it.
type usageError struct {
	msg   string
	usage string
}

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{msg: fmt.Sprintf(format, args...)} }

// commands are every command, in the order help lists them.
var commands []*command

func init() {
	commands = []*command{serveCommand, proxyCommand, provisionCommand, publishCommand, contextCommand, recallCommand, compactCommand, statusCommand, mcpCommand,
		tenantsCommand, savingsCommand, policyCommand, forgetCommand, verifyCommand, benchCommand, evalCommand, fakeModelCommand, versionCommand, benchWorkerCommand,
		benchTriggerCommand}
}

func commandNamed(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// leadingValueFlags are the flags that may come before the command's name and take a
// value (compactor -s nats://host status), so the name is found after them.
var leadingValueFlags = []string{"s", "server", "context", "creds", "nkey", "token", "user", "password", "tlsca", "tlscert", "tlskey", "inbox-prefix"}

// splitCommand finds the command's name (serve when there is none) and the rest.
func splitCommand(args []string) (string, []string, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return "serve", args, nil
		case i == 0 && (a == "-h" || a == "--help" || a == "-help"):
			return "help", args[1:], nil
		case i == 0 && (a == "--version" || a == "-version"):
			return "version", args[1:], nil
		case !strings.HasPrefix(a, "-") || a == "-":
			rest := append(slices.Clone(args[:i]), args[i+1:]...)
			if a == "help" || commandNamed(a) != nil {
				return a, rest, nil
			}
			return "", nil, unknownCommand(a)
		case !strings.Contains(a, "=") && slices.Contains(leadingValueFlags, strings.TrimLeft(a, "-")):
			i++
		}
	}
	return "serve", args, nil
}

// run parses the command line and runs the command; lookup reads the environment.
func run(ctx context.Context, args []string, std stdio, lookup func(string) (string, bool)) error {
	name, rest, err := splitCommand(args)
	if err != nil {
		return err
	}
	if name == "help" {
		return helpCmd(rest, std)
	}
	if name == bench.WorkerCommand {
		return bench.RunWorker(ctx, rest, std.out)
	}
	if name == bench.TriggerCommand {
		return bench.RunTrigger(ctx, rest, std.in, std.out)
	}
	cmd := commandNamed(name)
	fs := newFlagSet(name)
	body := cmd.define(fs)
	var cf *connFlags
	if cmd.conn != noConn {
		cf = defineConnFlags(fs, cmd.conn == fullConn)
	}
	pos, err := fs.parse(rest)
	if errors.Is(err, errHelp) {
		return writeCommandHelp(std.out, cmd, fs)
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			ue.usage = commandUsage(cmd, fs)
			return ue
		}
		return err
	}
	if cmd != serveCommand {
		// serve's logs are JSON (escaped by zerolog); what the others print is for people.
		std.out, std.err = newTextOut(std.out), newTextOut(std.err)
	}
	cctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	c := &call{cmd: cmd, args: pos, raw: rest, std: std, lookup: lookup, conn: cf, refuse: refuse}
	err = body(cctx, c)
	if rerr := refusedError(cctx); rerr != nil {
		return rerr
	}
	if errors.Is(err, pipeline.ErrServiceMode) && !errors.Is(err, errConfig) {
		// What the service does not serve: retrying will not help.
		err = newError(errConfig, err, "%v", err)
	}
	var ue usageError
	if errors.As(err, &ue) && ue.usage == "" {
		ue.usage = commandUsage(cmd, fs)
		return ue
	}
	if err != nil && cmd.interruptible && ctx.Err() != nil && !errors.Is(err, errInterrupted) {
		return interrupted(ctx, "interrupted")
	}
	return err
}

func synopsis(c *command) string {
	s := "compactor " + c.name
	if c.args != "" {
		s += " " + c.args
	}
	return s + " [flags]"
}

// commandUsage is the synopsis and flags of a command, shown after a usage error.
func commandUsage(c *command, fs *flagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n", synopsis(c))
	fs.writeFlags(&b)
	fmt.Fprintf(&b, "\nRun 'compactor %s --help' for more.\n", c.name)
	return b.String()
}

func writeCommandHelp(w io.Writer, c *command, fs *flagSet) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", synopsis(c), strings.TrimSpace(c.summary))
	if c.about != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	b.WriteString("\n")
	fs.writeFlags(&b)
	switch c.conn {
	case fullConn:
		b.WriteString("\nThe connection settings, highest first: these flags; COMPACTOR_NATS_* (and COMPACTOR_LISTEN\n" +
			"when set); NATS_* and the nats CLI context of --context or NATS_CONTEXT; the selected\n" +
			"nats context; a local compactor serve (nats://COMPACTOR_LISTEN).\n")
	case explicitConn:
		last := "the embedded server"
		if c != serveCommand {
			last = "none (a server must be named)"
		}
		b.WriteString("\nThe connection settings, highest first: these flags; COMPACTOR_NATS_*; " + last + ".\n")
	}
	if c.args != "" {
		b.WriteString("\nFlags may also come after the arguments; \"--\" ends the flags (compactor " + c.name + " -- -id-with-a-dash).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// helpCmd prints the overview (and every variable), or one command's help.
func helpCmd(args []string, std stdio) error {
	switch len(args) {
	case 0:
		return help(std.out)
	case 1:
		cmd := commandNamed(args[0])
		if cmd == nil || cmd.hidden {
			return unknownCommand(args[0])
		}
		fs := newFlagSet(cmd.name)
		cmd.define(fs)
		if cmd.conn != noConn {
			defineConnFlags(fs, cmd.conn == fullConn)
		}
		return writeCommandHelp(std.out, cmd, fs)
	}
	return usagef("help takes at most one command name")
}

// overviewSynopsis lists the commands, one line each.
func overviewSynopsis() string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	tw := tabwriter.NewWriter(&b, 2, 0, 3, ' ', 0)
	for _, c := range commands {
		if c.hidden {
			continue
		}
		s := "compactor " + c.name
		if c.name == "serve" {
			s = "compactor [serve]"
		}
		if c.args != "" {
			s += " " + c.args
		}
		fmt.Fprintf(tw, "  %s\t%s\n", s, firstLine(c.summary))
	}
	fmt.Fprintf(tw, "  compactor help [<command>]\tthis text, or a command's flags and details (also compactor <command> --help)\n")
	tw.Flush()
	return b.String()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

const overviewIntro = `Compactor keeps LLM agent conversations inside their context window.

`

const overviewOutro = `
Every command takes -h/--help, and --json where it prints. The commands that talk to a
running compactor find NATS with, highest first: their flags (-s/--server, --creds,
--nkey, --token, --user/--password, --tlsca, --tlscert/--tlskey, --inbox-prefix),
the COMPACTOR_NATS_* variables (and COMPACTOR_LISTEN when set), the NATS_* variables
and the nats CLI context of --context or NATS_CONTEXT, the selected nats context, and
last a local compactor serve on COMPACTOR_LISTEN.

Exit codes:
  0    ok
  1    an error not listed below
  2    usage: a mistake in the command line or the configuration; retrying will not help
  3    not found: the conversation has nothing stored (never published to, or forgotten)
  4    busy: a compaction is already pending, or the service cannot take it now; try later
  5    failed: the compaction failed (see its dead letter)
  6    timed out: no answer or outcome in time; the request may still complete
  7    unavailable: NATS cannot be reached, has no Compactor streams, or no service answers
  8    permission denied: the server refused this user a subject the command needs
  9    holes: verify found messages missing from a conversation's raw history
  130  interrupted (ctrl-C); compact --wait prints the request id to follow

Environment (variable, default, meaning):
`

func help(w io.Writer) error {
	if _, err := io.WriteString(w, overviewIntro+overviewSynopsis()+overviewOutro); err != nil {
		return err
	}
	return printEnvHelp(w)
}

var benchWorkerCommand = &command{
	name: bench.WorkerCommand, hidden: true, summary: "a worker process of the bench's scale-out measurement",
	define: func(*flagSet) func(context.Context, *call) error {
		return nil // run hands its arguments to the bench as they are
	},
}
