package natsconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// ErrConfig is matched by every error of settings that cannot work: URLs, files and
// ways to authenticate that conflict or are missing.
var ErrConfig = errors.New("invalid nats connection settings")

// Connect dials NATS with reconnects forever and logs connection changes once each.
// Credentials and TLS come in opts, e.g. Auth.Option. A failure matches ErrConfig
// when the URLs or options are invalid; Unreachable tells a server that could not be
// reached from one that refused the connection. Errors never hold a URL's user info.
func Connect(url, name string, log zerolog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	if err := checkURLs(url); err != nil {
		return nil, err
	}
	base := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats at %s: %w", RedactURL(url), err)
	}
	return nc, nil
}

// ConnectRetrying is Connect for a service that may start before its NATS: while no
// server can be reached (Unreachable), it logs the error and tries again after b's
// delay, until it connects or ctx is done. Anything else is permanent and returned at
// once: a server that refuses the credentials or the TLS handshake, an invalid option,
// a file that cannot be read. Retrying those would only hide them.
func ConnectRetrying(ctx context.Context, url, name string, b jetstream.Backoff, log zerolog.Logger, opts ...nats.Option) (*nats.Conn, error) {
	for attempt := 1; ; attempt++ {
		nc, err := Connect(url, name, log, opts...)
		if err == nil {
			return nc, nil
		}
		if !Unreachable(err) {
			return nil, err
		}
		wait := b.Delay(attempt)
		// The same words as ProvisionRetrying's: for an operator, both are start-up
		// waiting for NATS.
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg("nats not reachable; retrying provisioning")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect stopped: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Unreachable reports whether err, from Connect, says that no server could be reached
// (refused, timed out, reset, a name that does not resolve yet): something that may
// go away by itself. A server that answered and refused the connection (credentials,
// TLS) is not unreachable, nor is an invalid option.
func Unreachable(err error) bool {
	if err == nil || Refused(err) || errors.Is(err, ErrConfig) {
		return false
	}
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrMaxConnectionsExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Refused reports whether err, from Connect, says that a server refused the
// connection: its credentials (authorization violation, expired or revoked), or the
// TLS handshake (a certificate no trusted CA signed, a name it does not cover, a
// client certificate the server wants or rejects, TLS on one side only; a handshake
// that times out is unreachable instead).
func Refused(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked,
		nats.ErrAccountAuthExpired, nats.ErrSecureConnRequired, nats.ErrSecureConnWanted} {
		if errors.Is(err, e) {
			return true
		}
	}
	var timeout net.Error
	if errors.Is(err, nats.ErrTLS) && !(errors.As(err, &timeout) && timeout.Timeout()) {
		// A failed handshake, or the server closing the connection right after it
		// (a client certificate it rejects, seen as EOF or a broken pipe).
		return true
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &header):
		return true
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the server, e.g. "tls: certificate required".
		return true
	}
	return false
}

// Auth is how a connection authenticates and secures itself. At most one way to
// authenticate: CredsFile (a user JWT and its NKey seed, as nsc writes them),
// NKeyFile (a user NKey seed), Token, or User with Password; a URL's user info
// (nats://user:password@host, nats://token@host) is a way too. TLS is independent of
// them: CAFile (the CAs that signed the server's certificate; without it the system's
// roots), CertFile with KeyFile (a client certificate, for servers that verify
// clients). Any TLS file, or a tls:// URL, makes the connection use TLS. Secrets
// (Token, Password, the seeds in the files) never appear in errors.
//
// InboxPrefix replaces "_INBOX" as the prefix of the connection's reply subjects. Every
// answer this connection gets (API replies, publish acks, pulled messages, service
// responses) comes on it, so a server that lets each user subscribe only to its own
// prefix keeps one user from reading the replies another asked for.
type Auth struct {
	CredsFile string
	NKeyFile  string
	Token     string
	User      string
	Password  string
	CAFile    string
	CertFile  string
	KeyFile   string

	InboxPrefix string
}

// AuthError is an Auth that cannot work: the field at fault (an Auth field name, or
// "URL" for the server URLs), what is wrong, and for conflicts and missing partners
// the other field. It matches ErrConfig.
type AuthError struct {
	Field   string
	Problem AuthProblem
	Other   string
	// Err is the cause of a FileProblem or an InvalidURL.
	Err error
}

// AuthProblem is what is wrong with an Auth.
type AuthProblem int

const (
	// Conflict: Field and Other are two ways to authenticate; use one.
	Conflict AuthProblem = iota + 1
	// Missing: Field is set without Other, which it needs.
	Missing
	// FileProblem: Field's file cannot be read or does not hold what it should.
	FileProblem
	// InvalidURL: a server URL does not parse.
	InvalidURL
	// InvalidValue: Field's value is not allowed (Err says why).
	InvalidValue
)

func (e *AuthError) Error() string { return e.Message(func(f string) string { return f }) }

// Message is the error with each field named by name, e.g. its variable.
func (e *AuthError) Message(name func(field string) string) string {
	switch e.Problem {
	case Conflict:
		return fmt.Sprintf("%s and %s are both set; use one way to authenticate", name(e.Field), name(e.Other))
	case Missing:
		return fmt.Sprintf("%s is set without %s", name(e.Field), name(e.Other))
	default:
		return fmt.Sprintf("%s: %v", name(e.Field), e.Err)
	}
}

func (e *AuthError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrConfig}
	}
	return []error{ErrConfig, e.Err}
}

// Validate checks a and, when urls is not empty, the comma-separated server URLs it
// will be used with: one way to authenticate at most (a URL's user info counts),
// certificate and key together, user and password together, and every file readable
// and holding what it should. The error is an *AuthError.
func (a Auth) Validate(urls string) error {
	_, err := a.options(urls)
	return err
}

// Option is the nats option of a: it validates a against the URLs being dialled and
// sets the credentials and TLS. The zero Auth changes nothing.
func (a Auth) Option() nats.Option {
	return func(o *nats.Options) error {
		opts, err := a.options(strings.Join(o.Servers, ","))
		if err != nil {
			return err
		}
		for _, opt := range opts {
			if err := opt(o); err != nil {
				return err
			}
		}
		return nil
	}
}

// check reports what is wrong with a (with the servers' urls): two ways to
// authenticate, half of a pair, a bad url or a file that cannot be read.
func (a Auth) check(urls string) error {
	var methods []string
	for _, m := range []struct {
		field string
		set   bool
	}{
		{"URL", urls != "" && URLHasUserInfo(urls)},
		{"CredsFile", a.CredsFile != ""},
		{"NKeyFile", a.NKeyFile != ""},
		{"Token", a.Token != ""},
		{"User", a.User != ""},
	} {
		if m.set {
			methods = append(methods, m.field)
		}
	}
	if len(methods) > 1 {
		return &AuthError{Field: methods[0], Problem: Conflict, Other: methods[1]}
	}
	for _, pair := range [][2]string{{"User", "Password"}, {"Password", "User"}, {"CertFile", "KeyFile"}, {"KeyFile", "CertFile"}} {
		if a.field(pair[0]) != "" && a.field(pair[1]) == "" {
			return &AuthError{Field: pair[0], Problem: Missing, Other: pair[1]}
		}
	}
	if err := checkURLs(urls); err != nil {
		return err
	}
	for _, f := range []string{"CredsFile", "NKeyFile", "CAFile", "CertFile", "KeyFile"} {
		if err := checkFile(a.field(f)); err != nil {
			return &AuthError{Field: f, Problem: FileProblem, Err: err}
		}
	}
	return nil
}

// options checks a and returns its nats options.
func (a Auth) options(urls string) ([]nats.Option, error) {
	if err := a.check(urls); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if a.InboxPrefix != "" {
		opt := nats.CustomInboxPrefix(a.InboxPrefix)
		if err := opt(&nats.Options{}); err != nil {
			return nil, &AuthError{Field: "InboxPrefix", Problem: InvalidValue, Err: err}
		}
		opts = append(opts, opt)
	}
	switch {
	case a.CredsFile != "":
		opt := nats.UserCredentials(a.CredsFile)
		// Read the file now: a bad one is a configuration error, not a refusal.
		var o nats.Options
		if err := opt(&o); err != nil {
			return nil, &AuthError{Field: "CredsFile", Problem: FileProblem, Err: err}
		}
		if _, err := o.UserJWT(); err != nil {
			return nil, &AuthError{Field: "CredsFile", Problem: FileProblem, Err: fmt.Errorf("no user jwt: %w", err)}
		}
		if _, err := o.SignatureCB([]byte("check")); err != nil {
			return nil, &AuthError{Field: "CredsFile", Problem: FileProblem, Err: fmt.Errorf("no user nkey seed: %w", err)}
		}
		opts = append(opts, opt)
	case a.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, &AuthError{Field: "NKeyFile", Problem: FileProblem, Err: err}
		}
		opts = append(opts, opt)
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.CAFile != "" {
		opt := nats.RootCAs(a.CAFile)
		if err := opt(&nats.Options{}); err != nil {
			return nil, &AuthError{Field: "CAFile", Problem: FileProblem, Err: err}
		}
		opts = append(opts, opt)
	}
	if a.CertFile != "" {
		opt := nats.ClientCert(a.CertFile, a.KeyFile)
		if err := opt(&nats.Options{}); err != nil {
			return nil, &AuthError{Field: "CertFile", Problem: FileProblem, Err: err}
		}
		opts = append(opts, opt)
	}
	return opts, nil
}

func (a Auth) field(name string) string {
	return map[string]string{
		"CredsFile": a.CredsFile, "NKeyFile": a.NKeyFile, "Token": a.Token, "User": a.User,
		"Password": a.Password, "CAFile": a.CAFile, "CertFile": a.CertFile, "KeyFile": a.KeyFile,
	}[name]
}

// checkFile reports a file that is not there or not a regular file ("" is fine).
func checkFile(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	return nil
}

// splitURLs is the comma-separated URLs as nats.go reads them: "nats://" is assumed
// when a URL has no scheme.
func splitURLs(urls string) []string {
	var out []string
	for _, s := range strings.Split(urls, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		out = append(out, s)
	}
	return out
}

// URLHasUserInfo reports whether any of comma-separated URLs holds user info.
func URLHasUserInfo(urls string) bool {
	for _, s := range splitURLs(urls) {
		if u, err := url.Parse(s); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// checkURLs reports a URL that does not parse, without the URL: the parser's own
// error would repeat it with its password.
func checkURLs(urls string) error {
	list := splitURLs(urls)
	for i, s := range list {
		if _, err := url.Parse(s); err != nil {
			cause := errors.New("not a valid url")
			var ue *url.Error
			if errors.As(err, &ue) && !strings.Contains(s, "@") {
				cause = fmt.Errorf("not a valid url: %w", ue.Err)
			}
			return &AuthError{Field: "URL", Problem: InvalidURL, Err: fmt.Errorf("server %d of %d: %w", i+1, len(list), cause)}
		}
	}
	return nil
}

// RedactURL hides credentials in a comma-separated list of URLs for logs and errors.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		// As nats.go dials it: nats:// when there is no scheme, so "user:pw@host" holds
		// a password too.
		full := p
		if !strings.Contains(p, "://") {
			full = "nats://" + p
		}
		u, err := url.Parse(full)
		switch {
		case err != nil:
			parts[i] = "(unparseable url)"
		case u.User != nil:
			u.User = url.User("redacted")
			parts[i] = u.String()
		case full != p:
			parts[i] = p
		default:
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
