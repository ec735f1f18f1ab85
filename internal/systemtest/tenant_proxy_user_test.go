package systemtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
)

// Each tenant has a proxy user of its own in tenants.conf: acme-proxy runs acme's
// proxy (everything the proxy does with the Go client is refused nothing) and reads
// and writes nothing of globex: its chat, streams, buckets, objects, events, policy
// records and service are all refused it.
func TestTenantProxyUserReachesItsTenantOnly(t *testing.T) {
	f := startTenants(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenantsFile(t, file, rolestest.Tenants...)
	llm := fakellm.New(t)
	for _, role := range []string{"api", "trigger", "worker"} {
		serveTenantRole(t, f.r, role, file, llm)
	}
	ctx := ctxFor(t, 3*time.Minute)
	proxy := f.r.Connect("acme-proxy")
	st, err := jetstream.Provision(ctx, proxy.NC, f.cfgs["acme"])
	if err != nil {
		t.Fatalf("provision acme's layout as acme-proxy after the admin: %v", err)
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

	other := f.r.Connect("acme-proxy")
	for subject, body := range map[string]string{
		"chat.globex.c1.msg":                                               `{"role":"user","content":"x"}`,
		"$JS.API.STREAM.INFO.CHAT_globex":                                  ``,
		"$JS.API.DIRECT.GET.CHAT_globex":                                   `{"last_by_subj":"chat.globex.c1.msg"}`,
		"$JS.API.DIRECT.GET.KV_compaction_globex.$KV.compaction_globex.c1": ``,
		"$JS.API.STREAM.MSG.GET.CHAT_globex":                               `{"last_by_subj":"chat.globex.c1.msg"}`,
		"$JS.API.CONSUMER.CREATE.COMPACT_EVENTS_globex":                    `{"stream_name":"COMPACT_EVENTS_globex","config":{"ack_policy":"none"}}`,
		"$JS.API.CONSUMER.INFO.CHAT_globex.compactor-trigger":              ``,
		"$O.compaction-objects_globex.M.x":                                 `{}`,
		"$KV.compaction-deployment_globex.policy.proxy":                    `{}`,
		"compactor.globex.compact":                                         `{"conversation":"c1"}`,
		"compactor.globex.context":                                         `{"conversation":"c1"}`,
	} {
		refusedRequest(t, other, subject, []byte(body))
	}
	for _, subject := range []string{"compact.event.globex.c1", "$KV.compaction-policy_globex.c1", "_INBOX_globex-proxy.x"} {
		refusedSubscribe(t, other, subject)
	}
}
