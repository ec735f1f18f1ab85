package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/formats"
)

var serveCommand = &command{
	name: "serve", args: "[--update-streams]", conn: explicitConn,
	summary: "run the pipeline: trigger, summarizer workers and the compactor service (the default command)",
	about: `With no COMPACTOR_NATS_URL (nor -s/--server), an embedded NATS server listens on
COMPACTOR_LISTEN and stores its data in COMPACTOR_DATA_DIR. Missing streams, buckets and
consumers are created; existing ones are never changed: a setting that differs stops
start-up, naming it, unless --update-streams (or COMPACTOR_UPDATE_STREAMS=true) applies it
on purpose. While NATS or JetStream is not ready, serve retries. SIGINT or SIGTERM drains
the work in flight (COMPACTOR_DRAIN_TIMEOUT) and exits 0.

serve connects with its flags and the COMPACTOR_NATS_* variables only: it creates streams
where it connects, so it never takes a server from NATS_URL or a nats CLI context.

With COMPACTOR_PROXY_LISTEN set, serve runs the proxy role too (see compactor proxy).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		update := fs.Bool("update-streams", "", "apply this process's settings to existing streams, buckets and consumers whose settings differ")
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("serve takes no arguments, got %s", strings.Join(quoteAll(c.args), " "))
			}
			return runServe(ctx, c, *update, false)
		}
	},
}

var proxyCommand = &command{
	name: "proxy", conn: explicitConn,
	summary: "run the proxy role alone: an agent's OpenAI or Anthropic base URL, with its conversation compacted",
	about: `Listens on COMPACTOR_PROXY_LISTEN (default 127.0.0.1:8088) and forwards to
COMPACTOR_PROXY_UPSTREAM (OpenAI-compatible) and COMPACTOR_PROXY_ANTHROPIC_UPSTREAM (every
path under /v1/messages). POST /v1/chat/completions and POST /v1/messages of a request that
names its conversation (X-Compactor-Conversation, a session header, or
COMPACTOR_PROXY_BODY_FIELD) are sent with the compacted context; everything else passes
through unchanged. It connects as serve does (COMPACTOR_NATS_URL, or an embedded server
when none), and runs no other role: run the trigger and workers with serve. Beside a
running compactor with its embedded server it starts none of its own (nothing would
compact there) and says to connect to that one with COMPACTOR_NATS_URL. SIGINT or
SIGTERM lets the requests in flight finish and exits 0. docs/proxy.md is the guide.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("proxy takes no arguments, got %s", strings.Join(quoteAll(c.args), " "))
			}
			return runServe(ctx, c, false, true)
		}
	},
}

// proxyListen is where compactor proxy listens when COMPACTOR_PROXY_LISTEN is empty.
const proxyListen = "127.0.0.1:8088"

// runServe runs serve's node, or with proxyOnly the proxy role alone, connected with
// the command's flags and the COMPACTOR_NATS_* variables.
func runServe(ctx context.Context, c *call, update, proxyOnly bool) error {
	env, err := c.loadEnv()
	if err != nil {
		return err
	}
	if proxyOnly {
		env.Roles = ""
		if env.ProxyListen == "" {
			env.ProxyListen = proxyListen
		}
		if err := env.validateProxy(); err != nil {
			return err
		}
	}
	conn, err := resolveConnection(env, c.conn, false)
	if err != nil {
		return err
	}
	if !conn.Local {
		a := conn.Auth
		env.NATSURL = conn.URL
		env.NATSCreds, env.NATSNKey, env.NATSToken, env.NATSUser, env.NATSPassword = a.CredsFile, a.NKeyFile, a.Token, a.User, a.Password
		env.NATSCA, env.NATSCert, env.NATSKey = a.CAFile, a.CertFile, a.KeyFile
	}
	env.NATSInbox = conn.Auth.InboxPrefix
	if update {
		env.UpdateStreams = true
	}
	if proxyOnly && conn.Local {
		// A proxy with an embedded server of its own beside a running compactor would
		// be a second server, where nothing compacts: it connects to that one instead.
		if addr := dialAddr(env.Listen); answersNATS(addr) {
			return newError(errConfig, nil, "a compactor already runs its NATS server on %s: connect this proxy to it with "+
				"COMPACTOR_NATS_URL=nats://%s compactor proxy (a proxy with a server of its own would compact nothing)", env.Listen, addr)
		}
		err := serve(ctx, env, c.std)
		if errors.Is(err, embedded.ErrDataDirInUse) {
			return newError(errConfig, err, "%v.\nThat is a running compactor: connect this proxy to its NATS server with "+
				"COMPACTOR_NATS_URL=nats://<its COMPACTOR_LISTEN, %s by default> compactor proxy (a proxy with a server of its own would compact nothing)",
				strings.ReplaceAll(err.Error(), ", or give this one its own COMPACTOR_DATA_DIR", ""), defaultListen)
		}
		return err
	}
	return serve(ctx, env, c.std)
}

// defaultListen is COMPACTOR_LISTEN's default.
const defaultListen = "127.0.0.1:4222"

// dialAddr is the address a client on this machine dials to reach a server listening
// on listen: the loopback address for a listener on every interface.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// answersNATS reports whether a NATS server answers on addr (host:port) within a second.
func answersNATS(addr string) bool {
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(time.Second), nats.MaxReconnects(0), nats.NoCallbacksAfterClientClose())
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// maxLine bounds one JSONL line on stdin (raised to fit COMPACTOR_MAX_OBJECT_SIZE).
const maxLine = 64 << 20

// publishTimeout bounds one message's publish; ctrl-C lets the one in flight finish
// within it, so the report counts it exactly.
const publishTimeout = 30 * time.Second

var publishCommand = &command{
	name: "publish", args: "<conv>", conn: fullConn, interruptible: true,
	summary: "publish JSONL chat messages read from stdin; prints one stream sequence per line",
	about: `Each line of stdin is one OpenAI chat message (see the wire contract); blank lines are
skipped. A line that is not a valid message, or that the stream refuses, is reported on
stderr with its number and the rest go on. At the end (also after ctrl-C, which lets the
message in flight finish and reads no more) a report says how many lines were read,
published and not published; --json prints it as one JSON object instead of the
sequences. Exit 0 when every message was published, 1 when some were not, 130 when
interrupted.

A message over the NATS server's max payload is stored as an object and published as a
stub naming it (docs/wire.md, "Large messages"); one that cannot be (its tool calls, name and
metadata alone are over the limit, or its content is over COMPACTOR_MAX_OBJECT_SIZE) is
refused, naming the limit and what to change.

On a terminal, stderr shows a progress bar (by bytes when stdin is a file).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		idPrefix := fs.String("msg-id-prefix", "", "P", "line N gets Nats-Msg-Id P-N, so re-running the same input stores nothing twice; ids are de-duplicated across the whole CHAT stream for 2 minutes, so use a fresh prefix (a UUID) for every other input")
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			conv, err := c.conversation()
			if err != nil {
				return err
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			env, _ := c.loadEnv()
			return publishLines(ctx, c, cl, conv, *idPrefix, *asJSON, int(max(maxLine, env.MaxObject+1<<20)))
		}
	},
}

// publishReport is what publish did, also when interrupted.
type publishReport struct {
	Conversation string `json:"conversation"`
	// Lines counts the lines read: Published + NotPublished + Blank.
	Lines        int         `json:"lines"`
	Published    int         `json:"published"`
	NotPublished int         `json:"not_published"`
	Blank        int         `json:"blank"`
	FirstSeq     uint64      `json:"first_seq,omitempty"`
	LastSeq      uint64      `json:"last_seq,omitempty"`
	Interrupted  bool        `json:"interrupted"`
	Errors       []lineError `json:"errors,omitempty"`
	// ErrorsOmitted counts the errors past the first 100, which are only on stderr.
	ErrorsOmitted int `json:"errors_omitted,omitempty"`
}

type lineError struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

func (r *publishReport) String() string {
	s := fmt.Sprintf("%s: read %s lines: %s published", r.Conversation, thousands(r.Lines), thousands(r.Published))
	if r.Published > 0 {
		s += fmt.Sprintf(" (seq %d to %d)", r.FirstSeq, r.LastSeq)
	}
	s += fmt.Sprintf(", %s not published", thousands(r.NotPublished))
	if n := len(r.Errors); n > 0 {
		lines := make([]string, 0, min(n, 10))
		for _, e := range r.Errors[:min(n, 10)] {
			lines = append(lines, fmt.Sprint(e.Line))
		}
		more := ""
		if n+r.ErrorsOmitted > 10 {
			more = ", …"
		}
		s += fmt.Sprintf(" (lines %s%s; see above)", strings.Join(lines, ", "), more)
	}
	if r.Blank > 0 {
		s += fmt.Sprintf(", %s blank", thousands(r.Blank))
	}
	return s
}

// inputLine is one line of stdin: its bytes, or how long it was when over the limit,
// or the error that ended the input.
type inputLine struct {
	text    []byte
	tooLong int64
	read    int64 // bytes of input read through this line
	err     error
}

// readLines sends the lines of r until its end or quit. A line over limit is skipped
// (its length reported) without holding it in memory.
func readLines(r io.Reader, limit int, out chan<- inputLine, quit <-chan struct{}) {
	defer close(out)
	br := bufio.NewReaderSize(r, 1<<20)
	var read int64
	send := func(l inputLine) bool {
		select {
		case out <- l:
			return true
		case <-quit:
			return false
		}
	}
	for {
		var line []byte
		var long int64
		for {
			chunk, err := br.ReadSlice('\n')
			read += int64(len(chunk))
			switch {
			case long > 0 || len(line)+len(chunk) > limit:
				long += int64(len(line) + len(chunk))
				line = nil
			default:
				line = append(line, chunk...)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) {
				send(inputLine{err: err, read: read})
				return
			}
			if len(line) > 0 || long > 0 {
				if !send(inputLine{text: line, tooLong: long, read: read}) {
					return
				}
			}
			if err != nil { // EOF
				return
			}
			break
		}
	}
}

// publishLines publishes each line of stdin (at most limit bytes) to conv as a
// message, printing each sequence stored (or, with asJSON, the report at the end)
// and a line on stderr for each line not published.
func publishLines(ctx context.Context, c *call, cl *pipeline.Client, conv, idPrefix string, asJSON bool, limit int) error {
	bar := newProgress(c.std.err, c.lookup, "publish "+conv, "B", stdinSize(c))
	defer bar.finish()
	lines := make(chan inputLine)
	quit := make(chan struct{})
	defer close(quit)
	go readLines(c.std.in, limit, lines, quit)

	p := &linePublisher{c: c, cl: cl, conv: conv, idPrefix: idPrefix, asJSON: asJSON, limit: limit, bar: bar,
		r: &publishReport{Conversation: conv}, out: bufio.NewWriter(c.std.out)}
	defer p.out.Flush()
	readErr := p.publishAll(ctx, lines)
	bar.finish()
	p.out.Flush()
	return p.end(ctx, readErr)
}

// stdinSize is the size of stdin when it is a regular file (the progress bar's
// total), else 0.
func stdinSize(c *call) int64 {
	if f, ok := c.std.in.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			return fi.Size()
		}
	}
	return 0
}

// linePublisher is one run of publishLines: where it publishes, how, and what it
// has counted so far.
type linePublisher struct {
	c              *call
	cl             *pipeline.Client
	conv, idPrefix string
	asJSON         bool
	limit          int
	bar            *progress
	r              *publishReport
	out            *bufio.Writer // the sequences stored
}

// report prints a line on stderr, above the progress bar when there is one.
func (p *linePublisher) report(line string) {
	if p.bar != nil {
		p.bar.println(line)
		return
	}
	fmt.Fprintln(p.c.std.err, line)
}

// fail counts line n as not published, keeping its error (the first 100) and
// reporting it.
func (p *linePublisher) fail(n int, msg string) {
	r := p.r
	r.NotPublished++
	if len(r.Errors) < 100 {
		r.Errors = append(r.Errors, lineError{Line: n, Error: msg})
	} else {
		r.ErrorsOmitted++
	}
	p.report(fmt.Sprintf("line %d: %s", n, msg))
}

// publishAll publishes the lines until their end, an error reading them (returned)
// or ctx's end (counted as interrupted).
func (p *linePublisher) publishAll(ctx context.Context, lines <-chan inputLine) error {
	for {
		if ctx.Err() != nil {
			p.r.Interrupted = true
			return nil
		}
		var l inputLine
		var ok bool
		select {
		case <-ctx.Done():
			p.r.Interrupted = true
			return nil
		case l, ok = <-lines:
		}
		if !ok {
			return nil
		}
		if l.err != nil {
			return l.err
		}
		p.publishLine(ctx, l)
	}
}

// publishLine publishes one line of input, counting it (a blank line is skipped; a
// line too long, invalid or refused fails).
func (p *linePublisher) publishLine(ctx context.Context, l inputLine) {
	r := p.r
	r.Lines++
	n := r.Lines
	p.bar.set(l.read, fmt.Sprintf("line %s", thousands(n)))
	text := strings.TrimSpace(string(l.text))
	switch {
	case l.tooLong > 0:
		p.fail(n, fmt.Sprintf("the line is %d bytes, over the %d a line may have (COMPACTOR_MAX_OBJECT_SIZE plus 1 MiB, at least 64 MiB); nothing was stored", l.tooLong, p.limit))
		return
	case text == "":
		r.Blank++
		return
	}
	m, err := schemas.DecodeMessage([]byte(text))
	if err != nil {
		p.fail(n, err.Error())
		return
	}
	var opts []pipeline.PublishOption
	if p.idPrefix != "" {
		opts = append(opts, pipeline.MsgID(fmt.Sprintf("%s-%d", p.idPrefix, n)))
	}
	// ctrl-C does not cut a publish short: its outcome is then known and counted.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	seq, err := p.cl.Publish(pctx, p.conv, m, opts...)
	cancel()
	if err != nil {
		p.fail(n, explainPublishError(err))
		return
	}
	r.Published++
	if r.FirstSeq == 0 {
		r.FirstSeq = seq
	}
	r.LastSeq = seq
	if !p.asJSON {
		fmt.Fprintln(p.out, seq)
		if p.bar == nil {
			p.out.Flush() // a reader of a pipe sees each sequence as it is stored
		}
	}
}

// end prints the report (--json on stdout, else on stderr when all went well) and
// returns the run's error: interrupted, the input's read error, or lines not
// published.
func (p *linePublisher) end(ctx context.Context, readErr error) error {
	r := p.r
	if p.asJSON {
		if err := writeJSON(p.c.std.out, r); err != nil {
			return err
		}
	}
	switch {
	case r.Interrupted:
		return interrupted(ctx, "interrupted: %s; the rest of the input was not read", r)
	case readErr != nil:
		return fmt.Errorf("read stdin after line %d: %w; %s", r.Lines, readErr, r)
	case r.NotPublished > 0:
		return errors.New(r.String())
	}
	if !p.asJSON {
		fmt.Fprintln(p.c.std.err, r)
	}
	return nil
}

// explainPublishError adds what to do to a message that is too large.
func explainPublishError(err error) string {
	msg := err.Error()
	switch {
	case !errors.Is(err, pipeline.ErrTooLarge):
	case strings.Contains(msg, "max object size"):
		msg += "; split its content over several messages, or raise COMPACTOR_MAX_OBJECT_SIZE (up to 1 GiB; the same on every compactor process)"
	default:
		msg += "; shorten its tool call arguments, name or metadata (only its content, reasoning and extra are stored aside), or raise max_payload in the NATS server's configuration"
	}
	return msg
}

// notFound is the error of a conversation with nothing stored.
func notFound(conv string) error {
	return newError(pipeline.ErrNotFound, nil, "conversation %s not found: nothing was published to it, or it was forgotten", conv)
}

// mustExist fails with notFound when conv has nothing stored.
func mustExist(ctx context.Context, cl *pipeline.Client, conv string) error {
	ok, err := cl.Exists(ctx, conv)
	if err != nil {
		return err
	}
	if !ok {
		return notFound(conv)
	}
	return nil
}

var contextCommand = &command{
	name: "context", args: "<conv>", conn: fullConn, interruptible: true,
	summary: "print what a model should be sent (pinned + summary + tail), one message per line (JSONL)",
	about: `The summary of the read goes to stderr (generation, messages, tokens, tail start), and
each message left out (an invalid one, an incomplete tool round) with its reason. --json
prints one JSON object instead: the messages with their sequences and that summary.
--format renders the context for the API the agent calls: openai (the default: the
JSONL above), anthropic (Messages API: {system, messages}), responses (OpenAI Responses:
{input}) or gemini (generateContent: {systemInstruction, contents}), printed as one JSON
document to send as is (with --json, as "rendered" in the object). Its bytes up to the
summary stay identical until the next compaction, so the provider's prompt cache hits.
A conversation with nothing stored is not found (exit 3).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		f := &contextFlags{
			raw:       fs.Bool("raw", "", "keep Compactor's metadata on messages (tokens, usage, context_generation, meta)"),
			maxTokens: fs.Int("max-tokens", "N", "cut the context at read time to N tokens (flagged degraded)"),
			atLeast:   fs.Uint64("at-least-seq", "SEQ", "wait until the read covers sequence SEQ (the one publish printed): read-your-writes"),
			format:    fs.String("format", "", "FORMAT", "render for the API the agent calls: openai (default, JSONL), anthropic, responses, gemini"),
			asJSON:    fs.JSON(),
		}
		return func(ctx context.Context, c *call) error { return runContext(ctx, c, f) }
	},
}

// contextFlags are the context command's flags, once parsed.
type contextFlags struct {
	raw       *bool
	maxTokens *int
	atLeast   *uint64
	format    *string
	asJSON    *bool
}

// runContext checks the flags, reads the conversation's context and prints it.
func runContext(ctx context.Context, c *call, f *contextFlags) error {
	conv, err := c.conversation()
	if err != nil {
		return err
	}
	if *f.maxTokens < 0 {
		return usagef("--max-tokens must not be negative")
	}
	if *f.format != "" {
		if _, err := formats.Parse(*f.format); err != nil {
			return usagef("--format %q: want one of %s", *f.format, strings.Join(formats.Names(), ", "))
		}
	}
	cl, nc, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := mustExist(ctx, cl, conv); err != nil {
		return err
	}
	cx, err := cl.Context(ctx, conv, f.options()...)
	if errors.Is(err, pipeline.ErrNotCovered) {
		return newError(errTimeout, err, "%s has not reached sequence %d yet (--at-least-seq): was it published to this conversation?", conv, *f.atLeast)
	}
	if err != nil {
		return err
	}
	var rendered json.RawMessage
	if *f.format != "" {
		req, err := formats.Render(cx, formats.Format(*f.format))
		if err != nil {
			return err
		}
		rendered = req.JSON
	}
	if *f.asJSON {
		return writeContextJSON(c, conv, cx, *f.format, rendered)
	}
	return printContext(c, conv, cx, *f.format, rendered)
}

// options are the read's options the flags ask for.
func (f *contextFlags) options() []pipeline.ContextOption {
	var opts []pipeline.ContextOption
	if *f.raw {
		opts = append(opts, pipeline.Raw())
	}
	if *f.maxTokens > 0 {
		opts = append(opts, pipeline.MaxTokens(*f.maxTokens))
	}
	if *f.atLeast > 0 {
		opts = append(opts, pipeline.AtLeastSeq(*f.atLeast))
	}
	return opts
}

// writeContextJSON prints the context as one JSON object (--json): the messages with
// their sequences, the read's summary and, with --format, the rendered request.
func writeContextJSON(c *call, conv string, cx *pipeline.Context, format string, rendered json.RawMessage) error {
	return writeJSON(c.std.out, struct {
		Conversation string             `json:"conversation"`
		Generation   uint64             `json:"generation"`
		TailStartSeq uint64             `json:"tail_start_seq"`
		HasSummary   bool               `json:"has_summary"`
		Tokens       int                `json:"tokens"`
		Degraded     bool               `json:"degraded"`
		Messages     []schemas.Message  `json:"messages"`
		Seqs         []uint64           `json:"seqs"`
		Skipped      []pipeline.Skipped `json:"skipped"`
		Format       string             `json:"format,omitempty"`
		Rendered     json.RawMessage    `json:"rendered,omitempty"`
	}{conv, cx.Generation, cx.TailStartSeq, cx.HasSummary, cx.Tokens, cx.Degraded, nonNil(cx.Messages), nonNil(cx.Seqs), nonNil(cx.Skipped),
		format, rendered})
}

// printContext prints the context on stdout (the rendered document, or one message
// a line) and on stderr the messages skipped and the read's summary.
func printContext(c *call, conv string, cx *pipeline.Context, format string, rendered json.RawMessage) error {
	w := bufio.NewWriter(c.std.out)
	if rendered != nil && formats.Format(format) != formats.OpenAI {
		w.Write(rendered) // one JSON document
		w.WriteByte('\n')
	} else {
		for i := range cx.Messages {
			b, err := cx.Messages[i].Encode()
			if err != nil {
				return err
			}
			w.Write(b)
			w.WriteByte('\n')
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, s := range cx.Skipped {
		fmt.Fprintf(c.std.err, "skipped seq %d: %s\n", s.Seq, s.Reason)
	}
	degraded := ""
	if cx.Degraded {
		degraded = " (degraded to fit --max-tokens)"
	}
	fmt.Fprintf(c.std.err, "%s: generation %d, %d messages, about %s tokens, tail from seq %d%s\n",
		conv, cx.Generation, len(cx.Messages), thousands(cx.Tokens), cx.TailStartSeq, degraded)
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var compactCommand = &command{
	name: "compact", args: "<conv>", conn: fullConn, interruptible: true,
	summary: "ask for a compaction now; --wait waits for its outcome",
	about: `Asks the compactor service (compactor.compact). Without --wait it returns once the
request is queued. With --wait D it waits up to D for the outcome: completed (exit 0, with
the new generation), declined (exit 0: the guard found nothing worth compacting, and says
why), failed (exit 5), or none yet (exit 6: the request stays queued or in progress).
A compaction already pending (the trigger's, or another client's) is busy (exit 4)
without --wait: this request and its instructions were not queued; ask again when it
completes. With --wait the command says so on stderr and waits for that one's outcome
instead, answering it as its own. A conversation with nothing stored is not found
(exit 3) and nothing is queued. ctrl-C while waiting prints the request's id, to follow
it with compactor status or on compact.event.<conv> (exit 130).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		instructions := fs.String("instructions", "", "TEXT", "extra wishes for the summarizer (data, never overriding its rules)")
		wait := fs.Duration("wait", "D", "wait up to D (e.g. 30s) for the outcome; the service caps it at 5m")
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			conv, err := c.conversation()
			if err != nil {
				return err
			}
			if *wait < 0 {
				return usagef("--wait must not be negative")
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := mustExist(ctx, cl, conv); err != nil {
				return err
			}
			// The id is ours, so that an interrupted wait can name the request to follow.
			id := schemas.NewRequestID()
			events := "compact.event." + conv
			r, err := cl.Compact(ctx, conv, pipeline.RequestID(id), pipeline.Instructions(*instructions), pipeline.Wait(*wait))
			if err != nil {
				if ctx.Err() != nil {
					return interrupted(ctx, "interrupted: compaction request %s of %s was sent and may be queued or in progress; "+
						"`compactor status %s` shows it while it is pending; its outcome is published on %s (request_id %s)", id, conv, conv, events, id)
				}
				return serviceError(err)
			}
			if r.Status == pipeline.StatusBusy && *wait > 0 && r.RequestID != "" {
				// The trigger (or another client) asked first: its outcome is what
				// this wait is for.
				fmt.Fprintf(c.std.err, "a compaction of %s is already pending (request %s, queued by the trigger or another client); "+
					"this request and its instructions were not queued: waiting up to %s for that one's outcome\n", conv, r.RequestID, *wait)
				r, err = waitPendingOutcome(ctx, cl, conv, r.RequestID, *wait)
				if err != nil {
					if ctx.Err() != nil {
						return interrupted(ctx, "interrupted: the pending compaction %s of %s goes on; `compactor status %s` shows it while it is pending; "+
							"its outcome is published on %s", r.RequestID, conv, conv, events)
					}
					return err
				}
			}
			if *asJSON {
				if err := writeJSON(c.std.out, r); err != nil {
					return err
				}
			}
			switch r.Status {
			case pipeline.StatusBusy:
				pending := ""
				if r.RequestID != "" {
					pending = " (request " + r.RequestID + ")"
				}
				return newError(errBusy, nil, "busy: a compaction of %s is already pending%s; this request and its instructions were not queued: "+
					"ask again when it completes (its outcome is published on %s)", conv, pending, events)
			case pipeline.StatusFailed:
				return newError(errFailed, nil, "compaction of %s failed (request %s): %s; the previous result stays", conv, r.RequestID, r.Error)
			case pipeline.StatusQueued:
				if *wait > 0 {
					return newError(errTimeout, nil, "no outcome within %s: request %s of %s stays queued or in progress; "+
						"`compactor status %s` shows it while it is pending; its outcome is published on %s", *wait, r.RequestID, conv, conv, events)
				}
				if !*asJSON {
					fmt.Fprintf(c.std.out, "queued: request %s of %s; its outcome will be published on %s\n", r.RequestID, conv, events)
				}
			case pipeline.StatusCompleted:
				if !*asJSON {
					fmt.Fprintf(c.std.out, "completed: %s\n", describeResult(r.Result, r.RequestID))
					if r.Error != "" {
						fmt.Fprintf(c.std.out, "note: %s\n", r.Error)
					}
				}
			case pipeline.StatusDeclined:
				if !*asJSON {
					fmt.Fprintf(c.std.out, "declined: %s (request %s); nothing changed\n", r.Error, r.RequestID)
				}
			default:
				if !*asJSON {
					return writeJSON(c.std.out, r)
				}
			}
			return nil
		}
	},
}

// waitPendingOutcome waits up to d for the outcome of the request id already pending
// for conv, and answers it as the service answers a wait: completed (with the value),
// declined or failed, or queued when d ends first. In service mode, which has no
// events, it watches the pending request until it is gone: completed when the value
// is the request's, declined otherwise (the service tells the two no further; its
// event says which).
func waitPendingOutcome(ctx context.Context, cl *pipeline.Client, conv, id string, d time.Duration) (pipeline.CompactResponse, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	r := pipeline.CompactResponse{Status: pipeline.StatusQueued, RequestID: id}
	if !cl.ServiceMode() {
		ev, err := cl.WaitForOutcome(wctx, conv, id)
		switch {
		case wctx.Err() != nil && ctx.Err() == nil:
			return r, nil
		case err != nil:
			return r, err
		}
		switch ev.Type {
		case schemas.EventForgotten:
			return r, notFound(conv)
		case schemas.EventCompleted:
			v, err := cl.Result(ctx, conv)
			if err != nil {
				return r, err
			}
			r.Status, r.Result, r.Error = pipeline.StatusCompleted, v, ev.Error
		case schemas.EventDeclined:
			r.Status, r.Error = pipeline.StatusDeclined, ev.Reason
		default:
			r.Status, r.Error = pipeline.StatusFailed, ev.Error
		}
		return r, nil
	}
	for {
		p, err := cl.Pending(wctx, conv)
		switch {
		case wctx.Err() != nil && ctx.Err() == nil:
			return r, nil
		case err != nil:
			return r, err
		}
		if p == nil || p.RequestID != id {
			v, err := cl.Result(ctx, conv)
			if err != nil {
				return r, err
			}
			if v != nil && v.RequestID == id {
				r.Status, r.Result = pipeline.StatusCompleted, v
			} else {
				r.Status, r.Error = pipeline.StatusDeclined, "it wrote no new value (declined or failed: its event on compact.event."+conv+" says which)"
			}
			return r, nil
		}
		select {
		case <-wctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// describeResult is one line about a value written by a compaction.
func describeResult(v *schemas.Result, requestID string) string {
	if v == nil {
		return "request " + requestID
	}
	s := fmt.Sprintf("generation %d, %s → %s tokens (%s → %s messages), tail from seq %d (request %s)", v.Generation,
		thousands(v.TokensBefore), thousands(v.TokensAfter), thousands(v.MessagesBefore), thousands(v.MessagesAfter), v.TailStartSeq, requestID)
	if v.Fallback {
		s += "; an extractive fallback summary (no LLM)"
	}
	return s
}

var statusCommand = &command{
	name: "status", args: "[<conv>]", conn: fullConn, interruptible: true,
	summary: "one conversation's compaction state, or the pipeline's streams and consumers",
	about: `With <conv>: its generation, tokens before and after the last compaction, where the
tail starts, what a read shows now, any decline, and the compaction request queued or being
worked on, if any (exit 3 when it has nothing stored).
Without: every stream (messages, bytes, subjects) and consumer (pending, waiting for an
ack, redelivered), with a partitioned trigger each partition's owner, and whether the NATS
servers sync every write to disk (COMPACTOR_NATS_MONITOR_URL, or a system account user,
lets status read a remote server's setting).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 1 {
				return usagef("status takes at most one conversation id, got %d arguments", len(c.args))
			}
			if len(c.args) == 1 {
				if err := schemas.ValidateConversationID(c.args[0]); err != nil {
					return usagef("%v", err)
				}
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			if len(c.args) == 0 {
				s, err := cl.PipelineStatus(ctx)
				if err != nil {
					return err
				}
				d := c.readDurability(ctx)
				s.Durability = &d
				if *asJSON {
					return writeJSON(c.std.out, s)
				}
				return writePipelineStatus(c.std.out, s)
			}
			conv := c.args[0]
			if err := mustExist(ctx, cl, conv); err != nil {
				return err
			}
			v, err := cl.Result(ctx, conv)
			if err != nil {
				return err
			}
			cx, err := cl.Context(ctx, conv)
			if err != nil {
				return err
			}
			p := readPending(ctx, cl, conv)
			if *asJSON {
				out := map[string]any{
					"conversation": conv, "context_tokens": cx.Tokens, "context_messages": len(cx.Messages),
					"skipped": nonNil(cx.Skipped), "value": v, "pending": p.req != nil,
				}
				if p.req != nil {
					out["pending_request_id"] = p.req.RequestID
				}
				if p.err != "" {
					out["pending_error"] = p.err
				}
				return writeJSON(c.std.out, out)
			}
			return writeConversationStatus(c.std.out, conv, v, cx, p)
		}
	},
}

// pendingRead is the conversation's pending request as status shows it: the request,
// or why it could not be read (a user without the right to read the work queue).
type pendingRead struct {
	req *schemas.Request
	err string
}

// readPending reads the request queued or being worked on for conv; a read that fails
// is shown, not fatal: the rest of the status stands.
func readPending(ctx context.Context, cl *pipeline.Client, conv string) pendingRead {
	req, err := cl.Pending(ctx, conv)
	if err != nil {
		return pendingRead{err: err.Error()}
	}
	return pendingRead{req: req}
}

func writeConversationStatus(w io.Writer, conv string, v *schemas.Result, cx *pipeline.Context, p pendingRead) error {
	tw := tabwriter.NewWriter(w, 2, 0, 3, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("conversation", "%s", conv)
	switch {
	case v == nil || v.Generation == 0:
		row("generation", "0 (nothing compacted yet)")
	default:
		row("generation", "%d", v.Generation)
		row("compacted", "%s, %s (request %s)", v.CreatedAt.Local().Format(time.RFC3339), orDash(v.Trigger), orDash(v.RequestID))
		row("tokens", "%s before, %s after (%s → %s messages)", thousands(v.TokensBefore), thousands(v.TokensAfter),
			thousands(v.MessagesBefore), thousands(v.MessagesAfter))
		row("summary", "%s characters%s", thousands(len([]rune(v.Summary))), map[bool]string{true: ", extractive fallback (no LLM)"}[v.Fallback])
		if v.Strategy != "" {
			row("strategy", "%s", v.Strategy)
		}
		row("tail from seq", "%d", v.TailStartSeq)
	}
	if v != nil && v.DeclinedAtSeq > 0 {
		row("declined", "the last compaction was declined at seq %d (it waits for the conversation to grow)", v.DeclinedAtSeq)
	}
	switch {
	case p.err != "":
		row("pending", "cannot be read: %s", p.err)
	case p.req != nil:
		row("pending", "request %s (%s, asked %s): queued or being worked on; its outcome is published on compact.event.%s",
			p.req.RequestID, p.req.Trigger, p.req.RequestedAt.Local().Format(time.RFC3339), conv)
	default:
		row("pending", "none")
	}
	row("context now", "%s messages, about %s tokens", thousands(len(cx.Messages)), thousands(cx.Tokens))
	for _, s := range cx.Skipped {
		row("skipped", "seq %d: %s", s.Seq, s.Reason)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writePipelineStatus(w io.Writer, s jetstream.Status) error {
	streams := [][]string{{"STREAM", "MESSAGES", "BYTES", "SUBJECTS", "ERROR"}}
	for _, st := range s.Streams {
		streams = append(streams, []string{st.Name, thousands(st.Messages), humanBytes(st.Bytes), thousands(st.Subjects), cmp.Or(st.Error, st.Note)})
	}
	consumers := [][]string{{"CONSUMER", "STREAM", "PENDING", "ACK PENDING", "REDELIVERED", "WAITING PULLS", "PARTITION", "OWNER", "ERROR"}}
	for _, c := range s.Consumers {
		consumers = append(consumers, []string{c.Name, c.Stream, thousands(c.Pending), thousands(c.AckPending),
			thousands(c.Redelivered), thousands(c.Waiting), c.Partition, c.Owner, c.Error})
	}
	if err := writeTable(w, streams); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := writeTable(w, consumers); err != nil {
		return err
	}
	if len(s.TriggerMembers) > 0 {
		fmt.Fprintf(w, "\ntrigger members: %s\n", strings.Join(s.TriggerMembers, ", "))
	}
	if len(s.PolicyDisagreements) > 0 {
		fmt.Fprintf(w, "\nthe roles run with different policy defaults (the trigger counts against its settings, the workers compact to theirs; "+
			"set the same COMPACTOR_ policy variables and profiles on every process):\n")
		for _, d := range s.PolicyDisagreements {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	if s.TriggerMembersError != "" {
		fmt.Fprintf(w, "\ntrigger members: %s\n", s.TriggerMembersError)
	}
	if s.PolicyRecordsError != "" {
		fmt.Fprintf(w, "\npolicy records (whether the roles run with the same defaults): %s\n", s.PolicyRecordsError)
	}
	if s.Durability != nil {
		// What an OS crash or a power loss would cost.
		fmt.Fprintf(w, "\ndurability: %s\n", s.Durability)
	}
	return writeLearnedWindows(w, s)
}

// writeLearnedWindows lists the summarizer windows the workers learned, if any.
func writeLearnedWindows(w io.Writer, s jetstream.Status) error {
	if s.LearnedWindowsError != "" {
		fmt.Fprintf(w, "\nlearned summarizer windows: %s\n", s.LearnedWindowsError)
	}
	if len(s.LearnedWindows) == 0 {
		return nil
	}
	rows := [][]string{{"LEARNED WINDOW", "MODEL", "TOKENS", "STATED", "LEARNED AT"}}
	for _, lw := range s.LearnedWindows {
		stated := "-"
		if lw.StatedTokens > 0 {
			stated = thousands(lw.StatedTokens)
		}
		rows = append(rows, []string{lw.Endpoint, lw.Model, thousands(lw.Tokens), stated, lw.LearnedAt.UTC().Format(time.RFC3339)})
	}
	fmt.Fprintln(w)
	return writeTable(w, rows)
}

// writeTable writes rows (the first is the header) in aligned columns, leaving out the
// columns no row fills.
func writeTable(w io.Writer, rows [][]string) error {
	var keep []int
	for col := range rows[0] {
		for _, r := range rows[1:] {
			if r[col] != "" {
				keep = append(keep, col)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(w, 2, 0, 3, ' ', 0)
	for _, r := range rows {
		cells := make([]string, len(keep))
		for i, col := range keep {
			cells[i] = r[col]
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

var forgetCommand = &command{
	name: "forget", args: "<conv>", conn: fullConn, interruptible: true,
	summary: "delete the conversation everywhere, for good",
	about: `Deletes, through the compactor service (compactor.forget): its messages, value and
history, policy, pending request, idle timer, events, dead letters and stored objects.
Work in flight does not bring it back; messages published to the same id afterwards start
a new conversation. Prints what was deleted; forgetting a conversation with nothing
stored is no error (every count is 0), so a forget can be repeated.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			conv, err := c.conversation()
			if err != nil {
				return err
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			r, err := cl.Forget(ctx, conv)
			if err != nil {
				return serviceError(err)
			}
			if *asJSON {
				return writeJSON(c.std.out, r)
			}
			fmt.Fprintf(c.std.out, "forgot %s through seq %d at %s; deleted:\n", r.Conversation, r.ThroughSeq, r.ForgottenAt.Local().Format(time.RFC3339))
			d := r.Deleted
			tw := tabwriter.NewWriter(c.std.out, 2, 0, 3, ' ', 0)
			for _, row := range []struct {
				what string
				n    uint64
			}{
				{"chat messages", d.ChatMessages}, {"of them erased", d.ChatMessagesErased}, {"result revisions", d.ResultRevisions},
				{"policy revisions", d.PolicyRevisions}, {"requests", d.Requests}, {"events", d.Events},
				{"dead letters", d.DeadLetters}, {"activity markers", d.ActivityMarkers}, {"objects", d.Objects},
			} {
				fmt.Fprintf(tw, "  %s\t%s\n", row.what, thousands(row.n))
			}
			return tw.Flush()
		}
	},
}

var versionCommand = &command{
	name: "version", interruptible: true,
	summary: "print the versions of compactor, Go and the wire contract",
	define: func(fs *flagSet) func(context.Context, *call) error {
		asJSON := fs.JSON()
		return func(_ context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("version takes no arguments")
			}
			v := buildVersion()
			if *asJSON {
				return writeJSON(c.std.out, v)
			}
			tw := tabwriter.NewWriter(c.std.out, 2, 0, 3, ' ', 0)
			fmt.Fprintf(tw, "compactor\t%s\n", v.Version)
			fmt.Fprintf(tw, "go\t%s %s/%s\n", v.Go, v.OS, v.Arch)
			fmt.Fprintf(tw, "wire contract\tv%d\n", v.WireContract)
			if v.Revision != "" {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				fmt.Fprintf(tw, "revision\t%s%s %s\n", v.Revision, mod, v.RevisionTime)
			}
			return tw.Flush()
		}
	},
}

// version is the version this binary was built as, set at link time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/compactor
//
// The Dockerfile sets it from its VERSION build argument. When set, it is the version
// `compactor version` prints, in place of the module's from the build info.
var version string

// versionInfo is what `compactor version` prints.
type versionInfo struct {
	// Version is the version set at link time (-X main.version) if any, else the
	// module's version: a release tag for go install module@version, a pseudo-version
	// from the VCS for a build in a checkout, "(devel)" otherwise (a build without VCS
	// information, as in a docker build without the VERSION argument).
	Version      string `json:"version"`
	Go           string `json:"go"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	WireContract int    `json:"wire_contract"`
	Revision     string `json:"revision,omitempty"`
	RevisionTime string `json:"revision_time,omitempty"`
	Modified     bool   `json:"modified,omitempty"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, WireContract: schemas.SchemaVersion}
	bi, ok := debug.ReadBuildInfo()
	switch {
	case version != "":
		v.Version = version
	case ok && bi.Main.Version != "":
		v.Version = bi.Main.Version
	}
	if !ok {
		return v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.RevisionTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readDurability reads whether the servers sync every write (jetstream.ReadDurability)
// on a connection of its own: asking the system account is a publish the server may
// refuse this user, which must not end the command.
func (c *call) readDurability(ctx context.Context) jetstream.Durability {
	env, err := c.loadEnv()
	if err != nil {
		return jetstream.Durability{Unknown: err.Error()}
	}
	if urls := env.monitorURLs(); len(urls) > 0 {
		return jetstream.ReadDurability(ctx, nil, urls)
	}
	nc, _, err := c.dial(env)
	if err != nil {
		return jetstream.Durability{Unknown: err.Error()}
	}
	defer nc.Close()
	return jetstream.ReadDurabilityAsJetStreamUser(ctx, nc, nil)
}
