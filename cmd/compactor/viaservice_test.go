package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/jetstream/jstest"
)

// tenantUsers are an admin, who runs the compactor, and a user with exactly a tenant
// producer's permissions: its chat subjects and the service's tenant endpoints, its
// own inbox; nothing of $JS.API.
func tenantUsers(o *server.Options) {
	o.Users = []*server.User{
		{Username: "admin", Password: "admin-pw"},
		{Username: "tenant", Password: "tenant-pw", Permissions: &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{"chat.*.msg", "compactor.context", "compactor.compact",
				"compactor.status", "compactor.recall", "compactor.forget"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_tenant.>"}},
		}},
	}
}

// A tenant's user runs publish, context, recall, compact, status and forget: the
// commands find by themselves that it may not look the streams up and go through the
// service, silently (-v says so in one note on stderr); what they print is what the admin's reads of the
// streams print. COMPACTOR_VIA_SERVICE=true chooses the mode up front, silently. What
// the service does not serve (status without a conversation, --raw) exits 2, naming
// the service mode.
func TestCommandsAsATenantUser(t *testing.T) {
	env := testEnv(t, 6000)
	env.Policy["keep_last_n"] = "4"
	srv := jstest.ServerWith(t, tenantUsers)
	url := "nats://" + jstest.HostPort(srv)
	admin, err := nats.Connect(url, nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	runStack(t, admin, jstest.Provision(t, admin), env, nil)
	t.Setenv("COMPACTOR_NATS_URL", url)
	as := func(user, password string) {
		t.Setenv("COMPACTOR_NATS_USER", user)
		t.Setenv("COMPACTOR_NATS_PASSWORD", password)
		t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", "_INBOX_"+user)
	}
	as("tenant", "tenant-pw")
	const conv = "tenant-conv"
	const note = "goes through the compactor service"
	msgs, _ := fakellm.NeedleConversation(4)
	out, errOut, err := cli(t, jsonl(msgs[:1]), "publish", conv)
	if err != nil || len(strings.Fields(out)) != 1 || strings.Contains(errOut, "STREAM.INFO") || strings.Contains(errOut, "compactor:") {
		t.Fatalf("publish as the tenant: %v\nstdout %q\nstderr %q; want nothing on stderr (the service mode is how a tenant's user works)", err, out, errOut)
	}
	// -v says how the command connects: once, as a note, not as an error.
	out, errOut, err = cli(t, jsonl(msgs[1:]), "publish", conv, "-v")
	if err != nil || len(strings.Fields(out)) != len(msgs)-1 || strings.Count(errOut, note) != 1 || !strings.Contains(errOut, "$JS.API.STREAM.INFO.") ||
		!strings.HasPrefix(errOut, "note: ") || strings.Count(errOut, "note: ") != 1 || strings.Contains(errOut, "compactor:") {
		t.Fatalf("publish -v as the tenant: %v\nstdout %q\nstderr %q; want one line \"note: ...\" naming the refusal", err, out, errOut)
	}
	// The context, before and after a compaction, reads the same both ways.
	sameOutput := func(args ...string) string {
		t.Helper()
		as("admin", "admin-pw")
		want, _, err := cli(t, "", args...)
		if err != nil {
			t.Fatalf("%v as admin: %v", args, err)
		}
		as("tenant", "tenant-pw")
		got, errOut, err := cli(t, "", args...)
		if err != nil || got != want || strings.Contains(errOut, "STREAM.INFO") {
			t.Fatalf("%v as the tenant: %v\ngot  %q\nwant %q\nstderr %q", args, err, got, want, errOut)
		}
		return got
	}
	sameOutput("context", conv)
	if out, errOut, err := cli(t, "", "compact", conv, "--wait", "30s"); err != nil || !strings.HasPrefix(out, "completed: generation 1") {
		t.Fatalf("compact as the tenant: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	if out := sameOutput("context", conv, "--json"); !strings.Contains(out, `"has_summary": true`) {
		t.Fatalf("context after the compaction has no summary: %s", out)
	}
	if out := sameOutput("recall", conv, "--query", "the"); out == "" {
		t.Fatal("recall printed nothing")
	}
	if out := sameOutput("status", conv); !strings.Contains(out, "generation") || !strings.Contains(out, "pending") {
		t.Fatalf("status: %q", out)
	}
	// The pipeline's status, which the service answers with the streams it serves.
	if out, _, err := cli(t, "", "status"); err != nil || !strings.Contains(out, "CHAT") || !strings.Contains(out, "compactor-workers") {
		t.Fatalf("status as the tenant: %v\n%s", err, out)
	}
	if _, _, err := cli(t, "", "context", conv, "--raw"); exitCode(err) != 2 || !strings.Contains(err.Error(), "service mode") {
		t.Errorf("context --raw as the tenant: %v (exit %d); want exit 2 naming the service mode", err, exitCode(err))
	}
	t.Setenv("COMPACTOR_VIA_SERVICE", "true")
	out, errOut, err = cli(t, `{"role":"user","content":"one more"}`+"\n", "publish", conv)
	last := fmt.Sprint(len(msgs) + 1)
	if err != nil || out != last+"\n" || strings.Contains(errOut, note) {
		t.Fatalf("publish with COMPACTOR_VIA_SERVICE: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	if out, _, err := cli(t, "", "forget", conv); err != nil || !strings.Contains(out, "through seq "+last) {
		t.Fatalf("forget as the tenant: %v\n%s", err, out)
	}
	if _, _, err := cli(t, "", "status", conv); exitCode(err) != exitNotFound {
		t.Fatalf("status after the forget: %v (exit %d); want not found", err, exitCode(err))
	}
}

// twoAccounts is a compactor account, with JetStream, exporting the chat subjects and
// the tenant endpoints as services, and a tenant account without JetStream importing
// them under the same names, whose user has no other limit.
const twoAccounts = `
jetstream: enabled
accounts: {
  COMPACTOR: {
    jetstream: enabled
    users: [{user: admin, password: admin-pw}]
    exports: [
      {service: "chat.*.msg"}, {service: "compactor.context"}, {service: "compactor.compact"},
      {service: "compactor.status"}, {service: "compactor.recall"}, {service: "compactor.forget"}
    ]
  }
  ACME: {
    users: [{user: acme, password: acme-pw}]
    imports: [
      {service: {account: COMPACTOR, subject: "chat.*.msg"}}, {service: {account: COMPACTOR, subject: "compactor.context"}},
      {service: {account: COMPACTOR, subject: "compactor.compact"}}, {service: {account: COMPACTOR, subject: "compactor.status"}},
      {service: {account: COMPACTOR, subject: "compactor.recall"}}, {service: {account: COMPACTOR, subject: "compactor.forget"}}
    ]
  }
}
`

// A user of an account without JetStream, which reaches the compactor only through
// service imports, publishes and reads its context: the commands find the account has
// no JetStream and go through the service, saying so on stderr with -v.
func TestCommandsInAnAccountWithoutJetStream(t *testing.T) {
	env := testEnv(t, 128000)
	srv := jstest.ServerFromFile(t, jstest.WriteFile(t, "accounts.conf", []byte(twoAccounts)))
	admin, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	s := runStack(t, admin, jstest.Provision(t, admin), env, nil)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	t.Setenv("COMPACTOR_NATS_USER", "acme")
	t.Setenv("COMPACTOR_NATS_PASSWORD", "acme-pw")
	out, errOut, err := cli(t, `{"role":"user","content":"hello from acme"}`+"\n", "publish", "acme-1", "-v")
	if err != nil || out != "1\n" || !strings.Contains(errOut, "note: this user's account has no JetStream") {
		t.Fatalf("publish: %v\nstdout %q\nstderr %q", err, out, errOut)
	}
	out, _, err = cli(t, "", "context", "acme-1")
	if err != nil || out != `{"role":"user","content":"hello from acme"}`+"\n" {
		t.Fatalf("context: %v\n%q", err, out)
	}
	if last, err := s.st.Chat().LastSeq(ctxFor(t, 10e9), "acme-1"); err != nil || last != 1 {
		t.Fatalf("stored in the compactor's CHAT: last seq %d, %v", last, err)
	}
}
