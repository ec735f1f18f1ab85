package main

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream/jstest"
)

// authSetup is a NATS server secured one way, the variables that pass its checks, the
// variables of a wrong secret, and the secrets nothing may print.
type authSetup struct {
	name   string
	server func(o *server.Options)
	// start, when set, starts the server instead of jstest.ServerWith(server).
	start       func(t testing.TB) *server.Server
	url         func(ns *server.Server) string
	good, wrong map[string]string
	// wantErr is what the refusal says, beside the variables to check.
	wantErr string
	secrets []string
}

func authSetups(t *testing.T) []authSetup {
	nkeyPub, nkeyFile, nkeySeed := jstest.NKeyUser(t)
	_, otherNkeyFile, otherSeed := jstest.NKeyUser(t)
	op := jstest.NewOperator(t)
	creds, credsText := op.Creds(t)
	foreign, foreignText := jstest.NewOperator(t).Creds(t)
	tf := jstest.NewTLS(t)
	plain := func(ns *server.Server) string { return ns.ClientURL() }
	tlsURL := func(ns *server.Server) string { return "tls://" + jstest.HostPort(ns) }
	users := func(o *server.Options) { o.Users = []*server.User{{Username: "compactor", Password: "pa55-w0rd-89"}} }
	return []authSetup{
		{
			name: "token", server: func(o *server.Options) { o.Authorization = "s3cret-token-0123" }, url: plain,
			good:    map[string]string{"COMPACTOR_NATS_TOKEN": "s3cret-token-0123"},
			wrong:   map[string]string{"COMPACTOR_NATS_TOKEN": "wr0ng-token-4567"},
			wantErr: "Authorization Violation", secrets: []string{"s3cret-token-0123", "wr0ng-token-4567"},
		},
		{
			name: "user and password", server: users, url: plain,
			good:    map[string]string{"COMPACTOR_NATS_USER": "compactor", "COMPACTOR_NATS_PASSWORD": "pa55-w0rd-89"},
			wrong:   map[string]string{"COMPACTOR_NATS_USER": "compactor", "COMPACTOR_NATS_PASSWORD": "n0t-the-pa55"},
			wantErr: "Authorization Violation", secrets: []string{"pa55-w0rd-89", "n0t-the-pa55"},
		},
		{
			name: "user and password in the url", server: users,
			url:  func(ns *server.Server) string { return "nats://compactor:pa55-w0rd-89@" + jstest.HostPort(ns) },
			good: map[string]string{},
			// The wrong password replaces the right one in the URL.
			wrong:   map[string]string{"url-password": "n0t-the-pa55"},
			wantErr: "Authorization Violation", secrets: []string{"pa55-w0rd-89", "n0t-the-pa55"},
		},
		{
			name: "nkey", server: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: nkeyPub}} }, url: plain,
			good:    map[string]string{"COMPACTOR_NATS_NKEY": nkeyFile},
			wrong:   map[string]string{"COMPACTOR_NATS_NKEY": otherNkeyFile},
			wantErr: "Authorization Violation", secrets: []string{nkeySeed, otherSeed},
		},
		{
			name: "credentials file", start: func(t testing.TB) *server.Server { return op.Server(t, nil) }, url: plain,
			good:    map[string]string{"COMPACTOR_NATS_CREDS": creds},
			wrong:   map[string]string{"COMPACTOR_NATS_CREDS": foreign},
			wantErr: "Authorization Violation", secrets: []string{credsText, foreignText, seedLine(credsText), seedLine(foreignText)},
		},
		{
			name: "tls url with a ca", server: tf.Configure(false), url: tlsURL,
			good:    map[string]string{"COMPACTOR_NATS_CA": tf.CA},
			wrong:   map[string]string{"COMPACTOR_NATS_CA": tf.OtherCA},
			wantErr: "certificate signed by unknown authority",
		},
		{
			name: "tls with a verified client certificate", server: tf.Configure(true), url: plain,
			good:  map[string]string{"COMPACTOR_NATS_CA": tf.CA, "COMPACTOR_NATS_CERT": tf.ClientCert, "COMPACTOR_NATS_KEY": tf.ClientKey},
			wrong: map[string]string{"COMPACTOR_NATS_CA": tf.CA},
			// "remote error: tls: certificate required", or, when the server closes
			// first, "nats: tls error: connection closed by remote after TLS handshake".
			wantErr: "tls",
		},
	}
}

func seedLine(creds string) string {
	for _, l := range strings.Split(creds, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "SU") {
			return l
		}
	}
	return "(no seed line)"
}

// serveFor runs `compactor serve` until stop is called (or the test ends); its result
// arrives on served.
func serveFor(t *testing.T, logs *proctest.LogBuffer) (stop func(), served <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		ch <- run(ctx, []string{"serve"}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: logs}, os.LookupEnv)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop, ch
}

// setAuthEnv sets a clean environment: the URL and the variables of vars.
func setAuthEnv(t *testing.T, url string, vars map[string]string) {
	t.Helper()
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_LOG_LEVEL", "debug")
	if pw, ok := vars["url-password"]; ok {
		url = strings.Replace(url, "pa55-w0rd-89", pw, 1)
	}
	t.Setenv("COMPACTOR_NATS_URL", url)
	for k, v := range vars {
		if strings.HasPrefix(k, "COMPACTOR_") {
			t.Setenv(k, v)
		}
	}
}

// noSecrets fails when any of texts holds a secret.
func noSecrets(t *testing.T, secrets []string, texts ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, text := range texts {
			if strings.Contains(text, s) {
				t.Fatalf("a secret (%.6s…) appears in:\n%s", s, text)
			}
		}
	}
}

// For every way to authenticate: serve connects to the secured server, provisions and
// runs; every client command (status, publish, context, compact, policy) connects the
// same way and round-trips. With a wrong secret, serve stops at once without retrying
// and the commands fail, each with the server's refusal and the variables to check,
// and no secret appears in any error or log line.
func TestAuthEveryMethodServeAndCLI(t *testing.T) {
	for _, tc := range authSetups(t) {
		t.Run(tc.name, func(t *testing.T) {
			var ns *server.Server
			if tc.start != nil {
				ns = tc.start(t)
			} else {
				ns = jstest.ServerWith(t, tc.server)
			}
			setAuthEnv(t, tc.url(ns), tc.good)
			logs := &proctest.LogBuffer{}
			stop, served := serveFor(t, logs)
			eventually(t, 30*time.Second, "serve to provision and its service to answer", func() bool {
				select {
				case err := <-served:
					t.Fatalf("serve returned: %v\n%s", err, logs)
				default:
				}
				_, _, err := cli(t, "", "policy", "get", "auth-conv")
				return err == nil
			})
			out, _, err := cli(t, `{"role":"user","content":"hello over a secured connection"}`+"\n", "publish", "auth-conv")
			if err != nil || strings.TrimSpace(out) != "1" {
				t.Fatalf("publish = %q, %v; want sequence 1", out, err)
			}
			out, _, err = cli(t, "", "context", "auth-conv")
			if err != nil || !strings.Contains(out, "hello over a secured connection") {
				t.Fatalf("context = %q, %v; want the published message", out, err)
			}
			out, _, err = cli(t, "", "status", "auth-conv", "--json")
			if err != nil || !strings.Contains(out, `"context_messages": 1`) {
				t.Fatalf("status auth-conv = %q, %v; want one message", out, err)
			}
			out, _, err = cli(t, "", "compact", "auth-conv", "--wait", "20s", "--json")
			if err != nil || !strings.Contains(out, `"status": "declined"`) {
				t.Fatalf("compact = %q, %v; want declined (nothing to compact)", out, err)
			}
			stop()
			noSecrets(t, tc.secrets, logs.String())

			// A wrong secret: every command fails with the refusal, serve at once.
			setAuthEnv(t, tc.url(ns), tc.wrong)
			_, _, err = cli(t, "", "status")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "check COMPACTOR_NATS_") {
				t.Fatalf("status with a wrong secret: %v; want %q and the variables to check", err, tc.wantErr)
			}
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("status with a wrong secret exits %d; want %d (usage)", code, exitUsage)
			}
			noSecrets(t, tc.secrets, err.Error())
			logs = &proctest.LogBuffer{}
			start := time.Now()
			_, served = serveFor(t, logs)
			select {
			case err = <-served:
			case <-time.After(30 * time.Second):
				t.Fatalf("serve with a wrong secret still runs after 30s; want it to stop\n%s", logs)
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("serve with a wrong secret: %v; want %q", err, tc.wantErr)
			}
			// Refused credentials are a configuration mistake: exit 2, as the other commands.
			if code := exitCode(err); code != exitUsage {
				t.Fatalf("serve with a wrong secret exits %d; want %d (usage), as status does", code, exitUsage)
			}
			if strings.Contains(logs.String(), "retrying") {
				t.Fatalf("a refused connection was retried:\n%s", logs)
			}
			noSecrets(t, tc.secrets, err.Error(), logs.String())
			t.Logf("refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// serve started before its NATS retries while the server cannot be reached, then stops
// as soon as the server that comes up refuses its token: a refusal is never retried.
func TestAuthRefusedAfterWaitingForNATS(t *testing.T) {
	addr := freeAddr(t)
	setAuthEnv(t, "nats://"+addr, map[string]string{"COMPACTOR_NATS_TOKEN": "wr0ng-token-4567"})
	logs := &proctest.LogBuffer{}
	_, served := serveFor(t, logs)
	eventually(t, 30*time.Second, "serve to log a retry", func() bool {
		select {
		case err := <-served:
			t.Fatalf("serve returned before NATS was up: %v\n%s", err, logs)
		default:
		}
		return strings.Contains(logs.String(), "retrying provisioning")
	})
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	jstest.ServerWith(t, func(o *server.Options) {
		o.Host, o.Port = host, p
		o.Authorization = "s3cret-token-0123"
	})
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("serve: %v; want the authorization violation", err)
		}
		noSecrets(t, []string{"s3cret-token-0123", "wr0ng-token-4567"}, err.Error(), logs.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve kept running after the server refused its token\n%s", logs)
	}
}

// A combination of variables that cannot work stops every command before it connects,
// naming the variables and never showing a secret.
func TestAuthVariablesAreChecked(t *testing.T) {
	const secret = "SUSECRETVALUE0123456789"
	garbage := jstest.WriteFile(t, "bad.nk", []byte(secret+"\n"))
	tf := jstest.NewTLS(t)
	tests := []struct {
		name string
		vars map[string]string
		want []string
	}{
		{"token and user", map[string]string{"COMPACTOR_NATS_TOKEN": secret, "COMPACTOR_NATS_USER": "u", "COMPACTOR_NATS_PASSWORD": secret},
			[]string{"COMPACTOR_NATS_TOKEN", "COMPACTOR_NATS_USER", "one way"}},
		{"creds and nkey", map[string]string{"COMPACTOR_NATS_CREDS": garbage, "COMPACTOR_NATS_NKEY": garbage},
			[]string{"COMPACTOR_NATS_CREDS", "COMPACTOR_NATS_NKEY"}},
		{"user in the url and a token", map[string]string{"COMPACTOR_NATS_URL": "nats://u:" + secret + "@127.0.0.1:4222", "COMPACTOR_NATS_TOKEN": secret},
			[]string{"COMPACTOR_NATS_URL", "COMPACTOR_NATS_TOKEN"}},
		{"cert without key", map[string]string{"COMPACTOR_NATS_CERT": tf.ClientCert}, []string{"COMPACTOR_NATS_CERT", "without COMPACTOR_NATS_KEY"}},
		{"key without cert", map[string]string{"COMPACTOR_NATS_KEY": tf.ClientKey}, []string{"COMPACTOR_NATS_KEY", "without COMPACTOR_NATS_CERT"}},
		{"password without user", map[string]string{"COMPACTOR_NATS_PASSWORD": secret}, []string{"COMPACTOR_NATS_PASSWORD", "without COMPACTOR_NATS_USER"}},
		{"user without password", map[string]string{"COMPACTOR_NATS_USER": "u"}, []string{"COMPACTOR_NATS_USER", "without COMPACTOR_NATS_PASSWORD"}},
		{"creds file missing", map[string]string{"COMPACTOR_NATS_CREDS": "/nonexistent/user.creds"}, []string{"COMPACTOR_NATS_CREDS", "no such file"}},
		{"ca file missing", map[string]string{"COMPACTOR_NATS_CA": "/nonexistent/ca.pem"}, []string{"COMPACTOR_NATS_CA", "no such file"}},
		{"nkey file without a seed", map[string]string{"COMPACTOR_NATS_NKEY": garbage}, []string{"COMPACTOR_NATS_NKEY"}},
		{"creds file without credentials", map[string]string{"COMPACTOR_NATS_CREDS": garbage}, []string{"COMPACTOR_NATS_CREDS"}},
		{"ca file without a certificate", map[string]string{"COMPACTOR_NATS_CA": garbage}, []string{"COMPACTOR_NATS_CA"}},
		{"key of another certificate", map[string]string{"COMPACTOR_NATS_CERT": tf.ClientCert, "COMPACTOR_NATS_KEY": tf.OtherKey}, []string{"COMPACTOR_NATS_CERT"}},
		{"url that does not parse", map[string]string{"COMPACTOR_NATS_URL": "nats://u:" + secret + "%zz@127.0.0.1:4222"}, []string{"COMPACTOR_NATS_URL", "not a valid url"}},
		{"token for the embedded server", map[string]string{"COMPACTOR_NATS_URL": "", "COMPACTOR_NATS_TOKEN": secret}, []string{"COMPACTOR_NATS_TOKEN", "COMPACTOR_NATS_URL is empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setAuthEnv(t, "nats://127.0.0.1:4222", nil)
			for k, v := range tc.vars {
				t.Setenv(k, v)
			}
			for _, cmd := range []string{"serve", "status", "publish"} {
				_, _, err := cli(t, "", cmd, "conv")
				if cmd == "serve" || cmd == "status" {
					_, _, err = cli(t, "", cmd)
				}
				if err == nil || !strings.HasPrefix(err.Error(), "configuration: ") {
					t.Fatalf("%s: %v; want a configuration error", cmd, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not say %q", cmd, err, w)
					}
				}
				noSecrets(t, []string{secret}, err.Error())
			}
		})
	}
}

func TestAuthHelpListsTheVariables(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"help"}, stdio{out: &out, err: &out}, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"COMPACTOR_NATS_CREDS", "COMPACTOR_NATS_NKEY", "COMPACTOR_NATS_TOKEN", "COMPACTOR_NATS_USER",
		"COMPACTOR_NATS_PASSWORD", "COMPACTOR_NATS_CA", "COMPACTOR_NATS_CERT", "COMPACTOR_NATS_KEY"} {
		if !strings.Contains(out.String(), v) {
			t.Errorf("help does not list %s", v)
		}
	}
}
