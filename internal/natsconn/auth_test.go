package natsconn_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// authCase is a server configured for one way to authenticate, the Auth (and URL)
// that works on it, and one that must be refused, with the secret the refused one
// must never show.
type authCase struct {
	name   string
	server func(o *server.Options)
	// start, when set, starts the server instead of jstest.ServerWith(server).
	start       func(t testing.TB) *server.Server
	url         func(ns *server.Server) string
	good, wrong natsconn.Auth
	wrongURL    func(ns *server.Server) string
	secrets     []string
}

func authCases(t *testing.T) []authCase {
	nkeyPub, nkeySeedFile, nkeySeed := jstest.NKeyUser(t)
	_, otherSeedFile, otherSeed := jstest.NKeyUser(t)
	op := jstest.NewOperator(t)
	creds, credsText := op.Creds(t)
	foreign, foreignText := jstest.NewOperator(t).Creds(t)
	tlsFiles := jstest.NewTLS(t)
	plain := func(ns *server.Server) string { return ns.ClientURL() }
	tlsURL := func(ns *server.Server) string { return "tls://" + jstest.HostPort(ns) }
	return []authCase{
		{
			name:   "token",
			server: func(o *server.Options) { o.Authorization = "s3cret-token-0123" },
			url:    plain, good: natsconn.Auth{Token: "s3cret-token-0123"}, wrong: natsconn.Auth{Token: "wr0ng-token-4567"},
			secrets: []string{"s3cret-token-0123", "wr0ng-token-4567"},
		},
		{
			name:   "user and password",
			server: func(o *server.Options) { o.Users = []*server.User{{Username: "compactor", Password: "pa55-w0rd-89"}} },
			url:    plain, good: natsconn.Auth{User: "compactor", Password: "pa55-w0rd-89"}, wrong: natsconn.Auth{User: "compactor", Password: "n0t-the-pa55"},
			secrets: []string{"pa55-w0rd-89", "n0t-the-pa55"},
		},
		{
			name:   "user and password in the url",
			server: func(o *server.Options) { o.Users = []*server.User{{Username: "compactor", Password: "pa55-w0rd-89"}} },
			url: func(ns *server.Server) string {
				return "nats://compactor:pa55-w0rd-89@" + jstest.HostPort(ns)
			},
			wrongURL: func(ns *server.Server) string { return "nats://compactor:n0t-the-pa55@" + jstest.HostPort(ns) },
			secrets:  []string{"pa55-w0rd-89", "n0t-the-pa55"},
		},
		{
			name:   "nkey",
			server: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}} },
			url:    plain, good: natsconn.Auth{NKeyFile: nkeySeedFile}, wrong: natsconn.Auth{NKeyFile: otherSeedFile},
			secrets: []string{nkeySeed, otherSeed},
		},
		{
			name:  "credentials file",
			start: func(t testing.TB) *server.Server { return op.Server(t, nil) },
			url:   plain, good: natsconn.Auth{CredsFile: creds}, wrong: natsconn.Auth{CredsFile: foreign},
			secrets: []string{credsText, foreignText, seedOf(credsText), seedOf(foreignText)},
		},
		{
			name:   "tls with a ca",
			server: tlsFiles.Configure(false),
			url:    tlsURL, good: natsconn.Auth{CAFile: tlsFiles.CA}, wrong: natsconn.Auth{CAFile: tlsFiles.OtherCA},
		},
		{
			name:   "tls with a client certificate",
			server: tlsFiles.Configure(true),
			url:    plain, good: natsconn.Auth{CAFile: tlsFiles.CA, CertFile: tlsFiles.ClientCert, KeyFile: tlsFiles.ClientKey},
			wrong: natsconn.Auth{CAFile: tlsFiles.CA, CertFile: tlsFiles.OtherCert, KeyFile: tlsFiles.OtherKey},
		},
		{
			name:   "tls with a client certificate, none given",
			server: tlsFiles.Configure(true),
			url:    plain, good: natsconn.Auth{CAFile: tlsFiles.CA, CertFile: tlsFiles.ClientCert, KeyFile: tlsFiles.ClientKey},
			wrong: natsconn.Auth{CAFile: tlsFiles.CA},
		},
	}
}

// seedOf is the NKey seed line of a credentials file.
func seedOf(creds string) string {
	for _, l := range strings.Split(creds, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "SU") {
			return strings.TrimSpace(l)
		}
	}
	return "no seed found"
}

// Every way to authenticate: the right one connects and provisions the contract on
// JetStream; the wrong one is refused (Refused, not Unreachable), and the error holds
// none of the secrets.
func TestConnectWithEveryAuth(t *testing.T) {
	for _, tc := range authCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			var ns *server.Server
			if tc.start != nil {
				ns = tc.start(t)
			} else {
				ns = jstest.ServerWith(t, tc.server)
			}
			nc, err := natsconn.Connect(tc.url(ns), "test", zerolog.Nop(), tc.good.Option(), nats.Timeout(5*time.Second))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer nc.Close()
			st := jstest.Provision(t, nc)
			if _, err := st.Chat().Publish(ctxT(t), "auth-conv", []byte(`{"role":"user","content":"hello"}`), ""); err != nil {
				t.Fatalf("publish: %v", err)
			}

			url := tc.url(ns)
			if tc.wrongURL != nil {
				url = tc.wrongURL(ns)
			}
			_, err = natsconn.Connect(url, "test", zerolog.Nop(), tc.wrong.Option(), nats.Timeout(5*time.Second))
			if err == nil {
				t.Fatal("connect with the wrong credentials succeeded")
			}
			if !natsconn.Refused(err) || natsconn.Unreachable(err) {
				t.Fatalf("wrong credentials: %v; want refused, not unreachable", err)
			}
			for _, s := range tc.secrets {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error %q holds a secret", err)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}

// ConnectRetrying waits for a server that is not up yet, and returns at once, without
// a retry, when a server refuses the credentials.
func TestConnectRetrying(t *testing.T) {
	fast := jetstream.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	t.Run("refused at once", func(t *testing.T) {
		ns := jstest.ServerWith(t, func(o *server.Options) { o.Authorization = "right" })
		logged := make(lines, 100)
		start := time.Now()
		_, err := natsconn.ConnectRetrying(ctxT(t), ns.ClientURL(), "test", fast, zerolog.New(logged), natsconn.Auth{Token: "wrong"}.Option())
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("ConnectRetrying = %v; want the authorization violation", err)
		}
		if len(logged) > 0 || time.Since(start) > 5*time.Second {
			t.Fatalf("a refused connection was retried (%s): %s", time.Since(start), <-logged)
		}
	})
	t.Run("invalid option at once", func(t *testing.T) {
		logged := make(lines, 100)
		_, err := natsconn.ConnectRetrying(ctxT(t), "nats://127.0.0.1:1", "test", fast, zerolog.New(logged), natsconn.Auth{CertFile: "x.pem"}.Option())
		if !errors.Is(err, natsconn.ErrConfig) || len(logged) > 0 {
			t.Fatalf("ConnectRetrying = %v (%d retries logged); want ErrConfig at once", err, len(logged))
		}
	})
	t.Run("unreachable until ctx is done", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		logged := make(lines, 1000)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = natsconn.ConnectRetrying(ctx, "nats://"+addr, "test", fast, zerolog.New(logged))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ConnectRetrying = %v; want the context's deadline", err)
		}
		if len(logged) < 2 || !strings.Contains(<-logged, "retrying") {
			t.Fatalf("%d retries logged; want at least 2", len(logged))
		}
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// lines is a zerolog writer that hands each log line to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	select {
	case l <- string(p):
	default:
	}
	return len(p), nil
}
