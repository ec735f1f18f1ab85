package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package rules of docs/design.md ("Which package may use which"): each package
// links only what its job needs. The go tool lists what a package links, test files left out.
func TestPackagesLinkOnlyWhatTheirJobNeeds(t *testing.T) {
	const mod = "github.com/compactor/compactor/"
	tests := []struct {
		pkg       string
		forbidden []string // import path prefixes the package must not link
	}{
		{"schemas/...", []string{mod + "internal", mod + "jetstream", mod + "triggers", mod + "summarizer", mod + "pipeline", "github.com/nats-io", "github.com/sashabaranov"}},
		{"jetstream/...", []string{mod + "internal", mod + "triggers", mod + "summarizer", mod + "pipeline", "github.com/sashabaranov"}},
		{"triggers", []string{mod + "internal", mod + "summarizer", mod + "pipeline", "github.com/sashabaranov", "github.com/nats-io/nats-server"}},
		{"summarizer/...", []string{mod + "internal", mod + "triggers", mod + "pipeline"}},
		{"summarizer/summary", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/llm", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/extractive", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/evidence", []string{"github.com/nats-io", mod + "jetstream", "github.com/sashabaranov"}},
		{"pipeline/...", []string{mod + "internal", mod + "triggers", mod + "summarizer", "github.com/sashabaranov", "github.com/nats-io/nats-server"}},
		// The connection layer knows nothing of the roles; telemetry observes them but
		// does not assemble them.
		{"internal/natsconn", []string{mod + "internal/node", mod + "internal/telemetry", mod + "triggers", mod + "summarizer", mod + "pipeline"}},
		{"internal/telemetry", []string{mod + "internal/node", mod + "pipeline"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", mod+tt.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list %s: %v\n%s", tt.pkg, err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, f := range tt.forbidden {
					if strings.HasPrefix(dep, f) {
						t.Errorf("%s links %s", tt.pkg, dep)
					}
				}
			}
		})
	}
}

// sourcesCalling lists the module's non-test Go files, outside the packages skip
// accepts, that contain any of calls.
func sourcesCalling(t *testing.T, skip func(dir string) bool, calls ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}`, "github.com/compactor/compactor/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || skip(filepath.ToSlash(fields[0])) {
			continue
		}
		for _, f := range fields[1:] {
			src, err := os.ReadFile(filepath.Join(fields[0], f))
			if err != nil {
				t.Fatal(err)
			}
			for _, call := range calls {
				if strings.Contains(string(src), call) {
					found = append(found, filepath.Join(fields[0], f)+": "+call)
				}
			}
		}
	}
	return found
}

// Only the command line reads the environment: every other package takes its settings
// as values (test tooling aside: internal/corpustest reads where the test corpus is,
// internal/proctest reads CI and hands its test's environment to the processes it
// starts).
func TestOnlyTheCommandLineReadsTheEnvironment(t *testing.T) {
	for _, f := range sourcesCalling(t, func(dir string) bool {
		return strings.HasSuffix(dir, "/cmd/compactor") || strings.HasSuffix(dir, "/internal/corpustest") ||
			strings.HasSuffix(dir, "/internal/proctest")
	}, "os.Getenv(", "os.LookupEnv(", "os.Environ(") {
		t.Errorf("%s: only the command line reads the environment", f)
	}
}

// The roles are wired in one place, internal/node: serve, bench and eval build their
// nodes with it (and so do the system tests' harnesses), so no copy of the wiring can
// drift from serve's. Test files are not scanned: a unit test may build one role alone.
func TestOnlyTheNodeWiresTheRoles(t *testing.T) {
	for _, f := range sourcesCalling(t, func(dir string) bool { return strings.HasSuffix(dir, "/internal/node") },
		"triggers.New(", "triggers.NewPartitions(", "summarizer.NewPool(", "service.New(") {
		t.Errorf("%s: only internal/node wires the roles", f)
	}
}
