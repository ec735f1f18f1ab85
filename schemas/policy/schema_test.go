package policy_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// policy.v1.json lists exactly the keys a conversation may set, with their kinds.
func TestSchemaFileMatchesTheKeys(t *testing.T) {
	data, err := schemas.Files.ReadFile("policy.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		AdditionalProperties bool `json:"additionalProperties"`
		Properties           map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.AdditionalProperties {
		t.Fatal("the policy schema allows unknown keys")
	}
	want := []string{"profile", "schema_version"}
	for _, k := range policy.Keys {
		if k.Scope != policy.Conversation {
			if _, ok := s.Properties[k.Name]; ok {
				t.Errorf("operator key %s is allowed by the schema", k.Name)
			}
			continue
		}
		want = append(want, k.Name)
		typ := map[policy.Kind]string{policy.Int: "integer", policy.Float: "number", policy.String: "string", policy.Duration: "string"}[k.Kind]
		if got := s.Properties[k.Name].Type; got != typ {
			t.Errorf("%s has type %q in the schema; want %q", k.Name, got, typ)
		}
	}
	var got []string
	for k := range s.Properties {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("schema keys %v; want %v", got, want)
	}
}
