package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The package rules of the README ("Layout"): each package links only what its job
// needs. The go tool lists what a package links, test files left out.
func TestPackagesLinkOnlyWhatTheirJobNeeds(t *testing.T) {
	const mod = "github.com/compactor/compactor/"
	tests := []struct {
		pkg       string
		forbidden []string // import path prefixes the package must not link
	}{
		{"schemas/...", []string{mod + "jetstream", mod + "triggers", mod + "summarizer", mod + "pipeline", "github.com/nats-io", "github.com/sashabaranov"}},
		{"jetstream", []string{mod + "triggers", mod + "summarizer", mod + "pipeline", "github.com/sashabaranov"}},
		{"triggers", []string{mod + "summarizer", mod + "pipeline", "github.com/sashabaranov", "github.com/nats-io/nats-server"}},
		{"summarizer", []string{mod + "triggers", mod + "pipeline"}},
		{"summarizer/summary", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/llm", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/extractive", []string{"github.com/nats-io", mod + "jetstream"}},
		{"summarizer/evidence", []string{"github.com/nats-io", mod + "jetstream", "github.com/sashabaranov"}},
		{"pipeline/...", []string{mod + "triggers", mod + "summarizer", "github.com/sashabaranov", "github.com/nats-io/nats-server"}},
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
