package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/corpustest"
)

// `compactor bench --json` prints one JSON object on stdout and its progress on stderr;
// a measurement it does not know is a usage error.
func TestBenchCommand(t *testing.T) {
	dir := corpustest.Dir()
	if dir == "" {
		corpustest.Load(t) // skips, or fails in CI
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	err := run(ctx, []string{"bench", "--quick", "--json", "--only", "tokens", "--corpus", dir},
		stdio{in: strings.NewReader(""), out: &out, err: &errOut}, os.LookupEnv)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, errOut.String())
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out.String()), &obj); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if r, ok := obj["token_reduction_1000"].(float64); !ok || r <= 1 {
		t.Errorf("token_reduction_1000 = %v; want a reduction > 1", obj["token_reduction_1000"])
	}
	if !strings.Contains(errOut.String(), "token economics") {
		t.Errorf("no progress on stderr:\n%s", errOut.String())
	}

	err = run(ctx, []string{"bench", "--only", "everything"}, stdio{in: strings.NewReader(""), out: &out, err: &errOut}, os.LookupEnv)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "everything") {
		t.Errorf("bench --only everything: %v; want a usage error naming it", err)
	}
}
