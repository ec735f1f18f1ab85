package systemtest

import (
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
)

// Compactor's roles of tenants.conf serve every tenant's layout with the grants the file
// gives them: trigger and worker run for acme and globex (one connection per role, as
// one serve process would), the api for acme (its service has no tenant subjects yet, so
// one tenant's runs). Both tenants' producers publish the same conversation id through
// their imports; each tenant's conversation holds its own messages only and is
// compacted; acme's is compacted on request and forgotten through the api, and globex's
// is untouched. No role is refused anything.
func TestTenantRolesServeTheirTenants(t *testing.T) {
	f := startTenants(t)
	ctx := ctxFor(t, 3*time.Minute)
	roles := map[string]*rolestest.Conn{}
	for _, role := range []string{"trigger", "worker", "api"} {
		c := f.r.Connect(role)
		roles[role] = c
		for _, tenant := range rolestest.Tenants {
			if role == "api" && tenant != "acme" {
				continue
			}
			st, err := jetstream.Provision(ctx, c.NC, f.cfgs[tenant])
			if err != nil {
				t.Fatalf("provision %s's layout as %s after the admin: %v", tenant, role, err)
			}
			env := testEnv(t, 8000)
			env.Roles = role
			runStack(t, c.NC, st, env, nil)
		}
	}
	const conv = "shared-id"
	msgs, _ := fakellm.NeedleConversation(20)
	for _, tenant := range rolestest.Tenants {
		p := f.r.Connect(tenant + "-producer")
		for i, m := range msgs {
			if _, err := tenantPublish(ctx, p, conv, m.Content.String(), ""); err != nil {
				t.Fatalf("publish %d as %s-producer: %v", i, tenant, err)
			}
		}
	}
	clients := map[string]*pipeline.Client{}
	for _, tenant := range rolestest.Tenants {
		st := openTenant(t, f, tenant)
		clients[tenant] = pipeline.NewWithStore(f.admin.NC, st)
		es, err := st.Chat().LoadEntries(ctx, conv, 0, 0)
		if err != nil || len(es) != len(msgs) {
			t.Fatalf("%s's %s: %d messages, %v; want its own %d", tenant, conv, len(es), err, len(msgs))
		}
		eventually(t, time.Minute, "a compaction of "+tenant+"'s "+conv, func() bool {
			cx, err := clients[tenant].Context(ctx, conv)
			return err == nil && cx.HasSummary && cx.Generation >= 1
		})
	}
	eventually(t, time.Minute, "acme's manual compaction's outcome", func() bool {
		r, err := clients["acme"].Compact(ctx, conv, pipeline.Wait(10*time.Second))
		return err == nil && (r.Status == "completed" || r.Status == "declined")
	})
	if r, err := clients["acme"].Forget(ctx, conv); err != nil || r.ThroughSeq == 0 {
		t.Fatalf("forget acme's %s through the api: %+v, %v", conv, r, err)
	}
	if es, err := openTenant(t, f, "acme").Chat().LoadEntries(ctx, conv, 0, 0); err != nil || len(es) != 0 {
		t.Fatalf("acme's %s after its forget: %d messages, %v; want none", conv, len(es), err)
	}
	if es, err := openTenant(t, f, "globex").Chat().LoadEntries(ctx, conv, 0, 0); err != nil || len(es) != len(msgs) {
		t.Fatalf("globex's %s after acme's forget: %d messages, %v; want its %d", conv, len(es), err, len(msgs))
	}
	for role, c := range roles {
		if v := c.Violations(); v != "" {
			t.Errorf("%s was refused:\n%s", role, v)
		}
	}
}
