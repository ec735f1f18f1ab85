package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline/service"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// startTenant runs tenant t's service on url over t's own store, and returns the store.
func startTenant(t *testing.T, url, tenant string) *jetstream.Store {
	t.Helper()
	nc := jstest.ConnTo(t, url)
	cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	st, err := jetstream.Provision(svcCtx(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	scfg := service.DefaultConfig()
	scfg.Tenant = tenant
	svc, err := service.New(scfg, nc, st, kvPolicies{st: st, r: r}, r.Resolve, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("tenant %s: Run returned %v", tenant, err)
		}
	})
	return st
}

// Each tenant's service answers on compactor.<tenant>.<endpoint> from that tenant's
// store only: the same conversation id is two conversations, a listing names only the
// tenant's own, and the deployment's own subjects are not answered by a tenant's.
func TestTenantServicesAnswerForTheirTenantOnly(t *testing.T) {
	url := jstest.Server(t).ClientURL()
	acme, globex := startTenant(t, url, "acme"), startTenant(t, url, "globex")
	for i, st := range []*jetstream.Store{acme, globex} {
		for range 2 * (i + 1) {
			if _, err := st.Chat().Publish(svcCtx(t), "c1", []byte(`{"role":"user","content":"hi"}`), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := globex.Chat().Publish(svcCtx(t), "globex-only", []byte(`{"role":"user","content":"x"}`), ""); err != nil {
		t.Fatal(err)
	}
	client := jstest.ConnTo(t, url)
	waitAnswer(t, client, "compactor.acme.status")
	waitAnswer(t, client, "compactor.globex.status")
	for tenant, want := range map[string]uint64{"acme": 2, "globex": 4} {
		var out schemas.ContextResponse
		svcCall(t, client, "compactor."+tenant+".context", `{"conversation":"c1"}`, &out)
		if out.Conversation != "c1" || out.LastSeq != want {
			t.Errorf("%s: context of c1 %+v, want last seq %d", tenant, out, want)
		}
	}
	var status jetstream.Status
	svcCall(t, client, "compactor.acme.status", `{}`, &status)
	if len(status.Streams) == 0 {
		t.Fatal("acme's status names no stream")
	}
	for _, ss := range status.Streams {
		if !strings.HasSuffix(ss.Name, "_acme") || ss.Error != "" {
			t.Errorf("acme's status: stream %+v", ss)
		}
	}
	// The operator's configuration is not the tenant's to read: the endpoints and models
	// the workers learned windows of.
	if _, err := acme.Windows().Learn(svcCtx(t), jetstream.LearnedWindow{Endpoint: "https://llm.operator.example/v1", Model: "big-model",
		Tokens: 8000, RefusedTokens: 9000, LearnedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var op jetstream.Status
	if op = acme.Status(svcCtx(t)); len(op.LearnedWindows) == 0 {
		t.Fatalf("the store's own status shows no learned window: %+v", op)
	}
	var again jetstream.Status
	svcCall(t, client, "compactor.acme.status", `{}`, &again)
	if len(again.LearnedWindows) > 0 || again.LearnedWindowsError != "" || len(again.TriggerMembers) > 0 || len(again.PolicyDisagreements) > 0 {
		t.Errorf("acme's status shows the operator's configuration: %+v", again)
	}
	if _, err := client.Request(schemas.StatusSubject, nil, time.Second); err == nil {
		t.Fatal("compactor.status answered with only tenants' services running")
	}
	if _, err := client.Request("compactor.initech.status", nil, time.Second); err == nil {
		t.Fatal("an unknown tenant's subject answered")
	}
}

// A tenant's service refuses a store that is not its tenant's.
func TestTenantServiceNeedsItsTenantsStore(t *testing.T) {
	url := jstest.Server(t).ClientURL()
	nc := jstest.ConnTo(t, url)
	st := jstest.Provision(t, nc)
	r, err := policy.NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.DefaultConfig()
	cfg.Tenant = "acme"
	if _, err := service.New(cfg, nc, st, kvPolicies{st: st, r: r}, r.Resolve, zerolog.Nop()); !errors.Is(err, service.ErrConfig) {
		t.Fatalf("acme's service over the deployment's store: %v", err)
	}
	cfg.Tenant = "Acme!"
	if _, err := service.New(cfg, nc, st, kvPolicies{st: st, r: r}, r.Resolve, zerolog.Nop()); !errors.Is(err, service.ErrConfig) {
		t.Fatalf("a tenant name that breaks the rule: %v", err)
	}
}

// waitAnswer waits until subj answers (the service has subscribed).
func waitAnswer(t *testing.T, nc *nats.Conn, subj string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := nc.Request(subj, nil, time.Second)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer: %v", subj, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
