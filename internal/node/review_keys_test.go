package node_test

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/schemas/policy"
)

// Review of issue 21: "a tenant's key goes only to its own endpoint", and docs/tenants.md:
// "A tenant without an endpoint of its own uses the deployment's endpoint with the
// deployment's key". A tenant whose settings name a key variable but no endpoint (or
// whose profile points back at the deployment's endpoint) sends its own key to the
// deployment's endpoint: EndpointAndKey's default-endpoint branch takes s.LLMAPIKeyEnv,
// which the tenant's tier set.
func TestReviewTenantKeyStaysOffTheDeploymentEndpoint(t *testing.T) {
	vars := map[string]string{"COMPACTOR_LLM_API_KEY": "deployment-key", "ACME_KEY": "acme-key", "GLOBEX_KEY": "globex-key"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	dep, err := policy.NewResolver(policy.Layer{"llm_base_url": "https://llm.operator.example/v1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := tenants.Parse([]byte(`{"tenants": {
		"acme":   {"policy": {"llm_api_key_env": "ACME_KEY"}},
		"globex": {"policy": {"llm_base_url": "https://globex.example/v1", "llm_api_key_env": "GLOBEX_KEY"},
		           "profiles": {"shared": {"llm_base_url": "https://llm.operator.example/v1"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tenant, profile string }{{"acme", ""}, {"globex", "shared"}} {
		tt := f.Tenants[c.tenant]
		r, err := tt.Resolver(c.tenant, dep)
		if err != nil {
			t.Fatal(err)
		}
		keyEnv, _ := tt.Policy["llm_api_key_env"].(string)
		sums := node.NewSummarizers(node.Config{Resolver: r, Profiles: tt.ProfileFile(), Lookup: lookup, Logger: zerolog.Nop(),
			Tenant: &node.Tenant{Name: c.tenant, Deployment: dep, KeyEnv: keyEnv}}, nil)
		s := r.Base()
		if c.profile != "" {
			if s, err = r.Resolve(policy.Layer{policy.ProfileKey: c.profile}); err != nil {
				t.Fatal(err)
			}
		}
		base, key := sums.EndpointAndKey(s)
		if base == "https://llm.operator.example/v1" && key != "deployment-key" {
			t.Errorf("%s (profile %q): the tenant's key %q goes to the deployment's endpoint %s", c.tenant, c.profile, key, base)
		}
	}
}
