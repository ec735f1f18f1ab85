package rolestest

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/jetstream/jstest"
)

// MaxPayload is the max payload of the roles' server: small, so that a test of
// messages over it stays small.
const MaxPayload = 16 << 10

// Users are the users of accounts.conf.
var Users = []string{"sys", "admin", "trigger", "worker", "api", "producer", "reader", "proxy"}

// AccountsConf is the path of the configuration deploy/nats ships, tested as it is.
func AccountsConf() string { return deployFile("accounts.conf") }

// deployFile is the path of a file of deploy/nats.
func deployFile(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "nats", name)
}

// PasswordVar is the environment variable a configuration of deploy/nats reads user's
// password from: NATS_<USER>_PASSWORD, the name upper-cased with dashes as underscores.
func PasswordVar(user string) string {
	return "NATS_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// Server starts a nats-server from accounts.conf with a fresh password per user (the
// file reads them from the environment: NATS_<USER>_PASSWORD, set with t.Setenv) and
// returns its URL and a function that connects as a user, closed at cleanup.
func Server(t testing.TB) (url string, connect func(user string) *Conn) {
	t.Helper()
	return ServerFrom(t, AccountsConf())
}

// ServerFrom is Server with the configuration at path (a changed copy of
// accounts.conf, with the same users).
func ServerFrom(t testing.TB, path string) (url string, connect func(user string) *Conn) {
	t.Helper()
	s := Start(t, path, Users)
	return s.URL, s.Connect
}

// Running is a nats-server started from a configuration of deploy/nats (or a changed
// copy), with the passwords of its users.
type Running struct {
	// NS is the server: Reload re-reads its configuration file.
	NS *server.Server
	// URL is its client URL.
	URL string

	t         testing.TB
	passwords map[string]string
}

// Start starts a nats-server from the configuration at path with a fresh password for
// each of users (set with t.Setenv in the variable PasswordVar names) and options
// changed by configure after the file's, and shuts it down at cleanup.
func Start(t testing.TB, path string, users []string, configure ...func(*server.Options)) *Running {
	t.Helper()
	r := &Running{t: t, passwords: map[string]string{}}
	r.SetPasswords(users...)
	r.NS = jstest.ServerFromFile(t, path, append([]func(*server.Options){jstest.MaxPayload(MaxPayload)}, configure...)...)
	r.URL = r.NS.ClientURL()
	return r
}

// SetPasswords sets a fresh password for each of users in the environment, for users a
// changed configuration adds before the server reloads it.
func (r *Running) SetPasswords(users ...string) {
	for _, u := range users {
		r.passwords[u] = "pw-" + u + "-" + rand.Text()
		r.t.Setenv(PasswordVar(u), r.passwords[u])
	}
}

// Auth is user's credentials and inbox prefix, for a process that connects by itself
// (node.ServeConfig.NATSOptions).
func (r *Running) Auth(user string) natsconn.Auth {
	return natsconn.Auth{User: user, Password: r.passwords[user], InboxPrefix: "_INBOX_" + user}
}

// Connect connects as user, with its password and its own inbox prefix, and closes the
// connection at cleanup; a refused connection fails the test.
func (r *Running) Connect(user string) *Conn {
	r.t.Helper()
	c, err := r.Dial(user)
	if err != nil {
		r.t.Fatalf("connect as %s: %v", user, err)
	}
	return c
}

// Dial connects as user like Connect, with opts after Compactor's, and returns the
// server's refusal as an error.
func (r *Running) Dial(user string, opts ...nats.Option) (*Conn, error) {
	c := &Conn{User: user, closed: make(chan struct{}), changed: make(chan struct{})}
	opts = append([]nats.Option{nats.Name("compactor-" + user),
		// Each user's replies come on its own prefix, the only inbox it may read.
		r.Auth(user).Option(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { c.record(err.Error()) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.disconnects.Add(1) }),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
	}, opts...)
	nc, err := nats.Connect(r.URL, opts...)
	if err != nil {
		return nil, err
	}
	r.t.Cleanup(nc.Close)
	c.NC = nc
	return c, nil
}

// Conn is a connection as one user of a configuration of deploy/nats, with the
// asynchronous errors the server sent it (a refused publish or subscription arrives
// only there), and how often it was disconnected.
type Conn struct {
	// User is the user it connected as.
	User string
	// NC is the connection.
	NC *nats.Conn

	closed      chan struct{}
	disconnects atomic.Int64
	mu          sync.Mutex
	errs        []string
	changed     chan struct{} // closed and replaced when an error is recorded
}

// record adds an asynchronous error.
func (c *Conn) record(e string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, e)
	close(c.changed)
	c.changed = make(chan struct{})
}

// Mark is the number of asynchronous errors reported so far, for WaitFor.
func (c *Conn) Mark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.errs)
}

// WaitFor waits until the server reported an asynchronous error containing want after
// the first since (a Mark taken before the operation), and returns an error naming
// what it waited for if none came before ctx is done. A refusal is reported at once:
// this waits for that event, not for a deadline.
func (c *Conn) WaitFor(ctx context.Context, since int, want string) error {
	for {
		c.mu.Lock()
		found, changed := false, c.changed
		for _, e := range c.errs[min(since, len(c.errs)):] {
			found = found || strings.Contains(e, want)
		}
		c.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("no %q among %s's asynchronous errors: %w", want, c.User, ctx.Err())
		}
	}
}

// Violations returns the permissions violations the server reported so far, one a
// line.
func (c *Conn) Violations() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}

// Disconnects is how often the connection was disconnected so far.
func (c *Conn) Disconnects() int64 { return c.disconnects.Load() }

// Closed is closed when the connection is closed for good (by Close, or when it gives
// up reconnecting).
func (c *Conn) Closed() <-chan struct{} { return c.closed }
