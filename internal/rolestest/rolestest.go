package rolestest

import (
	"crypto/rand"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

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
func AccountsConf() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "nats", "accounts.conf")
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
	passwords := map[string]string{}
	for _, u := range Users {
		passwords[u] = "pw-" + u + "-" + rand.Text()
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", passwords[u])
	}
	ns := jstest.ServerFromFile(t, path, jstest.MaxPayload(MaxPayload))
	url = ns.ClientURL()
	return url, func(user string) *Conn {
		t.Helper()
		c := &Conn{User: user}
		nc, err := nats.Connect(url, nats.Name("compactor-"+user),
			// Each user's replies come on its own prefix, the only inbox it may read.
			natsconn.Auth{User: user, Password: passwords[user], InboxPrefix: "_INBOX_" + user}.Option(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.errs = append(c.errs, err.Error())
			}))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		c.NC = nc
		return c
	}
}

// Conn is a connection as one user of accounts.conf, with the asynchronous errors the
// server sent it (a refused publish or subscription arrives only there).
type Conn struct {
	// User is the user it connected as.
	User string
	// NC is the connection.
	NC *nats.Conn

	mu   sync.Mutex
	errs []string
}

// Violations returns the permissions violations the server reported so far, one a
// line.
func (c *Conn) Violations() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.errs, "\n")
}
