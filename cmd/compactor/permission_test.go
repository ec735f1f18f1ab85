package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
)

// With the users of deploy/nats/accounts.conf, a command that sends what its user may
// not is refused at once: exit 8, naming the refused subject, instead of waiting for a
// timeout (reader publish, compact and forget) or printing what it could read and
// exiting 0 (producer status). What the user may do still works.
func TestCommandsRefusedByPermissions(t *testing.T) {
	testEnv(t, 128000)
	url, connect := rolestest.Server(t)
	if _, err := jetstream.Provision(ctxFor(t, 30e9), connect("admin").NC, jetstream.DefaultConfig()); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	as := func(user string) {
		t.Setenv("COMPACTOR_NATS_URL", url)
		t.Setenv("COMPACTOR_NATS_USER", user)
		t.Setenv("COMPACTOR_NATS_PASSWORD", os.Getenv("NATS_"+strings.ToUpper(user)+"_PASSWORD"))
		t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", "_INBOX_"+user)
	}
	const conv = "perm-1"
	line := `{"role":"user","content":"hello"}` + "\n"
	as("producer")
	if _, errOut, err := cli(t, line, "publish", conv); err != nil {
		t.Fatalf("publish as producer: %v\n%s", err, errOut)
	}
	// What each user may do is not refused: no command stops at a refusal it tolerated.
	for _, ok := range []struct {
		user string
		args []string
	}{{"reader", []string{"context", conv}}, {"reader", []string{"recall", conv}}, {"producer", []string{"status", conv}}} {
		as(ok.user)
		if _, errOut, err := cli(t, "", ok.args...); err != nil {
			t.Fatalf("%s as %s: %v\n%s", strings.Join(ok.args, " "), ok.user, err, errOut)
		}
	}

	for _, tc := range []struct {
		user    string
		args    []string
		stdin   string
		subject string
	}{
		{"reader", []string{"publish", conv}, line, "chat." + conv + ".msg"},
		{"reader", []string{"compact", conv}, "", "compactor.compact"},
		{"reader", []string{"forget", conv}, "", "compactor.forget"},
		{"producer", []string{"status"}, "", "$JS.API.STREAM.INFO."}, // the pipeline's streams
	} {
		as(tc.user)
		start := time.Now()
		_, errOut, err := cli(t, tc.stdin, tc.args...)
		t.Logf("%s as %s: %s: %v", strings.Join(tc.args, " "), tc.user, time.Since(start).Round(time.Millisecond), err)
		want := "permission denied: the server does not let this user publish " + tc.subject
		if exitCode(err) != exitPermission || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s as %s: %v (exit %d); want exit %d with %q\n%s", strings.Join(tc.args, " "), tc.user, err, exitCode(err), exitPermission, want, errOut)
		}
	}
}
