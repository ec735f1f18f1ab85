package main

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/internal/mcpserver"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

var mcpCommand = &command{
	name: "mcp", conn: fullConn,
	summary: "serve a Model Context Protocol server: the recall, status (and pin) tools of an agent's own conversation",
	about: `A Model Context Protocol server (docs/mcp.md) an agent's client starts, on stdio by default:
its tools are recall (the raw messages behind the summary matching a query and/or a
sequence range, within a token budget capped by --max-tokens, secrets redacted as in the
summary's evidence, the sequences the budget left out named) and status (generation,
tokens before and after the last compaction and now, what the summary covers, where the
tail starts, when it was compacted, pinned messages). Both are read-only.

With --allow-pin (or COMPACTOR_MCP_ALLOW_PIN=true) it lists pin too: it keeps a message
(with its whole tool round) verbatim through later compactions by adding its sequences
to the conversation's pins policy key, through the compactor service (the NATS user must
be allowed to set policies); at most 64 per conversation.

Its conversation: --conversation (or COMPACTOR_MCP_CONVERSATION), one server per agent
session; a tool call naming another is refused. With --any-conversation (or
COMPACTOR_MCP_ANY_CONVERSATION=true) a call may name any conversation the NATS user may
read (the bound one, if any, is the default). The NATS user it connects as bounds what it
reads: run it as a user of the reader role, or as a tenant's user (tenants' own streams).

With --listen (or COMPACTOR_MCP_LISTEN) host:port it serves streamable HTTP at / instead
of stdio; on any address but loopback COMPACTOR_MCP_TOKEN is required, sent as a bearer
token. It runs until stdin closes (stdio) or SIGINT/SIGTERM, and exits 0.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		f := &mcpFlags{
			conversation: fs.String("conversation", "", "ID", "the conversation the tools read (also COMPACTOR_MCP_CONVERSATION)"),
			any:          fs.Bool("any-conversation", "", "let a tool call name any conversation the NATS user may read (also COMPACTOR_MCP_ANY_CONVERSATION=true)"),
			listen:       fs.String("listen", "", "HOST:PORT", "serve streamable HTTP on HOST:PORT instead of stdio (also COMPACTOR_MCP_LISTEN)"),
			maxTokens:    fs.Int("max-tokens", "N", fmt.Sprintf("the most tokens one recall returns (default %d; also COMPACTOR_MCP_MAX_TOKENS)", schemas.DefaultAnswerRecallMaxTokens)),
			allowPin:     fs.Bool("allow-pin", "", "list the pin tool, which writes the conversation's pins policy key (also COMPACTOR_MCP_ALLOW_PIN=true); otherwise read-only"),
		}
		return func(ctx context.Context, c *call) error { return runMCP(ctx, c, f) }
	},
}

// mcpFlags are the mcp command's flags, once parsed.
type mcpFlags struct {
	conversation, listen *string
	any, allowPin        *bool
	maxTokens            *int
}

// mcpSettings are what the flags and the COMPACTOR_MCP_ variables set.
type mcpSettings struct {
	cfg    mcpserver.Config
	listen string
	token  string
}

// settings are the flags over the COMPACTOR_MCP_ variables, checked.
func (f *mcpFlags) settings(env Env) (mcpSettings, error) {
	s := mcpSettings{listen: cmp.Or(*f.listen, env.MCPListen), token: env.MCPToken}
	s.cfg.Conversation, s.cfg.AnyConversation = cmp.Or(*f.conversation, env.MCPConversation), *f.any || env.MCPAnyConversation
	s.cfg.MaxTokens = cmp.Or(*f.maxTokens, env.MCPMaxTokens)
	s.cfg.AllowPin = *f.allowPin || env.MCPAllowPin
	if s.cfg.Conversation == "" && !s.cfg.AnyConversation {
		return s, usagef("mcp needs its conversation: --conversation ID (or COMPACTOR_MCP_CONVERSATION), " +
			"or --any-conversation (COMPACTOR_MCP_ANY_CONVERSATION=true) to let the tools name one")
	}
	if s.cfg.Conversation != "" {
		if err := schemas.ValidateConversationID(s.cfg.Conversation); err != nil {
			return s, usagef("--conversation: %v", err)
		}
	}
	if err := s.cfg.Validate(); err != nil {
		return s, usagef("%v", err)
	}
	if s.listen != "" {
		host, _, err := net.SplitHostPort(s.listen)
		if err != nil {
			return s, usagef("--listen %q: want host:port (%v)", s.listen, err)
		}
		if s.token == "" && !loopbackAddress(host) {
			return s, newError(errConfig, nil, "--listen %s is not a loopback address: set COMPACTOR_MCP_TOKEN, which every request must "+
				"then send as a bearer token (the tools read conversations)", s.listen)
		}
		if s.token != "" && len(s.token) < 16 {
			return s, newError(errConfig, nil, "COMPACTOR_MCP_TOKEN must be at least 16 characters")
		}
	}
	return s, nil
}

// runMCP connects as the other commands do and serves the MCP server until its client
// goes (stdio) or the command is stopped.
func runMCP(ctx context.Context, c *call, f *mcpFlags) error {
	if len(c.args) > 0 {
		return usagef("mcp takes no arguments (name the conversation with --conversation), got %s", strings.Join(quoteAll(c.args), " "))
	}
	env, err := c.loadEnv()
	if err != nil {
		return err
	}
	s, err := f.settings(env)
	if err != nil {
		return err
	}
	// Not c.connect: a refusal of one tool call is that call's error, not the end of the
	// server (the pipeline's reads report it at once).
	nc, conn, err := c.dial(env)
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := c.open(ctx, nc, env)
	if err != nil {
		return openError(conn, env, err)
	}
	var tombs mcpserver.Tombstones
	if !cl.ServiceMode() {
		st, err := jetstream.Open(ctx, nc, env.jetstream())
		if err != nil {
			return openError(conn, env, err)
		}
		tombs = mcpserver.StoreTombstones(nc, st)
	}
	s.cfg.Version = buildVersion().Version
	srv, err := mcpserver.New(cl, tombs, s.cfg)
	if err != nil {
		return usagef("%v", err)
	}
	tools := "tools: recall, status; read-only"
	if s.cfg.AllowPin {
		tools = "tools: recall, status, pin"
	}
	which := "conversation " + s.cfg.Conversation
	switch {
	case s.cfg.AnyConversation && s.cfg.Conversation != "":
		which += " (or any the tools name)"
	case s.cfg.AnyConversation:
		which = "any conversation the tools name"
	}
	if s.listen == "" {
		fmt.Fprintf(c.std.err, "compactor mcp: serving %s on stdio (%s)\n", which, tools)
		err := srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(c.std.in), Writer: nopWriteCloser{rawWriter(c.std.out)}})
		if ctx.Err() != nil || errors.Is(err, io.EOF) {
			return nil // stopped, or the client closed stdin
		}
		return err
	}
	return serveMCPHTTP(ctx, c, srv, s, which, tools)
}

// serveMCPHTTP serves srv as streamable HTTP on s.listen until ctx is done.
func serveMCPHTTP(ctx context.Context, c *call, srv *mcp.Server, s mcpSettings, which, tools string) error {
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return newError(errConfig, err, "--listen %s: %v", s.listen, err)
	}
	// The SDK refuses a loopback request naming another host (DNS rebinding); a browser's
	// cross-origin request is refused too, and a session idle for an hour is closed.
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: time.Hour})
	h = http.NewCrossOriginProtection().Handler(h)
	if s.token != "" {
		h = bearer(s.token, h)
	}
	// Requests live in ctx: when it ends, a client's open event stream (its standalone
	// GET) ends with it, and the shutdown does not wait for it.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	fmt.Fprintf(c.std.err, "compactor mcp: serving %s on http://%s/ (streamable HTTP; %s)\n", which, ln.Addr(), tools)
	return telemetry.ServeUntilDone(ctx, hs, ln, "compactor mcp")
}

// bearer lets through the requests that send token as their bearer token.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="compactor mcp"`)
			http.Error(w, "missing or wrong bearer token (COMPACTOR_MCP_TOKEN)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// rawWriter is w without the escaping of text for people (textOut): the protocol's
// JSON goes out as written.
func rawWriter(w io.Writer) io.Writer {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		return u.Unwrap()
	}
	return w
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
