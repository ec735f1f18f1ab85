package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
)

const (
	viewOperatorToken = "operator-token-0123456789"
	viewAcmeToken     = "acme-token-0123456789abcdef"
	viewGlobexToken   = "globex-token-0123456789abcd"
)

// writeTenantsJSON writes a tenants file of body at path, at once.
func writeTenantsJSON(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// viewAnswer is one answer of the view's listener.
type viewAnswer struct {
	code int
	h    http.Header
	body string
}

// viewGet sends "GET target" to the listener at addr as written (no client cleans or
// escapes it), with the token ("": none).
func viewGet(t *testing.T, addr, target, token string) viewAnswer {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", target, addr)
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return viewAnswer{res.StatusCode, res.Header, string(b)}
}

// servedTenants is the operator's list of the tenants the view serves (nil until the
// listener answers).
func servedTenants(t *testing.T, addr string) []string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	conn.Close()
	a := viewGet(t, addr, "/api/tenants", viewOperatorToken)
	var l view.TenantList
	if a.code != http.StatusOK || json.Unmarshal([]byte(a.body), &l) != nil {
		return nil
	}
	names := []string{}
	for _, tn := range l.Tenants {
		names = append(names, tn.Name)
	}
	return names
}

// Serve with a tenants file and COMPACTOR_VIEW_LISTEN serves every running tenant's
// view on one listener, under /t/<tenant>/: a tenant's own token (its view_token_env,
// read through Lookup) opens its view only, the operator's every view; the same
// conversation id in two tenants is two conversations; a tenant added to or removed
// from the file appears or disappears while the listener runs on.
func TestServeTenantsWebView(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsJSON(t, file, `{"tenants": {"acme": {"view_token_env": "ACME_VIEW_TOKEN"}, "globex": {"view_token_env": "GLOBEX_VIEW_TOKEN"}}}`)
	vars := map[string]string{"ACME_VIEW_TOKEN": viewAcmeToken, "GLOBEX_VIEW_TOKEN": viewGlobexToken}
	logs := &logLines{t: t}
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	prices, err := savings.ParsePrices([]byte(`{"models": {"gpt-4.1": {"input": 2, "cached_input": 0.5, "cache_write": 0, "output": 8}}}`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sctx, stopServe := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(sctx, node.ServeConfig{
			Node: node.Config{Roles: node.Roles{API: true}, Resolver: resolver(t, 8000), Logger: zerolog.New(logs).Level(zerolog.WarnLevel),
				Lookup:     func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
				ViewListen: addr, ViewToken: viewOperatorToken, ViewPrices: prices},
			NATSURL: srv.ClientURL(), JetStream: jetstream.DefaultConfig(), DrainTimeout: 30 * time.Second,
			Tenants: &node.TenantsSource{Path: file, Every: 50 * time.Millisecond},
		})
	}()
	waitFor(ctx, t, "acme's and globex's views", func() bool { return slices.Equal(servedTenants(t, addr), []string{"acme", "globex"}) })
	for tenant, text := range map[string]string{"acme": "words of acme", "globex": "words of globex"} {
		cl := pipeline.NewWithStore(nc, tenantStore(ctx, t, nc, tenant))
		if _, err := cl.Publish(ctx, "c1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ path, token, has, hasNot string }{
		{"/t/acme/c/c1", viewAcmeToken, "words of acme", "globex"},
		{"/t/acme/api/c/c1", viewOperatorToken, "words of acme", "globex"},
		{"/t/globex/c/c1", viewGlobexToken, "words of globex", "acme"},
		{"/t/globex/c/c1/messages?from=1", viewOperatorToken, "words of globex", "acme"},
		{"/", viewOperatorToken, `href="/t/globex/"`, "words of"},
		// The savings pages are priced with the node's table (COMPACTOR_PRICES).
		{"/t/acme/api/savings", viewAcmeToken, `"priced": true`, "globex"},
		{"/api/savings", viewOperatorToken, `"priced": true`, "words of"},
	} {
		a := viewGet(t, addr, tc.path, tc.token)
		if a.code != http.StatusOK || !strings.Contains(a.body, tc.has) || strings.Contains(a.body, tc.hasNot) {
			t.Errorf("%s: %d; want 200 with %q, without %q\n%s", tc.path, a.code, tc.has, tc.hasNot, a.body)
		}
	}
	// acme's token on globex's paths, however spelt, and on a tenant that does not
	// exist, gets what a wrong token gets.
	for _, p := range []string{"/", "/api/tenants", "/t/globex/", "/t/globex/api/conversations", "/t/globex/c/c1", "/t/globex/api/c/c1",
		"/t/globex/c/c1/messages?from=1", "/t/globex/static/view.css", "/static/view.css", "/t/acme/../globex/c/c1",
		"/t/acme%2F..%2Fglobex/c/c1", "/t/globex%2Fc%2Fc1", "/t/GLOBEX/c/c1", "/t/Globex/", "/t/initech/c/c1"} {
		a, wrong := viewGet(t, addr, p, viewAcmeToken), viewGet(t, addr, p, "a-wrong-token-0123456789")
		if a.code != http.StatusUnauthorized || a.body != wrong.body || strings.Contains(a.body, "globex") {
			t.Errorf("acme's token on %s: %d; want the answer of a wrong token (%d)\n%s", p, a.code, wrong.code, a.body)
		}
	}

	// globex leaves the file, initech (whose token variable is not set) comes in.
	unknown := viewGet(t, addr, "/t/initech/c/c1", viewGlobexToken)
	writeTenantsJSON(t, file, `{"tenants": {"acme": {"view_token_env": "ACME_VIEW_TOKEN"}, "initech": {"view_token_env": "INITECH_VIEW_TOKEN"}}}`)
	waitFor(ctx, t, "initech in, globex out", func() bool { return slices.Equal(servedTenants(t, addr), []string{"acme", "initech"}) })
	if a := viewGet(t, addr, "/t/globex/c/c1", viewOperatorToken); a.code != http.StatusNotFound {
		t.Errorf("the operator on a removed tenant: %d; want 404", a.code)
	}
	if a := viewGet(t, addr, "/t/globex/c/c1", viewGlobexToken); a.code != http.StatusUnauthorized || a.body != unknown.body {
		t.Errorf("a removed tenant's token: %d; want the answer of a tenant that never was\n%s", a.code, a.body)
	}
	if a := viewGet(t, addr, "/t/initech/", viewOperatorToken); a.code != http.StatusOK {
		t.Errorf("the operator on initech: %d", a.code)
	}
	if !logs.has("INITECH_VIEW_TOKEN") {
		t.Error("initech's unset token variable not logged")
	}
	if a := viewGet(t, addr, "/t/acme/c/c1", viewAcmeToken); a.code != http.StatusOK {
		t.Errorf("acme's view after the others changed: %d", a.code)
	}
	for _, tok := range []string{viewAcmeToken, viewGlobexToken, viewOperatorToken} {
		if logs.has(tok) {
			t.Errorf("a token in the log: %s", tok)
		}
	}
	stopServe()
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v after its context was done", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("the view still listens after Serve returned")
	}
}

// A view of tenants needs the api role; a proxy serves one tenant (compactor proxy with COMPACTOR_TENANT), never a tenants file.
func TestServeTenantsViewConfiguration(t *testing.T) {
	srv := jstest.Server(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsJSON(t, file, `{"tenants": {"acme": {}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for what, tc := range map[string]struct {
		ncfg node.Config
		want string
	}{
		"no api role":   {node.Config{Roles: node.Roles{Worker: true}, ViewListen: "127.0.0.1:0"}, "needs the api role"},
		"a short token": {node.Config{Roles: node.Roles{API: true}, ViewListen: "127.0.0.1:0", ViewToken: "short"}, "at least 16"},
		"the proxy":     {node.Config{Roles: node.Roles{API: true, Proxy: true}}, "a proxy serves one tenant"},
	} {
		tc.ncfg.Resolver, tc.ncfg.Logger = resolver(t, 8000), zerolog.Nop()
		err := node.Serve(ctx, node.ServeConfig{Node: tc.ncfg, NATSURL: srv.ClientURL(), JetStream: jetstream.DefaultConfig(),
			DrainTimeout: time.Second, Tenants: &node.TenantsSource{Path: file}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Serve = %v; want %q", what, err, tc.want)
		}
	}
}
