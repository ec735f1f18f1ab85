package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream/jstest"
)

func TestBadProxyVariableStopsStartUpNamingIt(t *testing.T) {
	for _, tc := range []struct{ name, key, value string }{
		{"listen not host:port", "COMPACTOR_PROXY_LISTEN", "8088"},
		{"unknown nats-down choice", "COMPACTOR_PROXY_ON_NATS_DOWN", "maybe"},
		{"upstream not http", "COMPACTOR_PROXY_UPSTREAM", "ftp://models.local"},
		{"anthropic upstream without host", "COMPACTOR_PROXY_ANTHROPIC_UPSTREAM", "https://"},
		{"no body", "COMPACTOR_PROXY_MAX_BODY", "0"},
		{"bad wait", "COMPACTOR_PROXY_WAIT", "soon"},
		{"bad require", "COMPACTOR_PROXY_REQUIRE_ID", "maybe"},
		{"no request in flight", "COMPACTOR_PROXY_MAX_IN_FLIGHT", "0"},
		{"no idle time", "COMPACTOR_PROXY_UPSTREAM_IDLE_TIMEOUT", "0s"},
	} {
		for _, cmd := range []string{"proxy", "serve"} {
			t.Run(cmd+" "+tc.name, func(t *testing.T) {
				testEnv(t, 128000)
				t.Setenv("COMPACTOR_PROXY_LISTEN", "127.0.0.1:0")
				t.Setenv(tc.key, tc.value)
				err := run(t.Context(), []string{cmd}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}}, os.LookupEnv)
				if err == nil || !strings.Contains(err.Error(), tc.key) {
					t.Fatalf("got %v; want an error naming %s", err, tc.key)
				}
			})
		}
	}
}

// serve runs the proxy role besides its own when COMPACTOR_PROXY_LISTEN is set, with
// the proxy's variables.
func TestServeAddsTheProxyRole(t *testing.T) {
	testEnv(t, 128000)
	vars := map[string]string{"COMPACTOR_PROXY_LISTEN": "127.0.0.1:0", "COMPACTOR_PROXY_SESSION_HEADERS": " a-session , b ",
		"COMPACTOR_PROXY_ON_NATS_DOWN": "pass", "COMPACTOR_PROXY_UPSTREAM_KEY": "sk-op", "COMPACTOR_PROXY_MAX_BODY": "1024"}
	env, err := loadEnv(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.node(zerolog.Nop(), telemetry.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Roles != (node.Roles{Trigger: true, Worker: true, API: true, Proxy: true}) {
		t.Fatalf("roles %+v", cfg.Roles)
	}
	p := cfg.Proxy
	if p == nil || p.Listen != "127.0.0.1:0" || strings.Join(p.SessionHeaders, "|") != "a-session|b" || p.OnNATSDown != "pass" ||
		p.UpstreamKey != "sk-op" || p.MaxBody != 1024 || p.Upstream != "https://api.openai.com" || p.Wait != 10*time.Second {
		t.Fatalf("proxy config %+v", p)
	}
	env, _ = loadEnv(func(string) (string, bool) { return "", false })
	if cfg, _ := env.node(zerolog.Nop(), telemetry.Telemetry{}); cfg.Roles.Proxy || cfg.Proxy != nil {
		t.Fatal("a proxy role without COMPACTOR_PROXY_LISTEN")
	}
}

// compactor proxy runs the proxy alone against COMPACTOR_NATS_URL, forwards to the
// upstream, and exits 0 on its context's end.
func TestProxyCommandServes(t *testing.T) {
	testEnv(t, 128000)
	ns := jstest.ServerWith(t, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s", r.URL.Path)
	}))
	defer up.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("COMPACTOR_NATS_URL", ns.ClientURL())
	t.Setenv("COMPACTOR_PROXY_LISTEN", addr)
	t.Setenv("COMPACTOR_PROXY_UPSTREAM", up.URL)
	logs := &proctest.LogBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, []string{"proxy"}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: logs}, os.LookupEnv)
	}()
	var body string
	eventually(t, 20*time.Second, "the proxy to answer", func() bool {
		select {
		case err := <-served:
			t.Fatalf("proxy returned: %v\n%s", err, logs)
		default:
		}
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return true
	})
	if body != "upstream /v1/models" {
		t.Fatalf("body %q", body)
	}
	if strings.Contains(logs.String(), "trigger") || strings.Contains(logs.String(), "summaries") {
		t.Fatalf("the proxy command ran another role:\n%s", logs)
	}
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("proxy: %v\n%s", err, logs)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("proxy did not stop")
	}
}
