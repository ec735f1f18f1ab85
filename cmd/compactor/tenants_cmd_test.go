package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream/jstest"
)

// provision with a tenants file makes every tenant's streams, CHAT bounded by the
// tenant's stored_bytes quota; with COMPACTOR_TENANT too, only that tenant's; a quota
// changed in the file is a conflict until applied with --update-streams.
func TestProvisionTenants(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"tenants": {"acme": {"quotas": {"stored_bytes": 1048576}}, "globex": {}}}`)
	t.Setenv("COMPACTOR_TENANTS_FILE", file)
	out, errOut, err := cli(t, "", "provision", "--json")
	if err != nil {
		t.Fatalf("provision: %v\n%s", err, errOut)
	}
	var reports []provisionReport
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("provision --json printed %s: %v", out, err)
	}
	if len(reports) != 2 || reports[0].Tenant != "acme" || reports[1].Tenant != "globex" {
		t.Fatalf("reports: %+v", reports)
	}
	for _, r := range reports {
		for _, s := range r.Streams {
			if !strings.HasSuffix(s.Name, "_"+r.Tenant) || s.Error != "" {
				t.Errorf("tenant %s: stream %+v", r.Tenant, s)
			}
		}
	}
	nc := jstest.Conn(t, srv)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(t.Context(), "CHAT_acme")
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxBytes != 1048576 || c.Discard != natsjs.DiscardNew {
		t.Fatalf("CHAT_acme: max_bytes %d, discard %v; want the quota and discard new", c.MaxBytes, c.Discard)
	}

	write(`{"tenants": {"acme": {"quotas": {"stored_bytes": 2097152}}, "globex": {}}}`)
	t.Setenv("COMPACTOR_TENANT", "acme")
	_, errOut, err = cli(t, "", "provision")
	if err == nil || !strings.Contains(err.Error(), "max_bytes") || !strings.Contains(err.Error(), "tenant acme's streams") {
		t.Fatalf("provision with a changed quota: %v\n%s", err, errOut)
	}
	if _, errOut, err = cli(t, "", "provision", "--update-streams"); err != nil {
		t.Fatalf("provision --update-streams: %v\n%s", err, errOut)
	}
	info, _ = js.Stream(t.Context(), "CHAT_acme")
	if c := info.CachedInfo().Config; c.MaxBytes != 2097152 {
		t.Fatalf("CHAT_acme after the update: max_bytes %d", c.MaxBytes)
	}
	t.Setenv("COMPACTOR_TENANT", "initech")
	if _, errOut, err = cli(t, "", "provision"); err == nil || !strings.Contains(err.Error(), "not a tenant") {
		t.Fatalf("provision of a tenant not in the file: %v\n%s", err, errOut)
	}
}

// An operator in Compactor's own account runs the commands on one tenant's
// conversations with COMPACTOR_TENANT: they read that tenant's streams and ask that
// tenant's service (compactor.<tenant>.<endpoint>), and the same id in another tenant is
// another conversation, untouched.
func TestCommandsOnOneTenant(t *testing.T) {
	env := testEnv(t, 6000)
	env.Policy["keep_last_n"] = "4"
	srv := jstest.Server(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {}, "globex": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env.NATSURL, env.TenantsFile, env.DrainTimeout = srv.ClientURL(), file, 30*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, env, stdio{out: io.Discard, err: io.Discard}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	nc := jstest.Conn(t, srv)
	eventually(t, 30*time.Second, "both tenants' services", func() bool {
		_, a := nc.Request("compactor.acme.status", nil, time.Second)
		_, g := nc.Request("compactor.globex.status", nil, time.Second)
		return a == nil && g == nil
	})
	msgs, needles := fakellm.NeedleConversation(4)
	for _, tenant := range []string{"acme", "globex"} {
		t.Setenv("COMPACTOR_TENANT", tenant)
		if _, errOut, err := cli(t, jsonl(msgs), "publish", "c1"); err != nil {
			t.Fatalf("publish to %s: %v\n%s", tenant, err, errOut)
		}
	}
	t.Setenv("COMPACTOR_TENANT", "acme")
	if out, errOut, err := cli(t, "", "compact", "c1", "--wait", "30s"); err != nil || !strings.HasPrefix(out, "completed: generation 1") {
		t.Fatalf("compact acme's c1: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	if out, _, err := cli(t, "", "context", "c1", "--json"); err != nil || !strings.Contains(out, `"has_summary": true`) {
		t.Fatalf("acme's context after its compaction: %v\n%s", err, out)
	}
	if out, _, err := cli(t, "", "status"); err != nil || !strings.Contains(out, "CHAT_acme") || strings.Contains(out, "CHAT_globex") {
		t.Fatalf("acme's status: %v\n%s", err, out)
	}
	if _, errOut, err := cli(t, "", "forget", "c1"); err != nil {
		t.Fatalf("forget acme's c1: %v\n%s", err, errOut)
	}
	t.Setenv("COMPACTOR_TENANT", "globex")
	out, _, err := cli(t, "", "context", "c1", "--json")
	if err != nil || strings.Contains(out, `"has_summary": true`) || !strings.Contains(out, needles[0]) {
		t.Fatalf("globex's c1 after acme's was compacted and forgotten: %v\n%s", err, out)
	}
}

// `compactor proxy` with COMPACTOR_TENANT is one tenant's proxy: the conversations it
// relays are stored in that tenant's streams, nowhere else.
func TestProxyOfOneTenant(t *testing.T) {
	testEnv(t, 128000)
	ns := jstest.Server(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"hello from upstream"}}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}`)
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
	t.Setenv("COMPACTOR_TENANT", "acme")
	// acme's window is its own: far smaller than this process's (128k).
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {"policy": {"context_window": 2000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TENANTS_FILE", file)
	logs := &proctest.LogBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, []string{"proxy"}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: logs}, os.LookupEnv)
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("proxy: %v\n%s", err, logs)
		}
	}()
	var msgs []string
	for i := range 60 {
		role := map[bool]string{true: "user", false: "assistant"}[i%2 == 0]
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, strings.Repeat(fmt.Sprintf("turn %d says a thing. ", i), 20)))
	}
	body := `{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`
	var status int
	var sent string
	eventually(t, 20*time.Second, "the proxy to relay a turn", func() bool {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Compactor-Conversation", "c1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		status, sent = resp.StatusCode, resp.Header.Get("X-Compactor-Tokens-Sent")
		return true
	})
	if status != http.StatusOK {
		t.Fatalf("proxy answered %d\n%s", status, logs)
	}
	if n, err := strconv.Atoi(sent); err != nil || n > 2000 {
		t.Fatalf("the proxy sent %q tokens; want acme's window of 2000 kept (the file's, not the process's)", sent)
	}
	js, err := natsjs.New(jstest.Conn(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(t.Context(), "CHAT_acme")
	if err != nil {
		t.Fatalf("acme's chat stream: %v", err)
	}
	info, err := str.Info(t.Context(), natsjs.WithSubjectFilter("chat.acme.c1.msg"))
	if err != nil || info.State.Subjects["chat.acme.c1.msg"] != 61 {
		t.Fatalf("acme's c1 holds %v (%v); want the client's 60 messages and the reply", info.State.Subjects, err)
	}
	if _, err := js.Stream(t.Context(), "CHAT"); err == nil {
		t.Fatal("the tenant's proxy made the deployment's own CHAT")
	}
}

// compactor tenants lists every tenant of the file with its figures beside its quotas,
// and names a tenant whose streams are not there (exit 1).
func TestTenantsCommand(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {"quotas": {"stored_bytes": 1048576, "conversations": 10}}, "globex": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TENANTS_FILE", file)
	t.Setenv("COMPACTOR_TENANT", "acme")
	if _, errOut, err := cli(t, "", "provision"); err != nil {
		t.Fatalf("provision acme: %v\n%s", err, errOut)
	}
	msgs, _ := fakellm.NeedleConversation(2)
	for _, conv := range []string{"c1", "c2"} {
		if _, errOut, err := cli(t, jsonl(msgs), "publish", conv); err != nil {
			t.Fatalf("publish: %v\n%s", err, errOut)
		}
	}
	t.Setenv("COMPACTOR_TENANT", "")
	out, _, err := cli(t, "", "tenants", "--json")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "tenant globex") {
		t.Fatalf("tenants with globex not provisioned: %v (exit %d); want exit 1 naming it", err, exitCode(err))
	}
	var rows []tenantRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("tenants --json printed %s: %v", out, err)
	}
	acme, globex := rows[0], rows[1]
	if acme.Tenant != "acme" || acme.Conversations != 2 || acme.StoredBytes == 0 || acme.Quotas.Conversations != 10 || acme.Error != "" {
		t.Errorf("acme: %+v", acme)
	}
	if globex.Tenant != "globex" || !strings.Contains(globex.Error, "not provisioned") {
		t.Errorf("globex: %+v", globex)
	}
	out, _, _ = cli(t, "", "tenants")
	for _, want := range []string{"TENANT", "acme", "1.0 MiB", "globex", "not provisioned"} {
		if !strings.Contains(out, want) {
			t.Errorf("tenants printed no %q:\n%s", want, out)
		}
	}
}
