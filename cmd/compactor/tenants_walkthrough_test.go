package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/proctest"
)

// tenantsWalkThrough is the reason notRun gives for the walk-through's lines.
const tenantsWalkThrough = "docs/tenants.md's walk-through, run whole by TestTenantsWalkThrough"

// docs/tenants.md's "Try it" runs as written: the nats-server of tenants.conf, the
// example tenants file, provisioning as admin, the three roles as their users, acme's
// service publishing, compacting and reading, and globex's not finding acme's
// conversation. The block runs whole in bash from the repository root, with a free port
// for 4222 and 8222, temporary files for /tmp, and the built compactor first on PATH.
func TestTenantsWalkThrough(t *testing.T) {
	b, err := os.ReadFile("../../docs/tenants.md")
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, bl := range codeBlocks(string(b), "sh") {
		if strings.Contains(bl, "-c deploy/nats/tenants.conf") {
			block = bl
		}
	}
	if block == "" {
		t.Fatal("docs/tenants.md has no walk-through block running tenants.conf: update this test")
	}
	const build = "go build -o /tmp/nats-server github.com/nats-io/nats-server/v2"
	if !strings.Contains(block, build) {
		t.Fatalf("the walk-through does not build nats-server with %q: update this test", build)
	}
	natsServer := proctest.NATSServer(t)
	compactor := proctest.Compactor(t)
	testEnv(t, 128000)
	tmp := t.TempDir()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	monitor := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	script := strings.ReplaceAll(block, build, "true # built by the test")
	script = strings.NewReplacer("/tmp/nats-server", natsServer, "/tmp/compactor-tenants", filepath.Join(tmp, "compactor-tenants"),
		"4222", port, "8222", monitor).Replace(script)
	// The background processes end with the script.
	script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + script
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(compactor)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	logs, _ := os.ReadFile(filepath.Join(tmp, "compactor-tenants.log"))
	if err != nil {
		t.Fatalf("the walk-through failed: %v\n%s\nserve's log:\n%s", err, out, firstLines(string(logs), 40))
	}
	for _, want := range []string{"completed: generation 1", "Summary of the earlier conversation", "globex: no c1 (exit 3)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the walk-through's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(strings.ToLower(string(logs)), "permission") {
		t.Errorf("a role was refused something:\n%s", logs)
	}
	// The server syncs every write (tenants.conf), and the roles read it there.
	if !strings.Contains(string(logs), "the NATS servers sync every write to disk") || strings.Contains(string(logs), "is unknown") {
		t.Errorf("the roles did not read that the server syncs every write:\n%s", firstLines(string(logs), 40))
	}
}
