package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

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
