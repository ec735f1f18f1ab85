package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/compactor/compactor/internal/natsconn"
)

// How a command finds its NATS server and credentials is natsconn's (docs/cli.md); the
// flags and the COMPACTOR_NATS_* variables are this command line's sources.

// connFlags are the connection flags of a command, named as the nats CLI names them.
type connFlags struct {
	server, creds, nkey, token, user, password, tlsCA, tlsCert, tlsKey, inbox *string
	context                                                                   *string
	noContext                                                                 *bool
	// verbose: say on stderr how the command reaches the pipeline (the service mode).
	verbose *bool
}

var flagNames = map[string]string{
	"URL": "-s/--server", "CredsFile": "--creds", "NKeyFile": "--nkey", "Token": "--token", "User": "--user",
	"Password": "--password", "CAFile": "--tlsca", "CertFile": "--tlscert", "KeyFile": "--tlskey", "InboxPrefix": "--inbox-prefix",
}

// defineConnFlags adds the connection flags to fs; contexts adds --context and
// --no-context (every command but serve).
func defineConnFlags(fs *flagSet, contexts bool) *connFlags {
	var c connFlags
	fs.inGroup("Connection", func() {
		c.server = fs.String("server", "s", "URL", "NATS server URL(s), comma-separated")
		if contexts {
			c.context = fs.String("context", "", "NAME", "nats CLI context to use (a name, or a .json file)")
			c.noContext = fs.Bool("no-context", "", "use no nats CLI context (neither NATS_CONTEXT nor the selected one)")
			c.verbose = fs.Bool("verbose", "v", "say on stderr how the command reaches the pipeline (its streams, or the compactor service)")
		}
		c.creds = fs.String("creds", "", "FILE", "credentials file (user JWT and NKey seed)")
		c.nkey = fs.String("nkey", "", "FILE", "file holding a user NKey seed")
		c.token = fs.String("token", "", "TOKEN", "authentication token")
		c.user = fs.String("user", "", "USER", "user name (with --password)")
		c.password = fs.String("password", "", "PASSWORD", "password of --user")
		c.tlsCA = fs.String("tlsca", "", "FILE", "CA certificates (PEM) that signed the server's certificate")
		c.tlsCert = fs.String("tlscert", "", "FILE", "client certificate (PEM), with --tlskey")
		c.tlsKey = fs.String("tlskey", "", "FILE", "private key (PEM) of --tlscert")
		c.inbox = fs.String("inbox-prefix", "", "PREFIX", "prefix of this connection's reply subjects instead of _INBOX")
	})
	return &c
}

func (c *connFlags) source() *natsconn.Source {
	return &natsconn.Source{URL: *c.server, Auth: natsconn.Auth{CredsFile: *c.creds, NKeyFile: *c.nkey, Token: *c.token,
		User: *c.user, Password: *c.password, CAFile: *c.tlsCA, CertFile: *c.tlsCert, KeyFile: *c.tlsKey, InboxPrefix: *c.inbox},
		Name: func(f string) string { return flagNames[f] }}
}

// envSource is the COMPACTOR_NATS_* variables, and for a client command COMPACTOR_LISTEN
// when it is set, as the server a local compactor serve listens on (for serve it is
// where its embedded server listens).
func envSource(env Env, client bool) *natsconn.Source {
	s := &natsconn.Source{URL: env.NATSURL, Auth: env.natsAuth(), Name: func(f string) string { return envPrefix + "_" + authVars[f] }}
	if s.URL == "" && client && env.lookup != nil {
		if v, ok := env.lookup(envPrefix + "_LISTEN"); ok && v != "" {
			s.URL = "nats://" + v
			s.Name = func(f string) string {
				if f == "URL" {
					return envPrefix + "_LISTEN"
				}
				return envPrefix + "_" + authVars[f]
			}
		}
	}
	return s
}

// resolveConnection picks the server and credentials of a command. cf is nil for a
// command without connection flags; contexts is false for serve, which connects only
// with its flags and COMPACTOR_NATS_*. Errors are configuration errors naming each
// setting by its source.
func resolveConnection(env Env, cf *connFlags, contexts bool) (*natsconn.Connection, error) {
	req := natsconn.Request{Contexts: contexts, Lookup: env.lookup, Local: env.Listen}
	if cf != nil {
		req.Sources = append(req.Sources, cf.source())
	}
	req.Sources = append(req.Sources, envSource(env, contexts))
	if contexts {
		req.NoContext = cf != nil && cf.noContext != nil && *cf.noContext
		if cf != nil && cf.context != nil && *cf.context != "" {
			if req.NoContext {
				return nil, usagef("--context and --no-context contradict each other: use one")
			}
			req.Context, req.ContextHow = *cf.context, "--context"
		}
		req.LocalHint = " (or name it with -s/--server, NATS_URL or a nats context)"
	} else if cf != nil {
		req.LocalHint = " (or name it with -s/--server)"
	}
	c, err := natsconn.Resolve(req)
	if err != nil {
		return nil, newError(errConfig, err, "%v", err)
	}
	if !c.Local {
		if err := checkServerURLs(c.URL, c.Name("URL")); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// urlSchemes are the schemes nats.go dials.
var urlSchemes = []string{"nats", "tls", "ws", "wss"}

// checkServerURLs reports a malformed URL among the comma-separated urls before any
// dial, which would report it as a server that did not answer: a scheme nats.go does
// not dial, one not followed by "://" (htp:/host), no host, a path where none belongs.
// A URL without a scheme is a host and port that nats.go dials as nats://. The error
// names the URL without its user info.
func checkServerURLs(urls, from string) error {
	list := strings.Split(urls, ",")
	for i, s := range list {
		s = strings.TrimSpace(s)
		bad := func(format string, args ...any) error {
			which := ""
			if len(list) > 1 {
				which = fmt.Sprintf(" (server %d of %d)", i+1, len(list))
			}
			return newError(errConfig, nil, "malformed NATS server URL %s%s in %s: %s; a URL is nats://host:port (or tls://, ws://, wss://)",
				natsconn.RedactURL(s), which, from, fmt.Sprintf(format, args...))
		}
		if s == "" {
			if len(list) > 1 {
				return bad("empty")
			}
			continue
		}
		full := s
		if !strings.Contains(s, "://") {
			if scheme, rest, ok := strings.Cut(s, ":"); ok && strings.HasPrefix(rest, "/") {
				return bad("the scheme %q must be followed by \"://\"", scheme)
			}
			full = "nats://" + s
		}
		u, err := url.Parse(full)
		if err != nil {
			return bad("it does not parse")
		}
		if !slices.Contains(urlSchemes, strings.ToLower(u.Scheme)) {
			return bad("unknown scheme %q", u.Scheme)
		}
		if u.Hostname() == "" {
			return bad("no host")
		}
		if (u.Path != "" && u.Path != "/") && (u.Scheme == "nats" || u.Scheme == "tls") {
			return bad("a path (%q) after the host", u.Path)
		}
	}
	return nil
}
