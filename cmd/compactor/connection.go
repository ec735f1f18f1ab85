package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
)

// Where a command finds its NATS server and credentials, highest first (README, "The
// command line"):
//
//  1. the command's flags (-s/--server, --creds, ...);
//  2. the COMPACTOR_NATS_* variables (and COMPACTOR_LISTEN when it is set);
//  3. the NATS_* variables the nats CLI reads (NATS_URL, NATS_CREDS, ...), then the nats
//     CLI context named by --context or NATS_CONTEXT;
//  4. the nats CLI context selected with `nats context select` (~/.config/nats/context.txt);
//  5. a local `compactor serve`: nats://COMPACTOR_LISTEN, without credentials.
//
// The server URL, the CA file, the client certificate (with its key) and the inbox
// prefix each come from the highest source that sets them, as in the nats CLI. The way
// to authenticate (credentials file, NKey, token, user and password) is taken whole
// from the highest source that names one: mixing a token from one source with a user
// from another is never what was meant, and would only be refused as two ways at once.
// A URL with user info from a higher source than that replaces it.
//
// serve honours only the first two: it creates streams where it connects, so it never
// picks a server up from the nats CLI's selection or its variables by accident.

// connSource is one of those sources.
type connSource struct {
	url      string
	auth     jetstream.Auth
	tlsFirst bool
	// name says how a field (a jetstream.Auth field name, or "URL") of this source is
	// set, for errors: "--creds", "COMPACTOR_NATS_CREDS", `creds of nats context "prod"`.
	name func(field string) string
}

// authFields are the ways to authenticate, taken from one source together.
var authFields = []string{"CredsFile", "NKeyFile", "Token", "User", "Password"}

// connection is where and how a command connects.
type connection struct {
	url      string
	auth     jetstream.Auth
	tlsFirst bool
	// local: no source named a server; url is the local compactor serve's.
	local bool
	from  map[string]*connSource
}

// name says where a field's value came from.
func (c *connection) name(field string) string {
	if s := c.from[field]; s != nil {
		return s.name(field)
	}
	return field
}

// connFlags are the connection flags of a command, named as the nats CLI names them.
type connFlags struct {
	server, creds, nkey, token, user, password, tlsCA, tlsCert, tlsKey, inbox *string
	context                                                                   *string
	noContext                                                                 *bool
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

func (c *connFlags) source() *connSource {
	return &connSource{url: *c.server, auth: jetstream.Auth{CredsFile: *c.creds, NKeyFile: *c.nkey, Token: *c.token,
		User: *c.user, Password: *c.password, CAFile: *c.tlsCA, CertFile: *c.tlsCert, KeyFile: *c.tlsKey, InboxPrefix: *c.inbox},
		name: func(f string) string { return flagNames[f] }}
}

// envSource is the COMPACTOR_NATS_* variables, and for a client command COMPACTOR_LISTEN
// when it is set, as the server a local compactor serve listens on (for serve it is
// where its embedded server listens).
func envSource(env Env, client bool) *connSource {
	s := &connSource{url: env.NATSURL, auth: env.natsAuth(), name: func(f string) string { return envPrefix + "_" + authVars[f] }}
	if s.url == "" && client && env.lookup != nil {
		if v, ok := env.lookup(envPrefix + "_LISTEN"); ok && v != "" {
			s.url = "nats://" + v
			s.name = func(f string) string {
				if f == "URL" {
					return envPrefix + "_LISTEN"
				}
				return envPrefix + "_" + authVars[f]
			}
		}
	}
	return s
}

// natsEnvVars are the variables of the nats CLI (and nats.js's examples), by field.
var natsEnvVars = map[string]string{
	"URL": "NATS_URL", "CredsFile": "NATS_CREDS", "NKeyFile": "NATS_NKEY", "Token": "NATS_TOKEN", "User": "NATS_USER",
	"Password": "NATS_PASSWORD", "CAFile": "NATS_CA", "CertFile": "NATS_CERT", "KeyFile": "NATS_KEY", "InboxPrefix": "NATS_INBOX_PREFIX",
}

func natsEnvSource(lookup func(string) (string, bool)) *connSource {
	get := func(f string) string { v, _ := lookup(natsEnvVars[f]); return v }
	s := &connSource{url: get("URL"), auth: jetstream.Auth{CredsFile: get("CredsFile"), NKeyFile: get("NKeyFile"),
		Token: get("Token"), User: get("User"), Password: get("Password"), CAFile: get("CAFile"), CertFile: get("CertFile"),
		KeyFile: get("KeyFile"), InboxPrefix: get("InboxPrefix")}, name: func(f string) string { return natsEnvVars[f] }}
	// As the nats CLI reads them: a user without a password is a token.
	if s.auth.User != "" && s.auth.Password == "" {
		s.auth.Token, s.auth.User = s.auth.User, ""
		s.name = func(f string) string {
			if f == "Token" {
				return "NATS_USER (without NATS_PASSWORD: a token)"
			}
			return natsEnvVars[f]
		}
	}
	return s
}

// resolveConnection picks the server and credentials of a command (see the top of
// this file). cf is nil for a command without connection flags; contexts is false for
// serve. Errors are configuration errors naming each setting by its source.
func resolveConnection(env Env, cf *connFlags, contexts bool) (*connection, error) {
	var sources []*connSource
	if cf != nil {
		sources = append(sources, cf.source())
	}
	sources = append(sources, envSource(env, contexts))
	if contexts {
		lookup := env.lookup
		if lookup == nil {
			lookup = func(string) (string, bool) { return "", false }
		}
		sources = append(sources, natsEnvSource(lookup))
		name, how := "", ""
		noContext := cf != nil && cf.noContext != nil && *cf.noContext
		switch {
		case cf != nil && cf.context != nil && *cf.context != "":
			if noContext {
				return nil, usagef("--context and --no-context contradict each other: use one")
			}
			name, how = *cf.context, "--context"
		case noContext: // no context at all, as the nats CLI's --no-context
		default:
			if v, ok := lookup("NATS_CONTEXT"); ok && v != "" {
				name, how = v, "NATS_CONTEXT"
			}
		}
		if name == "" && !noContext {
			sel, err := selectedContext(lookup)
			if err != nil {
				return nil, err
			}
			name, how = sel, "the selected nats context"
		}
		if name != "" {
			s, err := loadNATSContext(lookup, name, how)
			if err != nil {
				return nil, err
			}
			sources = append(sources, s)
		}
	}
	c := &connection{from: map[string]*connSource{}}
	urlRank := len(sources)
	for i, s := range sources {
		if s.url != "" {
			c.url, c.from["URL"], c.tlsFirst, urlRank = s.url, s, s.tlsFirst, i
			break
		}
	}
	for i, s := range sources {
		if !setsAny(s.auth, authFields...) {
			continue
		}
		if i > urlRank && urlHasUserInfo(c.url) {
			break // the URL's user info, from a higher source, is the way
		}
		for _, f := range authFields {
			setField(&c.auth, f, authField(s.auth, f))
			c.from[f] = s
		}
		break
	}
	for _, group := range [][]string{{"CAFile"}, {"CertFile", "KeyFile"}, {"InboxPrefix"}} {
		for _, s := range sources {
			if setsAny(s.auth, group...) {
				for _, f := range group {
					setField(&c.auth, f, authField(s.auth, f))
					c.from[f] = s
				}
				break
			}
		}
	}
	if c.url == "" {
		c.url, c.local = "nats://"+env.Listen, true
		c.from["URL"] = &connSource{name: func(string) string { return "the default (a local compactor serve on COMPACTOR_LISTEN)" }}
		for _, f := range []string{"CredsFile", "NKeyFile", "Token", "User", "Password", "CAFile", "CertFile", "KeyFile"} {
			if authField(c.auth, f) != "" {
				also := ""
				if contexts {
					also = " (or name it with -s/--server, NATS_URL or a nats context)"
				} else if cf != nil {
					also = " (or name it with -s/--server)"
				}
				return nil, newError(errConfig, nil, "configuration: %s is set but COMPACTOR_NATS_URL is empty: the embedded NATS server "+
					"takes no authentication or TLS; set COMPACTOR_NATS_URL to the secured server%s", c.name(f), also)
			}
		}
	}
	var ae *jetstream.AuthError
	if err := c.auth.Validate(c.url); errors.As(err, &ae) {
		return nil, newError(errConfig, err, "configuration: %s", ae.Message(c.name))
	} else if err != nil {
		return nil, newError(errConfig, err, "configuration: NATS authentication: %v", err)
	}
	return c, nil
}

// options are the nats options of c beyond jetstream.Auth's.
func (c *connection) options() []nats.Option {
	opts := []nats.Option{c.auth.Option()}
	if c.tlsFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts
}

// describe says which server a command talks to and where that came from.
func (c *connection) describe() string {
	if c.local {
		return redactURL(c.url) + " (the default: a local compactor serve)"
	}
	return fmt.Sprintf("%s (from %s)", redactURL(c.url), c.name("URL"))
}

func setsAny(a jetstream.Auth, fields ...string) bool {
	for _, f := range fields {
		if authField(a, f) != "" {
			return true
		}
	}
	return false
}

func authField(a jetstream.Auth, f string) string {
	if f == "InboxPrefix" {
		return a.InboxPrefix
	}
	return authValue(a, f)
}

func setField(a *jetstream.Auth, f, v string) {
	switch f {
	case "CredsFile":
		a.CredsFile = v
	case "NKeyFile":
		a.NKeyFile = v
	case "Token":
		a.Token = v
	case "User":
		a.User = v
	case "Password":
		a.Password = v
	case "CAFile":
		a.CAFile = v
	case "CertFile":
		a.CertFile = v
	case "KeyFile":
		a.KeyFile = v
	case "InboxPrefix":
		a.InboxPrefix = v
	}
}

func urlHasUserInfo(urls string) bool {
	for _, s := range strings.Split(urls, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		if u, err := url.Parse(s); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// redactURL hides the user info of comma-separated URLs.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("redacted")
			parts[i] = u.String()
		} else if err != nil {
			parts[i] = "(unparseable url)"
		}
	}
	return strings.Join(parts, ",")
}

// The nats CLI's contexts (natscli's natscontext package, v0.5.1): one JSON file per
// context in <config>/nats/context/<name>.json, the selected one's name in
// <config>/nats/context.txt, where <config> is $XDG_CONFIG_HOME, else ~/.config.

// natsContextFile is what compactor reads of a context file. The fields it cannot
// honour are refused rather than ignored: connecting without the proxy, the JetStream
// domain or the credentials they name would reach another place, or fail obscurely.
type natsContextFile struct {
	URL         string `json:"url"`
	Token       string `json:"token"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
	TLSFirst    bool   `json:"tls_first"`

	NSC           string   `json:"nsc"`
	UserJWT       string   `json:"user_jwt"`
	UserSeed      string   `json:"user_seed"`
	SocksProxy    string   `json:"socks_proxy"`
	JSDomain      string   `json:"jetstream_domain"`
	JSAPIPrefix   string   `json:"jetstream_api_prefix"`
	JSEventPrefix string   `json:"jetstream_event_prefix"`
	WinCertStore  string   `json:"windows_cert_store"`
	WinCertMatch  string   `json:"windows_cert_match"`
	WinCAMatch    []string `json:"windows_ca_certs_match"`
}

// natsConfigDir is where the nats CLI keeps its configuration.
func natsConfigDir(lookup func(string) (string, bool)) (string, error) {
	if v, ok := lookup("XDG_CONFIG_HOME"); ok && v != "" {
		return filepath.Join(v, "nats"), nil
	}
	home, ok := lookup("HOME")
	if !ok || home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", err
		}
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// selectedContext is the name `nats context select` chose, "" when none.
func selectedContext(lookup func(string) (string, bool)) (string, error) {
	dir, err := natsConfigDir(lookup)
	if err != nil {
		return "", nil // no home: nothing selected, as in the nats CLI
	}
	b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", newError(errConfig, err, "configuration: read the selected nats context: %v", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// loadNATSContext reads the context name (a name, or the path of a .json file), chosen
// by how (for errors).
func loadNATSContext(lookup func(string) (string, bool), name, how string) (*connSource, error) {
	path := name
	if fi, err := os.Stat(name); !(err == nil && fi.Mode().IsRegular() && strings.HasSuffix(name, ".json")) {
		if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
			return nil, newError(errConfig, nil, "configuration: %s %q is not a nats context name (no \"..\", \"/\" or \"\\\") nor a .json file", how, name)
		}
		dir, err := natsConfigDir(lookup)
		if err != nil {
			return nil, newError(errConfig, err, "configuration: %s %q: no home directory to find it in", how, name)
		}
		path = filepath.Join(dir, "context", name+".json")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		fix := "create it with `nats context add`, or choose another with --context or NATS_CONTEXT"
		if how == "the selected nats context" {
			fix = "select another with `nats context select`, or run with --no-context"
		}
		return nil, newError(errConfig, err, "configuration: %s %q does not exist (no %s): %s", how, name, path, fix)
	}
	if err != nil {
		return nil, newError(errConfig, err, "configuration: %s %q: %v", how, name, err)
	}
	var f natsContextFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, newError(errConfig, err, "configuration: nats context %q (%s) is not valid JSON: %v", name, path, err)
	}
	field := map[string]string{"URL": "url", "CredsFile": "creds", "NKeyFile": "nkey", "Token": "token", "User": "user",
		"Password": "password", "CAFile": "ca", "CertFile": "cert", "KeyFile": "key", "InboxPrefix": "inbox_prefix"}
	s := &connSource{name: func(f string) string { return fmt.Sprintf("%s of nats context %q", field[f], name) }}
	bad := func(key, why string) error {
		return newError(errConfig, nil, "configuration: nats context %q (%s) sets %s, which %s: use a context without it, or --no-context", name, path, key, why)
	}
	for _, u := range []struct {
		key string
		set bool
	}{
		{"nsc", f.NSC != ""}, {"user_jwt", f.UserJWT != ""}, {"user_seed", f.UserSeed != ""}, {"socks_proxy", f.SocksProxy != ""},
		{"jetstream_domain", f.JSDomain != ""}, {"jetstream_api_prefix", f.JSAPIPrefix != ""},
		{"jetstream_event_prefix", f.JSEventPrefix != ""}, {"windows_cert_store", f.WinCertStore != "" || f.WinCertMatch != "" || len(f.WinCAMatch) > 0},
	} {
		if u.set {
			return nil, bad(u.key, "compactor does not support")
		}
	}
	s.url, s.tlsFirst = f.URL, f.TLSFirst
	if s.url == "" {
		s.url = nats.DefaultURL // as the nats CLI connects with such a context
	}
	expand := func(p string) string {
		p = os.Expand(p, func(k string) string { v, _ := lookup(k); return v })
		if strings.HasPrefix(p, "~") {
			if home, ok := lookup("HOME"); ok && home != "" {
				p = home + p[1:]
			}
		}
		return p
	}
	files := map[string]*string{"creds": &s.auth.CredsFile, "nkey": &s.auth.NKeyFile, "cert": &s.auth.CertFile,
		"key": &s.auth.KeyFile, "ca": &s.auth.CAFile}
	for key, v := range map[string]string{"creds": f.Creds, "nkey": f.NKey, "cert": f.Cert, "key": f.Key, "ca": f.CA} {
		if v == "" {
			continue
		}
		scheme := refScheme(v)
		if scheme != "" && scheme != "file" {
			return nil, bad(key, fmt.Sprintf("names a %s:// reference; compactor reads %s only from a file (a path or file://)", scheme, key))
		}
		*files[key] = expand(strings.TrimPrefix(v, "file://"))
	}
	secrets := map[string]*string{"token": &s.auth.Token, "password": &s.auth.Password}
	for key, v := range map[string]string{"token": f.Token, "password": f.Password} {
		out, err := resolveSecret(lookup, v)
		if err != nil {
			return nil, bad(key, err.Error())
		}
		*secrets[key] = out
	}
	s.auth.User, s.auth.InboxPrefix = f.User, f.InboxPrefix
	if s.auth.User != "" && s.auth.Token != "" {
		// The nats CLI sends both; one way to authenticate is what a server checks.
		return nil, bad("both user and token", "are two ways to authenticate")
	}
	return s, nil
}

// refScheme is the scheme of a reference the nats CLI resolves (env://, file://, op://,
// nsc://, data:), "" for a plain value.
func refScheme(v string) string {
	for _, s := range []string{"env", "file", "op", "nsc", "data"} {
		if strings.HasPrefix(v, s+":") {
			return s
		}
	}
	return ""
}

// resolveSecret reads a token or password as the nats CLI does: env://NAME is a
// variable, file://PATH a file (without its trailing newline), anything else the value
// itself. 1Password (op://), nsc:// and data: references are refused.
func resolveSecret(lookup func(string) (string, bool), v string) (string, error) {
	switch refScheme(v) {
	case "":
		return v, nil
	case "env":
		name := strings.TrimPrefix(v, "env://")
		if val, ok := lookup(name); ok && val != "" {
			return val, nil
		}
		return "", fmt.Errorf("names the variable %s, which is not set", name)
	case "file":
		b, err := os.ReadFile(strings.TrimPrefix(v, "file://"))
		if err != nil {
			return "", fmt.Errorf("names a file that cannot be read (%v)", errors.Unwrap(err))
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	default:
		return "", fmt.Errorf("names a %s reference; compactor resolves only env:// and file://", refScheme(v))
	}
}
