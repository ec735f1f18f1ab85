package node_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
)

// Review of issue 21: docs/tenants.md says a quota changed later "is a difference the
// processes report, until it is applied with compactor provision --update-streams".
// A changed stored_bytes restarts the tenant's roles, whose provisioning then finds
// CHAT_<tenant>'s max_bytes (and discard policy) different and refuses to start them:
// the tenant's service, trigger and workers are down in every serving process, retried
// once a minute, until an admin updates the streams. Raising a tenant's quota takes the
// tenant offline.
func TestReviewStoredBytesChangeKeepsTheTenantServing(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenants(t, file, "acme")
	logs := &logLines{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, logs, nil)
	defer func() { _ = stop() }()
	waitFor(ctx, t, "acme's service", func() bool { return answers(nc, "compactor.acme.status") })
	if err := os.WriteFile(file+".tmp", []byte(`{"tenants": {"acme": {"quotas": {"stored_bytes": 1000000}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the changed quota seen (max_bytes named in the log)", func() bool { return logs.has("max_bytes") })
	if logs.has("tenant's roles stopped") {
		t.Fatal("acme's stored_bytes quota changed in the file: its roles stopped (its service no longer answers) until its streams are updated")
	}
	if !answers(nc, "compactor.acme.status") {
		t.Fatal("acme's service does not answer after its stored_bytes quota changed")
	}
}
