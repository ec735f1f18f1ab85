package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/triggers"
)

// writeTenants writes a tenants file naming these tenants (no settings) at path.
func writeTenants(t *testing.T, path string, names ...string) {
	t.Helper()
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%q: {}", n))
	}
	writeFile(t, path, `{"tenants": {`+strings.Join(parts, ", ")+`}}`)
}

// writeFile replaces the file at path with body at once, as a ConfigMap's changes.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// publishTurns publishes n turns to conv, alternating user and assistant, each the
// sentence "turn i NEEDLE-i says something." repeat times.
func publishTurns(ctx context.Context, t *testing.T, cl *pipeline.Client, conv string, n, repeat int) {
	t.Helper()
	for i := range n {
		role := map[bool]schemas.Role{true: schemas.RoleUser, false: schemas.RoleAssistant}[i%2 == 0]
		m := schemas.Message{Role: role, Content: schemas.Text(strings.Repeat(fmt.Sprintf("turn %d NEEDLE-%d says something. ", i, i), repeat))}
		if _, err := cl.Publish(ctx, conv, m); err != nil {
			t.Fatal(err)
		}
	}
}

// tenantStore opens tenant's store on nc (after serve provisioned it).
func tenantStore(ctx context.Context, t *testing.T, nc *nats.Conn, tenant string) *jetstream.Store {
	t.Helper()
	cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := jetstream.Open(ctx, nc, cfg)
		if err == nil {
			return st
		}
		if ctx.Err() != nil {
			t.Fatalf("tenant %s's streams: %v", tenant, err)
		}
		time.Sleep(20 * time.Millisecond) // polling an observable: the streams serve provisions
	}
}

// answers reports whether subj is answered (a tenant's service runs).
func answers(nc *nats.Conn, subj string) bool {
	_, err := nc.Request(subj, nil, 2*time.Second)
	return err == nil
}

// Serve with a tenants file runs every role once per tenant on the tenant's own
// streams: a conversation outgrowing its window is compacted in its tenant only, the
// same id in another tenant is another conversation, and a tenant added to or removed
// from the file is started or stopped while the others run on.
func TestServeTenants(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	writeTenants(t, file, "acme", "globex")
	logs := &logLines{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, stop := serveTenants(ctx, t, srv.ClientURL(), file, logs, nil)
	acme, globex := tenantStore(ctx, t, nc, "acme"), tenantStore(ctx, t, nc, "globex")
	cl := pipeline.NewWithStore(nc, acme)
	for i := range 40 {
		role := map[bool]schemas.Role{true: schemas.RoleUser, false: schemas.RoleAssistant}[i%2 == 0]
		m := schemas.Message{Role: role, Content: schemas.Text(strings.Repeat(fmt.Sprintf("turn %d says something. ", i), 12))}
		if _, err := cl.Publish(ctx, "c1", m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pipeline.NewWithStore(nc, globex).Publish(ctx, "c1", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "acme's c1 compacted", func() bool {
		v, _, err := acme.Results().Get(ctx, "c1", false)
		return err == nil && v != nil
	})
	if v, _, err := globex.Results().Get(ctx, "c1", true); err != nil || v != nil {
		t.Fatalf("globex's c1 (one message) has a value %+v (%v): acme's compaction crossed over", v, err)
	}
	waitFor(ctx, t, "globex's service", func() bool { return answers(nc, "compactor.globex.status") })

	writeTenants(t, file, "acme", "initech")
	waitFor(ctx, t, "initech's service to start", func() bool { return answers(nc, "compactor.initech.status") })
	waitFor(ctx, t, "globex's service to stop", func() bool { return !answers(nc, "compactor.globex.status") })
	if !answers(nc, "compactor.acme.status") {
		t.Fatal("acme's service stopped when other tenants changed")
	}
	for series := range tenantSeries(t, m) {
		if !strings.Contains(series, "tenant=acme") && !strings.Contains(series, "tenant=initech") {
			t.Errorf("series %s of a tenant not in the file", series)
		}
	}
	if last, err := globex.Chat().LastSeq(ctx, "c1"); err != nil || last != 1 {
		t.Fatalf("globex's data after its removal: last seq %d, %v; want it kept", last, err)
	}

	if err := os.WriteFile(file, []byte(`{"tenants": {"Not A Tenant": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file that no longer reads keeps the tenants as they were.
	waitFor(ctx, t, "the broken file read", func() bool { return logs.has("the tenants file does not read") })
	if !answers(nc, "compactor.acme.status") || !answers(nc, "compactor.initech.status") {
		t.Fatal("a broken tenants file stopped the running tenants")
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve = %v after its context was done", err)
	}
	if answers(nc, "compactor.acme.status") {
		t.Fatal("acme's service answers after Serve returned")
	}
}

// serveTenants runs Serve with every role for the tenants of file on url until stop,
// which returns what Serve returned.
func serveTenants(ctx context.Context, t *testing.T, url, file string, logs *logLines, lookup func(string) (string, bool)) (m *telemetry.Metrics, stop func() error) {
	t.Helper()
	m = telemetry.NewMetrics("test")
	tcfg := triggers.DefaultConfig()
	tcfg.RetryDelay = 100 * time.Millisecond
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- node.Serve(sctx, node.ServeConfig{
			Node: node.Config{Roles: node.Roles{Trigger: true, Worker: true, API: true}, Resolver: resolver(t, 2000), Lookup: lookup,
				Trigger: tcfg, Summarizer: summarizer.DefaultConfig(), Logger: zerolog.New(logs).Level(zerolog.WarnLevel),
				Telemetry: telemetry.Telemetry{Metrics: m}},
			NATSURL: url, JetStream: jetstream.DefaultConfig(), DrainTimeout: 30 * time.Second,
			Tenants: &node.TenantsSource{Path: file, Every: 50 * time.Millisecond},
		})
	}()
	return m, func() error {
		cancel()
		return <-served
	}
}

// tenantSeries returns the value of every series of m with a tenant label, keyed by
// family and labels ("compactor_tenant_conversations{tenant=acme}").
func tenantSeries(t *testing.T, m *telemetry.Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels []string
			tenant := false
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
				tenant = tenant || l.GetName() == "tenant"
			}
			if !tenant {
				continue
			}
			v := s.GetCounter().GetValue() + s.GetGauge().GetValue()
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}

// A tenants file that does not read stops Serve at once, naming the fault.
func TestServeTenantsRefusesABadFile(t *testing.T) {
	srv := jstest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, body := range map[string]string{
		"a bad name":             `{"tenants": {"Acme": {}}}`,
		"an unknown key":         `{"tenants": {"acme": {"policy": {"no_such_key": 1}}}}`,
		"a negative quota":       `{"tenants": {"acme": {"quotas": {"stored_bytes": -1}}}}`,
		"an unknown field":       `{"tenants": {"acme": {"quota": {}}}}`,
		"a missing default":      `{"tenants": {"acme": {"default_profile": "big"}}}`,
		"a profile naming a key": `{"tenants": {"acme": {"policy": {"profile": "x"}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "tenants.json")
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			err := node.Serve(ctx, node.ServeConfig{
				Node:    node.Config{Roles: node.Roles{API: true}, Resolver: resolver(t, 8000), Logger: zerolog.Nop()},
				NATSURL: srv.ClientURL(), JetStream: jetstream.DefaultConfig(), DrainTimeout: time.Second,
				Tenants: &node.TenantsSource{Path: file},
			})
			if !errors.Is(err, tenants.ErrFile) && !errors.Is(err, policy.ErrPolicy) {
				t.Fatalf("Serve = %v; want the file refused", err)
			}
		})
	}
}

// A tenant's key goes only to the tenant's own endpoint, and the deployment's key only
// to the deployment's endpoint: a tenant with an endpoint of its own and no key variable
// of its own gets no key, never the deployment's.
func TestTenantKeysGoOnlyToTheirEndpoints(t *testing.T) {
	vars := map[string]string{"COMPACTOR_LLM_API_KEY": "deployment-key", "ACME_KEY": "acme-key", "GLOBEX_KEY": "globex-key"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	dep, err := policy.NewResolver(policy.Layer{"llm_base_url": "https://llm.operator.example/v1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := tenants.Parse([]byte(`{"tenants": {
		"acme":   {"policy": {"llm_base_url": "https://acme.example/v1", "llm_api_key_env": "ACME_KEY"},
		           "profiles": {"cheap": {"llm_model": "small"}}},
		"globex": {"policy": {"llm_base_url": "https://globex.example/v1"}},
		"initech": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]struct{ base, key string }{
		"acme":    {"https://acme.example/v1", "acme-key"},
		"globex":  {"https://globex.example/v1", ""}, // its own endpoint, no variable of its own
		"initech": {"https://llm.operator.example/v1", "deployment-key"},
	} {
		tt := f.Tenants[tenant]
		r, err := tt.Resolver(tenant, dep)
		if err != nil {
			t.Fatal(err)
		}
		keyEnv, _ := tt.Policy["llm_api_key_env"].(string)
		sums := node.NewSummarizers(node.Config{Resolver: r, Profiles: tt.ProfileFile(), Lookup: lookup, Logger: zerolog.Nop(),
			Tenant: &node.Tenant{Name: tenant, Deployment: dep, KeyEnv: keyEnv}}, nil)
		base, key := sums.EndpointAndKey(r.Base())
		if base != want.base || key != want.key {
			t.Errorf("%s: endpoint %q key %q; want %q %q", tenant, base, key, want.base, want.key)
		}
	}
	acme, _ := f.Tenants["acme"].Resolver("acme", dep)
	if _, err := acme.Resolve(policy.Layer{policy.ProfileKey: "cheap"}); err != nil {
		t.Fatalf("acme's conversation naming acme's profile: %v", err)
	}
	globex, _ := f.Tenants["globex"].Resolver("globex", dep)
	if _, err := globex.Resolve(policy.Layer{policy.ProfileKey: "cheap"}); err == nil {
		t.Fatal("globex's conversation named acme's profile")
	}
}

// waitFor polls an observable condition until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logLines is a log that a test reads: each line is also the test's log.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// has reports whether a line says s.
func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// A quota run: acme's summarizer tokens per day are spent, so its compaction is declined
// with a reason it reads in the outcome of compactor.compact, and nothing of it is
// lost; globex, on the same workers and LLM, compacts as if acme were not there. Raised
// in the file, the quota lets acme's conversation compact with every message it had.
func TestTenantQuotaDeclinesAndSparesTheOthers(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.ConnTo(t, srv.ClientURL())
	llm := fakellm.New(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	write := func(acmeTokens int) {
		body := fmt.Sprintf(`{"tenants": {
			"acme":   {"policy": {"llm_base_url": %q, "llm_api_key_env": "ACME_KEY"}, "quotas": {"summarizer_tokens_per_day": %d}},
			"globex": {"policy": {"llm_base_url": %q, "llm_api_key_env": "GLOBEX_KEY"}}}}`, llm.URL()+"/v1", acmeTokens, llm.URL()+"/v1")
		writeFile(t, file, body)
	}
	write(100)
	keys := map[string]string{"ACME_KEY": "k-acme", "GLOBEX_KEY": "k-globex"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, stop := serveTenants(ctx, t, srv.ClientURL(), file, &logLines{t: t}, func(k string) (string, bool) { v, ok := keys[k]; return v, ok })
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Serve = %v", err)
		}
	}()
	acme, globex := tenantStore(ctx, t, nc, "acme"), tenantStore(ctx, t, nc, "globex")
	publish := func(st *jetstream.Store, conv string, n, repeat int) {
		publishTurns(ctx, t, pipeline.NewWithStore(nc, st), conv, n, repeat)
	}
	// big outgrows its hard limit; small stays under the trigger's threshold, with more
	// messages than the 20 kept verbatim.
	publish(acme, "big", 40, 10)
	publish(acme, "small", 30, 3)
	publish(globex, "big", 40, 10)
	waitFor(ctx, t, "globex's big compacted", func() bool {
		v, _, err := globex.Results().Get(ctx, "big", false)
		return err == nil && v != nil && v.Generation > 0 && !v.Fallback
	})
	// Over its quota, acme's big keeps its bound with the free fallback, whose repair
	// waits for the quota.
	waitFor(ctx, t, "acme's big on a fallback", func() bool {
		v, _, err := acme.Results().Get(ctx, "big", false)
		return err == nil && v != nil && v.Generation > 0 && v.Fallback
	})
	waitFor(ctx, t, "acme's service", func() bool { return answers(nc, "compactor.acme.status") })
	out, err := compactWait(ctx, nc, "acme", "small")
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != "declined" || !strings.Contains(out.Error, "quota: tenant acme used") || !strings.Contains(out.Error, "100 summarizer tokens") {
		t.Fatalf("acme's compaction over its quota: %+v; want declined naming the quota", out)
	}
	if v, _, err := acme.Results().Get(ctx, "small", true); err != nil || (v != nil && v.Generation > 0) {
		t.Fatalf("acme's small after the decline: %+v, %v; want no compaction", v, err)
	}
	if es, err := acme.Chat().LoadEntries(ctx, "small", 0, 0); err != nil || len(es) != 30 {
		t.Fatalf("acme's messages after the decline: %d, %v; want all 30", len(es), err)
	}
	write(1_000_000)
	var last string // what the last try answered, said when the wait times out
	waitFor(ctx, t, "acme's small compacted under its raised quota (last answer in the log)", func() bool {
		// acme's roles restart with the new quota: an old one may answer stopping, or none.
		out, err := compactWait(ctx, nc, "acme", "small")
		if now := fmt.Sprintf("%+v %v", out, err); now != last {
			t.Logf("compactor.acme.compact: %s", now)
			last = now
		}
		v, _, gerr := acme.Results().Get(ctx, "small", true)
		return err == nil && gerr == nil && v != nil && v.Generation > 0
	})
	waitFor(ctx, t, "acme's big repaired under its raised quota", func() bool {
		v, _, err := acme.Results().Get(ctx, "big", false)
		return err == nil && v != nil && v.Generation > 0 && !v.NeedsRepair()
	})
	used, _, err := acme.TokensUsed(ctx, time.Now())
	if err != nil || used <= 0 {
		t.Fatalf("acme's tokens used today: %d, %v; want its compaction counted", used, err)
	}
	if gused, _, err := globex.TokensUsed(ctx, time.Now()); err != nil || gused <= 0 {
		t.Fatalf("globex (no quota) counted %d tokens (%v); want its spending counted all the same", gused, err)
	}
	series := tenantSeries(t, m)
	for key, check := range map[string]func(float64) bool{
		"compactor_tenant_quota_declines_total{quota=summarizer_tokens_per_day,tenant=acme}":   func(v float64) bool { return v >= 1 },
		"compactor_tenant_quota_declines_total{quota=summarizer_tokens_per_day,tenant=globex}": func(v float64) bool { return v == 0 },
		"compactor_tenant_summarizer_tokens_total{tenant=globex}":                              func(v float64) bool { return v > 0 },
		"compactor_tenant_summarizer_tokens_total{tenant=acme}":                                func(v float64) bool { return v >= float64(used) },
		"compactor_tenant_conversations{tenant=acme}":                                          func(v float64) bool { return v == 2 },
		"compactor_tenant_compactions_total{outcome=declined,tenant=acme}":                     func(v float64) bool { return v >= 1 },
	} {
		if v, ok := series[key]; !ok || !check(v) {
			t.Errorf("%s = %v (present %v)", key, v, ok)
		}
	}
}

// compactWait asks tenant's service for a compaction of conv and waits for its outcome.
func compactWait(ctx context.Context, nc *nats.Conn, tenant, conv string) (schemas.CompactResponse, error) {
	var out schemas.CompactResponse
	m, err := nc.RequestWithContext(ctx, "compactor."+tenant+".compact", fmt.Appendf(nil, `{"conversation":%q,"wait_ms":20000}`, conv))
	if err != nil {
		return out, fmt.Errorf("compactor.%s.compact: %w", tenant, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return out, fmt.Errorf("compactor.%s.compact: error %s: %s", tenant, code, m.Header.Get(micro.ErrorHeader))
	}
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return out, fmt.Errorf("compactor.%s.compact answered %s: %w", tenant, m.Data, err)
	}
	return out, nil
}
