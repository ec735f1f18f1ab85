package systemtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// serveTenantRole runs compactor serve's role for the tenants of file as that user of
// tenants.conf (its own connection, as the process would) with llm as the summarizer
// and the trigger partitions of base (the layout the admin provisioned) until the test
// ends, and returns its log.
func serveTenantRole(t *testing.T, r *rolestest.Running, role, file string, llm *fakellm.LLM, base ...jetstream.Config) *proctest.LogBuffer {
	t.Helper()
	js := jetstream.DefaultConfig()
	if len(base) > 0 {
		js = base[0]
	}
	return serveTenantEnv(t, r, tenantRoleEnv(t, role, llm, js, nil), js, file)
}

// tenantRoleEnv is the settings of serve's role with llm as the summarizer, js's
// trigger partitions, and vars (with the LLM's key) as the environment Lookup reads.
func tenantRoleEnv(t *testing.T, role string, llm *fakellm.LLM, js jetstream.Config, vars map[string]string) stackEnv {
	t.Helper()
	env := testEnv(t, 8000)
	env.Roles = role
	env.TriggerPartitions, env.TriggerHeartbeat = js.TriggerPartitions, js.TriggerHeartbeat
	env.Policy["llm_base_url"] = llm.URL()
	env.Lookup = func(k string) (string, bool) {
		if k == "COMPACTOR_LLM_API_KEY" {
			return "test-key", true
		}
		v, ok := vars[k]
		return v, ok
	}
	return env
}

// serveTenantEnv runs compactor serve with env for the tenants of file as the user of
// tenants.conf its role names, until the test ends, and returns its log.
func serveTenantEnv(t *testing.T, r *rolestest.Running, env stackEnv, js jetstream.Config, file string) *proctest.LogBuffer {
	t.Helper()
	log := &proctest.LogBuffer{}
	cfg, err := env.Config(zerolog.New(log).Level(zerolog.WarnLevel), telemetry.Telemetry{Metrics: telemetry.NewMetrics("test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(ctx, node.ServeConfig{
			Node: cfg, NATSURL: r.URL, NATSOptions: []nats.Option{r.Auth(env.Roles).Option()},
			JetStream: js, DrainTimeout: 30 * time.Second,
			Tenants: &node.TenantsSource{Path: file, Every: 100 * time.Millisecond},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve as %s: %v", env.Roles, err)
		}
	})
	return log
}

// tenantClient is a client of c's tenant in service mode, as a tenant's services run
// it (compactor with COMPACTOR_VIA_SERVICE).
func tenantClient(t *testing.T, c *rolestest.Conn) *pipeline.Client {
	t.Helper()
	cl, err := pipeline.New(ctxFor(t, 10*time.Second), c.NC, pipeline.ViaService())
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// compactor serve runs its trigger, worker and api as the users of tenants.conf for
// the tenants acme and globex. acme's producer, in service mode, publishes a
// conversation, and acme's tenant service answers its context (compacted) through the
// import of compactor.context; globex's producer, with the same conversation id, reads
// globex's conversation only, and globex's users cannot reach acme's service. acme's
// reader reads but cannot publish; the workers count acme's summarizer tokens (its
// quota); acme's producer asks for a compaction and waits for it; acme's
// producer forgets its conversation, and globex's stays. No role logs a refusal.
func TestTenantServiceAnswersItsTenant(t *testing.T) {
	f := startTenants(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {
		"acme": {"quotas": {"conversations": 1000, "summarizer_tokens_per_day": 100000000}},
		"globex": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := map[string]*proctest.LogBuffer{}
	llm := fakellm.New(t)
	for _, role := range []string{"api", "trigger", "worker"} {
		logs[role] = serveTenantRole(t, f.r, role, file, llm)
	}
	ctx := ctxFor(t, 3*time.Minute)
	const conv = "shared-id"
	acme := tenantClient(t, f.r.Connect("acme-producer"))
	msgs, needles := fakellm.NeedleConversation(20)
	eventually(t, time.Minute, "acme's service", func() bool {
		_, err := acme.Exists(ctx, conv)
		return err == nil
	})
	for i, m := range msgs {
		if _, err := acme.Publish(ctx, conv, m); err != nil {
			t.Fatalf("publish %d as acme-producer in service mode: %v", i, err)
		}
	}
	globexProducer := f.r.Connect("globex-producer")
	globex := tenantClient(t, globexProducer)
	if _, err := globex.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("globex only")}); err != nil {
		t.Fatalf("publish as globex-producer: %v", err)
	}
	eventually(t, time.Minute, "acme's context compacted, through acme's service", func() bool {
		cx, err := acme.Context(ctx, conv)
		return err == nil && cx.HasSummary && cx.Generation >= 1
	})
	reader := tenantClient(t, f.r.Connect("acme-reader"))
	if cx, err := reader.Context(ctx, conv); err != nil || !cx.HasSummary {
		t.Fatalf("acme-reader's context: %+v, %v", cx, err)
	}
	if _, err := reader.Publish(ctx, conv, msgs[1]); !errors.Is(err, jetstream.ErrPermission) {
		t.Fatalf("acme-reader publishes: %v; want a permission error", err)
	}
	cx, err := globex.Context(ctx, conv)
	if err != nil || cx.HasSummary || len(cx.Messages) != 1 || cx.Messages[0].Content.String() != "globex only" {
		t.Fatalf("globex's context of %s: %+v, %v; want its one message", conv, cx, err)
	}
	for _, u := range rolestest.TenantUsers("globex") {
		c := f.r.Connect(u)
		for _, op := range []string{"context", "status", "recall", "forget", "compact"} {
			refusedRequest(t, c, "compactor.acme."+op, []byte(`{"conversation":"`+conv+`"}`))
		}
	}
	acmeStore := openTenant(t, f, "acme")
	eventually(t, time.Minute, "acme's summarizer tokens counted by the worker (or a refusal logged)", func() bool {
		n, _, err := acmeStore.TokensUsed(ctx, time.Now())
		return err == nil && n > 0 || strings.Contains(strings.ToLower(logs["worker"].String()), "permission")
	})
	// A compaction asked for through the service, which waits for its outcome (the
	// api's ordered consumer on COMPACT_EVENTS_acme).
	eventually(t, time.Minute, "acme's manual compaction's outcome", func() bool {
		r, err := acme.Compact(ctx, conv, pipeline.Wait(10*time.Second))
		return err == nil && (r.Status == "completed" || r.Status == "declined")
	})
	if r, err := acme.Forget(ctx, conv); err != nil || r.ThroughSeq == 0 {
		t.Fatalf("acme-producer forgets %s: %+v, %v", conv, r, err)
	}
	if rc, err := globex.Recall(ctx, conv); err != nil || len(rc.Messages) != 1 {
		t.Fatalf("globex's %s after acme's forget: %+v, %v; want its one message", conv, rc, err)
	}
	for role, log := range logs {
		if l := log.String(); strings.Contains(strings.ToLower(l), "permission") || strings.Contains(l, needles[0]) {
			t.Errorf("%s's log:\n%s", role, l)
		}
	}
}

// A tenant added while everything runs, without restarting anything: its account
// (tenants.conf's acme block renamed, two reloads), its entry in the tenants file that
// serve reads again, its streams created by the admin after that. The serve processes
// of every role serve it once its streams are there: initech's producer publishes and
// reads its context through initech's service, while acme's client, on the same
// connection throughout, keeps being served.
func TestTenantAddedWhileServing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.conf")
	storeDir := t.TempDir()
	reloadableConf(t, path, storeDir)
	r := rolestest.Start(t, path, rolestest.TenantsConfUsers(), func(o *server.Options) { o.StoreDir = storeDir })
	f := provisionTenants(t, r)
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, "acme", "globex")
	llm := fakellm.New(t)
	for _, role := range []string{"api", "trigger", "worker"} {
		serveTenantRole(t, r, role, file, llm)
	}
	ctx := ctxFor(t, 3*time.Minute)
	acmeConn := r.Connect("acme-producer")
	acme := tenantClient(t, acmeConn)
	served := func(cl *pipeline.Client, what string) {
		t.Helper()
		eventually(t, time.Minute, what+"'s service", func() bool {
			_, err := cl.Exists(ctx, "c1")
			return err == nil
		})
		seq, err := cl.Publish(ctx, "c1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(what + " speaks")})
		if err != nil {
			t.Fatalf("%s publishes: %v", what, err)
		}
		eventually(t, time.Minute, what+"'s context through its service", func() bool {
			cx, err := cl.Context(ctx, "c1")
			return err == nil && len(cx.Seqs) > 0 && cx.Seqs[len(cx.Seqs)-1] == seq
		})
	}
	served(acme, "acme")

	withInitech := "  # Another tenant"
	reloadableConf(t, path, storeDir, withInitech, initechBlock(t)+withInitech)
	r.SetPasswords(rolestest.TenantUsers("initech")...)
	for i := range 2 { // see TestTenantAddedAndRemovedByReload
		if err := r.NS.Reload(); err != nil {
			t.Fatalf("reload %d with initech: %v", i+1, err)
		}
	}
	writeTenantsFile(t, file, "acme", "globex", "initech")
	f.provision(t, ctx, "initech")
	served(tenantClient(t, r.Connect("initech-producer")), "initech")
	served(acme, "acme")
	if n := acmeConn.Disconnects(); n != 0 {
		t.Fatalf("acme-producer was disconnected %d times", n)
	}
}

// writeTenantsFile replaces the tenants file at path with one naming tenants (no
// settings), at once, as a ConfigMap changes.
func writeTenantsFile(t *testing.T, path string, tenants ...string) {
	t.Helper()
	var parts []string
	for _, tn := range tenants {
		parts = append(parts, `"`+tn+`": {}`)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(`{"tenants": {`+strings.Join(parts, ", ")+`}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// The trigger of tenants.conf runs partitioned (3 partitions, which the file does not
// name) for every tenant: acme's conversations, published in service mode, are
// compacted, and no role logs a refusal.
func TestTenantPartitionedTrigger(t *testing.T) {
	r := rolestest.TenantsServer(t)
	f := &tenantFixture{r: r, admin: r.Connect("admin"), cfgs: map[string]jetstream.Config{}}
	base := jetstream.DefaultConfig()
	base.TriggerPartitions, base.TriggerHeartbeat = 3, 200*time.Millisecond
	ctx := ctxFor(t, 3*time.Minute)
	for _, tn := range rolestest.Tenants {
		cfg, err := base.ForTenant(tn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jetstream.Provision(ctx, f.admin.NC, cfg); err != nil {
			t.Fatalf("provision %s's partitioned layout as admin: %v", tn, err)
		}
	}
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, rolestest.Tenants...)
	llm := fakellm.New(t)
	logs := map[string]*proctest.LogBuffer{}
	for _, role := range []string{"api", "trigger", "worker"} {
		logs[role] = serveTenantRole(t, r, role, file, llm, base)
	}
	acme := tenantClient(t, r.Connect("acme-producer"))
	msgs, _ := fakellm.NeedleConversation(20)
	convs := []string{"p0", "p1", "p2", "p3"}
	for _, conv := range convs {
		for i, m := range msgs {
			if _, err := acme.Publish(ctx, conv, m); err != nil {
				t.Fatalf("publish %d of %s as acme-producer: %v", i, conv, err)
			}
		}
	}
	for _, conv := range convs {
		eventually(t, time.Minute, "a compaction of acme's "+conv+" (or a refusal logged)", func() bool {
			cx, err := acme.Context(ctx, conv)
			return err == nil && cx.HasSummary || strings.Contains(strings.ToLower(logs["trigger"].String()), "permission")
		})
	}
	acked := 0
	for p := range 3 {
		name := fmt.Sprintf("compactor-trigger-3-%d", p)
		cons, err := jsFor(t, f.admin.NC).Consumer(ctx, "CHAT_acme", name)
		if err != nil {
			t.Fatalf("consumer %s of CHAT_acme: %v", name, err)
		}
		if cons.CachedInfo().AckFloor.Consumer > 0 {
			acked++
		}
	}
	if acked == 0 {
		t.Error("none of CHAT_acme's 3 partition consumers acknowledged a message")
	}
	for role, log := range logs {
		if l := log.String(); strings.Contains(strings.ToLower(l), "permission") {
			t.Errorf("%s's log:\n%s", role, l)
		}
	}
}

// The proxy user of tenants.conf runs a proxy of one tenant (compactor proxy with
// COMPACTOR_TENANT=acme, in Compactor's account), with serve's roles for the tenants
// running as their users: everything the proxy does with the Go client (publish,
// objects, context, pending request, outcomes, a compaction asked of acme's service,
// policies) is refused nothing.
func TestTenantProxyOfOneTenant(t *testing.T) {
	f := startTenants(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, rolestest.Tenants...)
	llm := fakellm.New(t)
	for _, role := range []string{"api", "trigger", "worker"} {
		serveTenantRole(t, f.r, role, file, llm)
	}
	ctx := ctxFor(t, 3*time.Minute)
	proxy := f.r.Connect("proxy")
	st, err := jetstream.Provision(ctx, proxy.NC, f.cfgs["acme"])
	if err != nil {
		t.Fatalf("provision acme's layout as proxy after the admin: %v", err)
	}
	if _, err := st.RecordPolicy(ctx, []string{"proxy"}, map[string]string{"context_window": "8000"}); err != nil {
		t.Fatalf("record the proxy's policy defaults: %v", err)
	}
	res, err := testEnv(t, 8000).resolver()
	if err != nil {
		t.Fatal(err)
	}
	policies := node.NewPolicySource(st, res)
	pctx, stopPolicies := context.WithCancel(ctx)
	policiesDone := make(chan error, 1)
	go func() { policiesDone <- policies.Run(pctx) }()
	t.Cleanup(func() { stopPolicies(); <-policiesDone })
	reader := tenantClient(t, f.r.Connect("acme-reader"))
	eventually(t, time.Minute, "acme's service", func() bool {
		_, err := reader.Exists(ctx, "c1")
		return err == nil
	})
	proxyDoes(t, ctx, f.admin, proxy, pipeline.NewWithStore(proxy.NC, st), policies, st, "proxy-acme")
}
