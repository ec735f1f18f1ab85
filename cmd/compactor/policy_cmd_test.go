package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// Crack 12: `compactor policy` asks the running service, which applies the policy with
// its own tiers: the CLI's environment and profile file do not matter.
func TestPolicyCommandAsksTheService(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_LISTEN", freeAddr(t))
	t.Setenv("COMPACTOR_DATA_DIR", filepath.Join(t.TempDir(), "data"))
	t.Setenv("COMPACTOR_CONTEXT_WINDOW", "8000")
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, nil, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}}, os.LookupEnv)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	serveAnswers(t)
	// The CLI's own configuration disagrees with the server's.
	t.Setenv("COMPACTOR_CONTEXT_WINDOW", "128000")
	profiles := filepath.Join(t.TempDir(), "profiles.json")
	if err := os.WriteFile(profiles, []byte(`{"profiles":{"coding":{"threshold":0.6}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_CONFIG", profiles)

	out, _, err := cli(t, "", "policy", "get", "c1", "--json")
	if err != nil {
		t.Fatalf("policy get: %v", err)
	}
	var got schemas.PolicyResponse
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("policy get printed %q: %v", out, err)
	}
	if w := fmt.Sprint(got.Settings["context_window"]); w != "8000" {
		t.Fatalf("policy get shows context_window %s; want the server's 8000", w)
	}
	_, _, err = cli(t, "", "policy", "set", "c1", "profile=coding")
	if err == nil || !strings.Contains(err.Error(), `profile "coding" does not exist`) {
		t.Fatalf("policy set of a profile only the CLI knows: %v; want the server's refusal", err)
	}
	out, _, err = cli(t, "", "policy", "set", "c1", "threshold=0.7", "--json")
	if err != nil || !strings.Contains(out, `"threshold"`) {
		t.Fatalf("policy set threshold: %q, %v", out, err)
	}
}
