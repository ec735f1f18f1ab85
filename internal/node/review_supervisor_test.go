package node_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
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
	writeFile(t, file, `{"tenants": {"acme": {"quotas": {"stored_bytes": 1000000}}}}`)
	waitFor(ctx, t, "the changed quota seen (max_bytes named in the log)", func() bool { return logs.has("max_bytes") })
	if logs.has("tenant's roles stopped") {
		t.Fatal("acme's stored_bytes quota changed in the file: its roles stopped (its service no longer answers) until its streams are updated")
	}
	// The changed tenant's roles restart (a moment without a responder); they must
	// serve again on their own, not wait for an admin to update the streams.
	waitFor(ctx, t, "acme's service after its stored_bytes quota changed", func() bool { return answers(nc, "compactor.acme.status") })
}

// Review of issue 21: apply stops a changed tenant and waits for its roles to drain
// while it holds the tenant set, before it looks at any other tenant. A compaction of
// acme's in flight at its endpoint (a slow LLM) holds the drain, so a tenant added in
// the same change of the file (globex) is not started until acme's call ends: one
// tenant's slow endpoint delays every other tenant's start, stop and restart.
func TestReviewChangedTenantDoesNotHoldUpTheOthers(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	block := make(chan struct{})
	llm.Set(func(f *fakellm.LLM) { f.Block = block })
	defer llm.Release(false)
	file := filepath.Join(t.TempDir(), "tenants.json")
	write := func(body string) {
		writeFile(t, file, body)
	}
	acme := fmt.Sprintf(`"acme": {"policy": {"llm_base_url": %q}, "quotas": {"conversations": %%d}}`, llm.URL()+"/v1")
	write(`{"tenants": {` + fmt.Sprintf(acme, 100) + `}}`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, stop := serveTenants(ctx, t, srv.ClientURL(), file, &logLines{t: t}, nil)
	defer func() {
		llm.Release(false)
		_ = stop()
	}()
	st := tenantStore(ctx, t, nc, "acme")
	cl := pipeline.NewWithStore(nc, st)
	for i := range 40 {
		role := map[bool]schemas.Role{true: schemas.RoleUser, false: schemas.RoleAssistant}[i%2 == 0]
		m := schemas.Message{Role: role, Content: schemas.Text(strings.Repeat(fmt.Sprintf("turn %d says something. ", i), 12))}
		if _, err := cl.Publish(ctx, "c1", m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "acme's compaction at its endpoint", func() bool { return llm.Held() >= 1 })
	write(`{"tenants": {` + fmt.Sprintf(acme, 200) + `, "globex": {}}}`)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	for !answers(nc, "compactor.globex.status") {
		if wctx.Err() != nil {
			t.Fatal("globex, added to the file, is not served 20s later: apply waits for acme's roles (changed) to drain, " +
				"and acme's compaction is held at its endpoint")
		}
	}
}
