package systemtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
)

// tenantCLI runs the compactor binary with args as user of r, with its inbox prefix,
// stdin as its input, and returns its stdout and stderr.
func tenantCLI(t *testing.T, bin string, r *rolestest.Running, user, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := r.Auth(user)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "COMPACTOR_NATS_URL="+r.URL, "COMPACTOR_NATS_USER="+a.User,
		"COMPACTOR_NATS_PASSWORD="+a.Password, "COMPACTOR_NATS_INBOX_PREFIX="+a.InboxPrefix)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// The compactor command run as tenants' users of tenants.conf (each with its inbox
// prefix) publishes, reads, compacts and forgets its tenant's conversations through
// the imports, finding by itself that it must go through the service; the same
// conversation id in acme and globex is two conversations.
func TestTenantCommandsAsTenantUsers(t *testing.T) {
	bin := proctest.Compactor(t)
	f := startTenants(t)
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {}, "globex": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	llm := fakellm.New(t)
	for _, role := range []string{"api", "trigger", "worker"} {
		serveTenantRole(t, f.r, role, file, llm)
	}
	const conv = "cli-conv"
	msgs, _ := fakellm.NeedleConversation(20)
	var in strings.Builder
	for _, m := range msgs {
		b, _ := m.Encode()
		in.Write(b)
		in.WriteByte('\n')
	}
	run := func(user, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := tenantCLI(t, bin, f.r, user, stdin, args...)
		if err != nil {
			t.Fatalf("compactor %v as %s: %v\nstdout %q\nstderr %q", args, user, err, out, errOut)
		}
		return out
	}
	eventually(t, time.Minute, "acme's service to answer (conversation not found)", func() bool {
		_, errOut, err := tenantCLI(t, bin, f.r, "acme-reader", "", "status", conv)
		return err != nil && strings.Contains(errOut, "conversation "+conv+" not found")
	})
	if out := run("acme-producer", in.String(), "publish", conv); len(strings.Fields(out)) != len(msgs) {
		t.Fatalf("publish as acme-producer printed %q; want %d sequences", out, len(msgs))
	}
	run("globex-producer", `{"role":"user","content":"globex only"}`+"\n", "publish", conv)
	// The trigger compacts it too: the request waited for completes, or is declined
	// when the trigger's compaction left too little to gain.
	if out := run("acme-producer", "", "compact", conv, "--wait", "30s"); !strings.HasPrefix(out, "completed: generation") &&
		!strings.HasPrefix(out, "declined: ") {
		t.Fatalf("compact as acme-producer: %q", out)
	}
	var cx string
	eventually(t, time.Minute, "acme's context with a summary, as acme-reader", func() bool {
		cx = run("acme-reader", "", "context", conv, "--json")
		return strings.Contains(cx, `"has_summary": true`)
	})
	if strings.Contains(cx, "globex only") {
		t.Fatalf("acme's context as acme-reader has globex's message: %s", cx)
	}
	if out := run("globex-reader", "", "context", conv); !strings.Contains(out, "globex only") || strings.Contains(out, "NEEDLE") {
		t.Fatalf("globex's context as globex-reader: %s", out)
	}
	if out, errOut, err := tenantCLI(t, bin, f.r, "acme-reader", "", "forget", conv); err == nil {
		t.Fatalf("forget as acme-reader: %q %q; want a refusal", out, errOut)
	}
	if out := run("acme-producer", "", "forget", conv); !strings.Contains(out, "through seq") {
		t.Fatalf("forget as acme-producer: %q", out)
	}
	if out := run("globex-reader", "", "context", conv); !strings.Contains(out, "globex only") {
		t.Fatalf("globex's context after acme's forget: %s", out)
	}
}
