package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor/compactor/jetstream/jstest"
)

// natsConfig is a nats CLI configuration directory ($XDG_CONFIG_HOME) with contexts.
type natsConfig struct {
	t   *testing.T
	dir string
}

func newNATSConfig(t *testing.T) natsConfig {
	return natsConfig{t: t, dir: t.TempDir()}
}

func (c natsConfig) add(name string, fields map[string]any) string {
	c.t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		c.t.Fatal(err)
	}
	path := filepath.Join(c.dir, "nats", "context", name+".json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

func (c natsConfig) selectContext(name string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "nats", "context.txt"), []byte(name+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// The precedence of the connection settings: flags > COMPACTOR_* > NATS_* and --context
// > the selected context > a local compactor serve; the way to authenticate is taken
// whole from one source.
func TestConnectionPrecedence(t *testing.T) {
	cfg := newNATSConfig(t)
	cfg.add("dev", map[string]any{"url": "nats://dev:4222", "user": "dev-user", "password": "env://DEV_PASSWORD", "description": "ignored"})
	cfg.add("ops", map[string]any{"url": "nats://ops:4222", "token": "ops-token", "inbox_prefix": "_INBOX_ops"})
	cfg.add("nourl", map[string]any{"token": "t"})
	jsonFile := cfg.add("file", map[string]any{"url": "nats://file:4222"})
	cfg.add("proxy", map[string]any{"url": "nats://p:4222", "socks_proxy": "socks5://p:1080"})
	cfg.add("vault", map[string]any{"url": "nats://v:4222", "user": "u", "password": "op://vault/nats/password"})
	cfg.selectContext("dev")

	type want struct {
		url, user, password, token, inbox string
		local                             bool
		urlFrom, authFrom                 string
	}
	for _, tc := range []struct {
		name    string
		vars    map[string]string // NATS_*, HOME, XDG_CONFIG_HOME (and the DEV_PASSWORD a context names)
		env     func(e *Env)      // COMPACTOR_* (read from the process environment in real runs)
		flags   []string
		serve   bool
		noXDG   bool
		want    want
		wantErr string
	}{
		{name: "the selected context", want: want{url: "nats://dev:4222", user: "dev-user", password: "dev-secret",
			urlFrom: `url of nats context "dev"`, authFrom: `user of nats context "dev"`}},
		{name: "nothing anywhere: a local compactor serve", noXDG: true, want: want{url: "nats://127.0.0.1:4222", local: true}},
		{name: "--no-context", flags: []string{"--no-context"}, want: want{url: "nats://127.0.0.1:4222", local: true}},
		{name: "--no-context ignores NATS_CONTEXT too", vars: map[string]string{"NATS_CONTEXT": "ops"}, flags: []string{"--no-context"},
			want: want{url: "nats://127.0.0.1:4222", local: true}},
		{name: "--context and --no-context", flags: []string{"--no-context", "--context", "ops"}, wantErr: "--context and --no-context contradict each other"},
		{name: "NATS_CONTEXT beats the selected one", vars: map[string]string{"NATS_CONTEXT": "ops"},
			want: want{url: "nats://ops:4222", token: "ops-token", inbox: "_INBOX_ops", urlFrom: `url of nats context "ops"`}},
		{name: "--context beats NATS_CONTEXT", vars: map[string]string{"NATS_CONTEXT": "dev"}, flags: []string{"--context", "ops"},
			want: want{url: "nats://ops:4222", token: "ops-token", inbox: "_INBOX_ops"}},
		{name: "--context of a .json file", flags: []string{"--context", jsonFile}, want: want{url: "nats://file:4222"}},
		{name: "a context without url is the nats CLI's default", flags: []string{"--context", "nourl"},
			want: want{url: "nats://127.0.0.1:4222", token: "t"}},
		{name: "NATS_URL beats the context's url; its credentials stay", vars: map[string]string{"NATS_URL": "nats://env:4222"},
			want: want{url: "nats://env:4222", user: "dev-user", password: "dev-secret", urlFrom: "NATS_URL", authFrom: `user of nats context "dev"`}},
		{name: "NATS_TOKEN replaces the context's user and password", vars: map[string]string{"NATS_TOKEN": "env-token"},
			want: want{url: "nats://dev:4222", token: "env-token", authFrom: "NATS_TOKEN"}},
		{name: "NATS_USER alone is a token, as in the nats CLI", vars: map[string]string{"NATS_USER": "a-token"},
			want: want{url: "nats://dev:4222", token: "a-token"}},
		{name: "COMPACTOR_NATS_URL beats NATS_URL", vars: map[string]string{"NATS_URL": "nats://env:4222"},
			env: func(e *Env) { e.NATSURL = "nats://compactor:4222" }, want: want{url: "nats://compactor:4222", user: "dev-user", password: "dev-secret", urlFrom: "COMPACTOR_NATS_URL"}},
		{name: "COMPACTOR_LISTEN, when set, beats NATS_URL", vars: map[string]string{"NATS_URL": "nats://env:4222", "COMPACTOR_LISTEN": "127.0.0.1:5222"},
			want: want{url: "nats://127.0.0.1:5222", user: "dev-user", password: "dev-secret", urlFrom: "COMPACTOR_LISTEN"}},
		{name: "COMPACTOR_NATS_TOKEN beats NATS_* and the context", vars: map[string]string{"NATS_USER": "u", "NATS_PASSWORD": "p"},
			env:  func(e *Env) { e.NATSToken = "c-token" },
			want: want{url: "nats://dev:4222", token: "c-token", authFrom: "COMPACTOR_NATS_TOKEN"}},
		{name: "-s beats COMPACTOR_NATS_URL", env: func(e *Env) { e.NATSURL = "nats://compactor:4222" }, flags: []string{"-s", "nats://flag:4222"},
			want: want{url: "nats://flag:4222", user: "dev-user", password: "dev-secret", urlFrom: "-s/--server"}},
		{name: "--token beats every other way", env: func(e *Env) { e.NATSUser, e.NATSPassword = "u", "p" }, flags: []string{"--token", "f-token"},
			want: want{url: "nats://dev:4222", token: "f-token", authFrom: "--token"}},
		{name: "a URL with user info replaces the ways of lower sources", flags: []string{"-s", "nats://me:pw@flag:4222"},
			want: want{url: "nats://me:pw@flag:4222"}},
		{name: "serve: only flags and COMPACTOR_*", serve: true, vars: map[string]string{"NATS_URL": "nats://env:4222", "NATS_CONTEXT": "ops"},
			want: want{url: "nats://127.0.0.1:4222", local: true}},
		{name: "serve -s", serve: true, flags: []string{"-s", "nats://flag:4222", "--token", "tk"}, want: want{url: "nats://flag:4222", token: "tk"}},
		{name: "serve: a token without a server", serve: true, flags: []string{"--token", "tk"},
			wantErr: "configuration: --token is set but COMPACTOR_NATS_URL is empty"},
		{name: "two ways in one source", flags: []string{"--token", "t", "--user", "u", "--password", "p"},
			wantErr: "configuration: --token and --user are both set; use one way to authenticate"},
		{name: "an unknown context", flags: []string{"--context", "nope"},
			wantErr: `configuration: --context "nope" does not exist (no ` + filepath.Join(cfg.dir, "nats", "context", "nope.json") + "): create it with `nats context add`"},
		{name: "a context name with a path", vars: map[string]string{"NATS_CONTEXT": "../dev"}, wantErr: `NATS_CONTEXT "../dev" is not a nats context name`},
		{name: "a context compactor cannot honour", flags: []string{"--context", "proxy"},
			wantErr: `nats context "proxy" (` + filepath.Join(cfg.dir, "nats", "context", "proxy.json") + `) sets socks_proxy, which compactor does not support`},
		{name: "a secret in 1Password", flags: []string{"--context", "vault"}, wantErr: "sets password, which names a op reference; compactor resolves only env:// and file://"},
		{name: "a password variable that is not set", vars: map[string]string{"DEV_PASSWORD": ""}, wantErr: "names the variable DEV_PASSWORD, which is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testEnv(t, 128000)
			vars := map[string]string{"XDG_CONFIG_HOME": cfg.dir, "DEV_PASSWORD": "dev-secret", "HOME": t.TempDir()}
			if tc.noXDG {
				delete(vars, "XDG_CONFIG_HOME")
			}
			for k, v := range tc.vars {
				vars[k] = v
			}
			env.lookup = func(k string) (string, bool) { v, ok := vars[k]; return v, ok && v != "" }
			if tc.env != nil {
				tc.env(&env)
			}
			fs := newFlagSet("test")
			cf := defineConnFlags(fs, !tc.serve)
			if _, err := fs.parse(tc.flags); err != nil {
				t.Fatal(err)
			}
			c, err := resolveConnection(env, cf, !tc.serve)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitCode(err) != exitUsage {
					t.Fatalf("err = %v; want a configuration error (exit 2) saying %q", err, tc.wantErr)
				}
				for _, secret := range []string{"dev-secret", "ops-token"} {
					if strings.Contains(err.Error(), secret) {
						t.Fatalf("the error shows a secret: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			got := want{url: c.URL, user: c.Auth.User, password: c.Auth.Password, token: c.Auth.Token, inbox: c.Auth.InboxPrefix, local: c.Local}
			if w.urlFrom != "" {
				got.urlFrom = c.Name("URL")
			}
			if w.authFrom != "" {
				got.authFrom = c.Name(map[bool]string{true: "User", false: "Token"}[c.Auth.User != ""])
			}
			if got != w {
				t.Fatalf("resolved %+v; want %+v", got, w)
			}
		})
	}
}

// A command connects with the nats CLI's selected context to a secured server, and a
// context with a wrong password is refused naming where the password came from.
func TestCommandsUseTheSelectedNATSContext(t *testing.T) {
	env := testEnv(t, 128000)
	ns := jstest.ServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "ctx-user", Password: "ctx-pa55"}}
	})
	url := ns.ClientURL()
	// The compactor itself runs with its own variables.
	nc := jstest.ConnTo(t, "nats://ctx-user:ctx-pa55@"+jstest.HostPort(ns))
	runStack(t, nc, jstest.Provision(t, nc), env, nil)

	cfg := newNATSConfig(t)
	t.Setenv("XDG_CONFIG_HOME", cfg.dir)
	secret := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(secret, []byte("ctx-pa55\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.add("good", map[string]any{"url": url, "user": "ctx-user", "password": "file://" + secret})
	cfg.add("wrong", map[string]any{"url": url, "user": "ctx-user", "password": "n0t-it"})
	cfg.selectContext("good")
	out, _, err := cli(t, `{"role":"user","content":"hello through a context"}`+"\n", "publish", "ctx-conv")
	if err != nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("publish with the selected context: %q, %v", out, err)
	}
	out, _, err = cli(t, "", "context", "ctx-conv")
	if err != nil || !strings.Contains(out, "hello through a context") {
		t.Fatalf("context with the selected context: %q, %v", out, err)
	}
	_, _, err = cli(t, "", "status", "ctx-conv", "--context", "wrong")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "Authorization Violation") ||
		!strings.Contains(err.Error(), `check user of nats context "wrong", password of nats context "wrong"`) || strings.Contains(err.Error(), "n0t-it") {
		t.Fatalf("status --context wrong: %v (exit %d); want the refusal naming the context's user and password, exit 2", err, exitCode(err))
	}
	// The variables of the nats CLI beat the selected context.
	t.Setenv("NATS_URL", "nats://"+freeAddr(t))
	_, _, err = cli(t, "", "status", "ctx-conv")
	if exitCode(err) != exitUnavailable || !strings.Contains(err.Error(), "(from NATS_URL)") {
		t.Fatalf("status with NATS_URL to nowhere: %v (exit %d); want unreachable (7), naming NATS_URL", err, exitCode(err))
	}
}

// Only COMPACTOR_ variables configure Compactor: envconfig also read the bare names
// (NATS_URL as COMPACTOR_NATS_URL, LOG_LEVEL, WORKERS, CONFIG, ...), so NATS_URL beat
// the nats CLI's rules and moved serve off its embedded server, and any LOG_LEVEL or
// WORKERS of the environment configured (or stopped) it.
func TestOnlyCOMPACTORVariablesAreRead(t *testing.T) {
	testEnv(t, 128000)
	for k, v := range map[string]string{"NATS_URL": "nats://elsewhere:4222", "NATS_TOKEN": "t", "LOG_LEVEL": "loud",
		"WORKERS": "many", "LISTEN": "nowhere", "CONFIG": "/nonexistent.json"} {
		t.Setenv(k, v)
	}
	env, err := loadEnv(os.LookupEnv)
	if err != nil {
		t.Fatalf("loadEnv with bare variables set: %v; want them ignored", err)
	}
	if env.NATSURL != "" || env.NATSToken != "" || env.Workers != 4 || env.Listen != "127.0.0.1:4222" || env.Config != "" {
		t.Fatalf("env = url %q token %q workers %d listen %q config %q; want the defaults", env.NATSURL, env.NATSToken, env.Workers, env.Listen, env.Config)
	}
	t.Setenv("COMPACTOR_WORKERS", "7")
	if env, err := loadEnv(os.LookupEnv); err != nil || env.Workers != 7 {
		t.Fatalf("COMPACTOR_WORKERS=7: %d, %v", env.Workers, err)
	}
}
