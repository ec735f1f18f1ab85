package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream/jstest"
)

// A node of the proxy role alone serves the proxy on its address, forwards to the
// upstream, exports the proxy's metrics, and stops when its context is done.
func TestProxyRoleAlone(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s %s", r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer up.Close()

	pcfg := proxy.DefaultConfig()
	pcfg.Listen, pcfg.Upstream = "127.0.0.1:0", up.URL
	settings := node.Settings{Proxy: &pcfg, Workers: 1, MaxAttempts: 1, BackoffBase: 1, BackoffMax: 1, RetryDelay: 1, AckWait: 3e9}
	m := telemetry.NewMetrics("test")
	cfg, err := settings.Config(zerolog.Nop(), telemetry.Telemetry{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Roles != (node.Roles{Proxy: true}) {
		t.Fatalf("roles %+v", cfg.Roles)
	}
	n, err := node.New(cfg, nc, st)
	if err != nil {
		t.Fatal(err)
	}
	if n.Trigger() != nil || n.Pool() != nil || n.Service() != nil || n.ProxyAddr() == "" {
		t.Fatalf("roles built: trigger %v pool %v service %v proxy %q", n.Trigger(), n.Pool(), n.Service(), n.ProxyAddr())
	}
	stop := n.Start(context.Background())
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.ProxyAddr()+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "upstream /v1/models Bearer k" || resp.Header.Get(proxy.StatusHeader) != proxy.StatusPassthrough {
		t.Fatalf("%q %v", body, resp.Header)
	}
	if n := testutil.CollectAndCount(m.Registry(), "compactor_proxy_requests_total"); n == 0 {
		t.Fatal("the proxy's metrics are not registered")
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := http.Get("http://" + n.ProxyAddr() + "/v1/models"); err == nil {
		t.Fatal("the proxy still serves after stop")
	}
}

// serve's roles get the proxy added when it is configured; a port in use stops
// start-up.
func TestProxyRoleAddedAndItsPortChecked(t *testing.T) {
	pcfg := proxy.DefaultConfig()
	s := node.Settings{Roles: "trigger,api", Proxy: &pcfg, Workers: 1, MaxAttempts: 1, BackoffBase: 1, BackoffMax: 1, RetryDelay: 1, AckWait: 3e9}
	cfg, err := s.Config(zerolog.Nop(), telemetry.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Roles != (node.Roles{Trigger: true, API: true, Proxy: true}) {
		t.Fatalf("roles %+v", cfg.Roles)
	}
	s.Proxy = nil
	if cfg, _ := s.Config(zerolog.Nop(), telemetry.Telemetry{}); cfg.Roles.Proxy {
		t.Fatal("a proxy role without its configuration")
	}

	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	taken := httptest.NewServer(http.NotFoundHandler())
	defer taken.Close()
	pcfg.Listen = strings.TrimPrefix(taken.URL, "http://")
	cfg, err = node.Settings{Proxy: &pcfg}.Config(zerolog.Nop(), telemetry.Telemetry{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.New(cfg, nc, st); err == nil || !strings.Contains(err.Error(), "COMPACTOR_PROXY_LISTEN") {
		t.Fatalf("New with the port in use: %v", err)
	}
}
