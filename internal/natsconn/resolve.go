package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
)

// Where a command finds its NATS server and credentials, highest first (docs/cli.md):
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

// Source is one of those sources.
type Source struct {
	URL      string
	Auth     Auth
	TLSFirst bool
	// Name says how a field (a Auth field name, or "URL") of this source is
	// set, for errors: "--creds", "COMPACTOR_NATS_CREDS", `creds of nats context "prod"`.
	Name func(field string) string
}

// AuthFields are the ways to authenticate, taken from one source together.
var AuthFields = []string{"CredsFile", "NKeyFile", "Token", "User", "Password"}

// Connection is where and how a command connects, and where each setting came from.
type Connection struct {
	URL      string
	Auth     Auth
	TLSFirst bool
	// Local: no source named a server; URL is the local compactor serve's.
	Local bool
	from  map[string]*Source
}

// Name says where a field's value came from.
func (c *Connection) Name(field string) string {
	if s := c.from[field]; s != nil {
		return s.Name(field)
	}
	return field
}

// NATSEnvVars are the variables of the nats CLI (and nats.js's examples), by field.
var NATSEnvVars = map[string]string{
	"URL": "NATS_URL", "CredsFile": "NATS_CREDS", "NKeyFile": "NATS_NKEY", "Token": "NATS_TOKEN", "User": "NATS_USER",
	"Password": "NATS_PASSWORD", "CAFile": "NATS_CA", "CertFile": "NATS_CERT", "KeyFile": "NATS_KEY", "InboxPrefix": "NATS_INBOX_PREFIX",
}

func natsEnvSource(lookup func(string) (string, bool)) *Source {
	get := func(f string) string { v, _ := lookup(NATSEnvVars[f]); return v }
	s := &Source{URL: get("URL"), Auth: Auth{CredsFile: get("CredsFile"), NKeyFile: get("NKeyFile"),
		Token: get("Token"), User: get("User"), Password: get("Password"), CAFile: get("CAFile"), CertFile: get("CertFile"),
		KeyFile: get("KeyFile"), InboxPrefix: get("InboxPrefix")}, Name: func(f string) string { return NATSEnvVars[f] }}
	// As the nats CLI reads them: a user without a password is a token.
	if s.Auth.User != "" && s.Auth.Password == "" {
		s.Auth.Token, s.Auth.User = s.Auth.User, ""
		s.Name = func(f string) string {
			if f == "Token" {
				return "NATS_USER (without NATS_PASSWORD: a token)"
			}
			return NATSEnvVars[f]
		}
	}
	return s
}

// Request is what Resolve picks a connection from.
type Request struct {
	// Sources are the caller's own sources, highest first: a command's flags, then its
	// COMPACTOR_NATS_* variables.
	Sources []*Source
	// Contexts adds the nats CLI's sources below them: the NATS_* variables, then a
	// nats CLI context: Context (named by ContextHow, e.g. "--context"), else the one
	// NATS_CONTEXT names, else the one `nats context select` chose; none with
	// NoContext.
	Contexts            bool
	Context, ContextHow string
	NoContext           bool
	// Lookup reads variables: NATS_*, NATS_CONTEXT, HOME, XDG_CONFIG_HOME and those
	// a context's env:// references name. Nil reads none.
	Lookup func(string) (string, bool)
	// Local is the host:port of a local compactor serve, the server when no source
	// names one; LocalHint ends the error about credentials set for it.
	Local, LocalHint string
}

// Resolve picks the server and credentials of r (see the top of this file). Errors
// match ErrConfig and name each setting by its source.
func Resolve(r Request) (*Connection, error) {
	sources := r.Sources
	lookup := r.Lookup
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	if r.Contexts {
		sources = append(sources, natsEnvSource(lookup))
		name, how := r.Context, r.ContextHow
		if name == "" && !r.NoContext {
			if v, ok := lookup("NATS_CONTEXT"); ok && v != "" {
				name, how = v, "NATS_CONTEXT"
			}
		}
		if name == "" && !r.NoContext {
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
	c := &Connection{from: map[string]*Source{}}
	urlRank := len(sources)
	for i, s := range sources {
		if s.URL != "" {
			c.URL, c.from["URL"], c.TLSFirst, urlRank = s.URL, s, s.TLSFirst, i
			break
		}
	}
	for i, s := range sources {
		if !setsAny(s.Auth, AuthFields...) {
			continue
		}
		if i > urlRank && URLHasUserInfo(c.URL) {
			break // the URL's user info, from a higher source, is the way
		}
		for _, f := range AuthFields {
			setField(&c.Auth, f, Field(s.Auth, f))
			c.from[f] = s
		}
		break
	}
	for _, group := range [][]string{{"CAFile"}, {"CertFile", "KeyFile"}, {"InboxPrefix"}} {
		for _, s := range sources {
			if setsAny(s.Auth, group...) {
				for _, f := range group {
					setField(&c.Auth, f, Field(s.Auth, f))
					c.from[f] = s
				}
				break
			}
		}
	}
	if c.URL == "" {
		c.URL, c.Local = "nats://"+r.Local, true
		c.from["URL"] = &Source{Name: func(string) string { return "the default (a local compactor serve on COMPACTOR_LISTEN)" }}
		for _, f := range []string{"CredsFile", "NKeyFile", "Token", "User", "Password", "CAFile", "CertFile", "KeyFile"} {
			if Field(c.Auth, f) != "" {
				return nil, settingsError(nil, "configuration: %s is set but COMPACTOR_NATS_URL is empty: the embedded NATS server "+
					"takes no authentication or TLS; set COMPACTOR_NATS_URL to the secured server%s", c.Name(f), r.LocalHint)
			}
		}
	}
	var ae *AuthError
	if err := c.Auth.Validate(c.URL); errors.As(err, &ae) {
		return nil, settingsError(err, "configuration: %s", ae.Message(c.Name))
	} else if err != nil {
		return nil, settingsError(err, "configuration: NATS authentication: %v", err)
	}
	return c, nil
}

// Options are the nats options of c: its Auth's, and the TLS handshake first when its
// context asks for it.
func (c *Connection) Options() []nats.Option {
	opts := []nats.Option{c.Auth.Option()}
	if c.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	return opts
}

// Describe says which server c is and where that came from; never a URL's user info.
func (c *Connection) Describe() string {
	if c.Local {
		return RedactURL(c.URL) + " (the default: a local compactor serve)"
	}
	return fmt.Sprintf("%s (from %s)", RedactURL(c.URL), c.Name("URL"))
}

func setsAny(a Auth, fields ...string) bool {
	for _, f := range fields {
		if Field(a, f) != "" {
			return true
		}
	}
	return false
}

// Field is the value of a field of a, by its Auth field name.
func Field(a Auth, f string) string {
	if f == "InboxPrefix" {
		return a.InboxPrefix
	}
	return a.field(f)
}

func setField(a *Auth, f, v string) {
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
		return "", settingsError(err, "configuration: read the selected nats context: %v", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// loadNATSContext reads the context name (a name, or the path of a .json file), chosen
// by how (for errors).
func loadNATSContext(lookup func(string) (string, bool), name, how string) (*Source, error) {
	path, err := natsContextPath(lookup, name, how)
	if err != nil {
		return nil, err
	}
	f, err := readNATSContext(path, name, how)
	if err != nil {
		return nil, err
	}
	field := map[string]string{"URL": "url", "CredsFile": "creds", "NKeyFile": "nkey", "Token": "token", "User": "user",
		"Password": "password", "CAFile": "ca", "CertFile": "cert", "KeyFile": "key", "InboxPrefix": "inbox_prefix"}
	s := &Source{Name: func(f string) string { return fmt.Sprintf("%s of nats context %q", field[f], name) }}
	bad := func(key, why string) error {
		return settingsError(nil, "configuration: nats context %q (%s) sets %s, which %s: use a context without it, or --no-context", name, path, key, why)
	}
	if key := f.unsupported(); key != "" {
		return nil, bad(key, "compactor does not support")
	}
	s.URL, s.TLSFirst = f.URL, f.TLSFirst
	if s.URL == "" {
		s.URL = nats.DefaultURL // as the nats CLI connects with such a context
	}
	if err := s.setContextAuth(lookup, f, bad); err != nil {
		return nil, err
	}
	return s, nil
}

// natsContextPath is the file of the context name: name itself when it is a .json
// file, else name's file in the nats CLI's configuration directory.
func natsContextPath(lookup func(string) (string, bool), name, how string) (string, error) {
	path := name
	if fi, err := os.Stat(name); !(err == nil && fi.Mode().IsRegular() && strings.HasSuffix(name, ".json")) {
		if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
			return "", settingsError(nil, "configuration: %s %q is not a nats context name (no \"..\", \"/\" or \"\\\") nor a .json file", how, name)
		}
		dir, err := natsConfigDir(lookup)
		if err != nil {
			return "", settingsError(err, "configuration: %s %q: no home directory to find it in", how, name)
		}
		path = filepath.Join(dir, "context", name+".json")
	}
	return path, nil
}

// readNATSContext reads and decodes the context file path (of the context name,
// chosen by how).
func readNATSContext(path, name, how string) (*natsContextFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		fix := "create it with `nats context add`, or choose another with --context or NATS_CONTEXT"
		if how == "the selected nats context" {
			fix = "select another with `nats context select`, or run with --no-context"
		}
		return nil, settingsError(err, "configuration: %s %q does not exist (no %s): %s", how, name, path, fix)
	}
	if err != nil {
		return nil, settingsError(err, "configuration: %s %q: %v", how, name, err)
	}
	var f natsContextFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, settingsError(err, "configuration: nats context %q (%s) is not valid JSON: %v", name, path, err)
	}
	return &f, nil
}

// unsupported is the first key the context sets that compactor does not support, ""
// when none.
func (f *natsContextFile) unsupported() string {
	for _, u := range []struct {
		key string
		set bool
	}{
		{"nsc", f.NSC != ""}, {"user_jwt", f.UserJWT != ""}, {"user_seed", f.UserSeed != ""}, {"socks_proxy", f.SocksProxy != ""},
		{"jetstream_domain", f.JSDomain != ""}, {"jetstream_api_prefix", f.JSAPIPrefix != ""},
		{"jetstream_event_prefix", f.JSEventPrefix != ""}, {"windows_cert_store", f.WinCertStore != "" || f.WinCertMatch != "" || len(f.WinCAMatch) > 0},
	} {
		if u.set {
			return u.key
		}
	}
	return ""
}

// setContextAuth sets s's Auth from the context f: its files (paths expanded as the
// nats CLI does), secrets (resolved) and user; bad makes the error of a key compactor
// cannot use.
func (s *Source) setContextAuth(lookup func(string) (string, bool), f *natsContextFile, bad func(key, why string) error) error {
	expand := func(p string) string {
		p = os.Expand(p, func(k string) string { v, _ := lookup(k); return v })
		if strings.HasPrefix(p, "~") {
			if home, ok := lookup("HOME"); ok && home != "" {
				p = home + p[1:]
			}
		}
		return p
	}
	files := map[string]*string{"creds": &s.Auth.CredsFile, "nkey": &s.Auth.NKeyFile, "cert": &s.Auth.CertFile,
		"key": &s.Auth.KeyFile, "ca": &s.Auth.CAFile}
	for key, v := range map[string]string{"creds": f.Creds, "nkey": f.NKey, "cert": f.Cert, "key": f.Key, "ca": f.CA} {
		if v == "" {
			continue
		}
		scheme := refScheme(v)
		if scheme != "" && scheme != "file" {
			return bad(key, fmt.Sprintf("names a %s:// reference; compactor reads %s only from a file (a path or file://)", scheme, key))
		}
		*files[key] = expand(strings.TrimPrefix(v, "file://"))
	}
	secrets := map[string]*string{"token": &s.Auth.Token, "password": &s.Auth.Password}
	for key, v := range map[string]string{"token": f.Token, "password": f.Password} {
		out, err := resolveSecret(lookup, v)
		if err != nil {
			return bad(key, err.Error())
		}
		*secrets[key] = out
	}
	s.Auth.User, s.Auth.InboxPrefix = f.User, f.InboxPrefix
	if s.Auth.User != "" && s.Auth.Token != "" {
		// The nats CLI sends both; one way to authenticate is what a server checks.
		return bad("both user and token", "are two ways to authenticate")
	}
	return nil
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

// settingsError is a configuration error with its message as written; it matches
// ErrConfig and cause.
func settingsError(cause error, format string, args ...any) error {
	return &SettingsError{msg: fmt.Sprintf(format, args...), cause: cause}
}

// SettingsError is what Resolve says of settings that cannot work.
type SettingsError struct {
	msg   string
	cause error
}

func (e *SettingsError) Error() string { return e.msg }

// Unwrap is ErrConfig, and the cause when there is one.
func (e *SettingsError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrConfig}
	}
	return []error{ErrConfig, e.cause}
}
