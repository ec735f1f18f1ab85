package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	benchpkg "github.com/compactor/compactor/internal/bench"
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

// `compactor bench --calibrate N --doc FILE` states the quick runs' figures in the doc,
// and `--quick --check FILE` passes when a run agrees with them and, when a figure
// disagrees in a second run too, exits with an error naming it.
func TestBenchCheck(t *testing.T) {
	dir := corpustest.Dir()
	if dir == "" {
		corpustest.Load(t) // skips, or fails in CI
	}
	// A bound for a run that hangs, not a speed check: five quick runs take about a
	// minute on a quiet machine, and a CI run on a busy one took over two.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	bench := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(ctx, append([]string{"bench", "--quick", "--only", "tokens", "--corpus", dir}, args...),
			stdio{in: strings.NewReader(""), out: &out, err: &errOut}, os.LookupEnv)
		return out.String(), err
	}
	if _, err := bench("--calibrate", "2", "--doc", doc); err != nil {
		t.Fatal(err)
	}
	out, err := bench("--check", doc)
	if err != nil || !strings.Contains(out, "| token_reduction_1000 |") {
		t.Fatalf("check of an agreeing run: %v\n%s", err, out)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	// The same doc stating twice the reduction the runs measured.
	re := regexp.MustCompile(`("key": "token_reduction_1000",\s*"value": )([0-9.]+)`)
	m := re.FindSubmatch(data)
	if m == nil {
		t.Fatalf("the doc states no token_reduction_1000 check figure:\n%s", data)
	}
	v, _ := strconv.ParseFloat(string(m[2]), 64)
	if err := os.WriteFile(doc, re.ReplaceAll(data, []byte("${1}"+strconv.FormatFloat(2*v, 'f', -1, 64))), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = bench("--check", doc)
	if !errors.Is(err, benchpkg.ErrCheckFailed) || !strings.Contains(err.Error(), "token_reduction_1000") ||
		!strings.Contains(err.Error(), "in 2 quick runs") || !strings.Contains(out, "| NO |") {
		t.Errorf("check of a disagreeing run: %v\n%s; want a failure in two runs naming token_reduction_1000", err, out)
	}
	if err := run(ctx, []string{"bench", "--check", doc}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}}, os.LookupEnv); err == nil {
		t.Error("--check without --quick: nil error; want a usage error")
	}
}

// The command a document states names no file or server of the machine it ran on.
func TestBenchGenericArgs(t *testing.T) {
	got := genericArgs([]string{"--charts", "docs", "--corpus", "/home/me/corpus", "--nats-server=/usr/bin/nats-server", "--quick", "--nats-url", "nats://h:4222"})
	want := []string{"--charts", "docs", "--corpus", "DIR", "--nats-server=PATH", "--quick", "--nats-url", "URL"}
	if !slices.Equal(got, want) {
		t.Errorf("genericArgs = %q; want %q", got, want)
	}
}
