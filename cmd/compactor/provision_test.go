package main

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream/jstest"
)

// provisioned is what exists on a server after provision: each stream's and
// consumer's creation time and configuration, by name.
func provisioned(t *testing.T, nc *nats.Conn, report provisionReport) map[string]string {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range report.Streams {
		si, err := js.StreamInfo(s.Name)
		if err != nil {
			t.Fatalf("stream %s after provision: %v", s.Name, err)
		}
		cfg, _ := json.Marshal(si.Config)
		out["stream "+s.Name] = si.Created.String() + " " + string(cfg)
	}
	for _, c := range report.Consumers {
		ci, err := js.ConsumerInfo(c.Stream, c.Name)
		if err != nil {
			t.Fatalf("consumer %s/%s after provision: %v", c.Stream, c.Name, err)
		}
		cfg, _ := json.Marshal(ci.Config)
		out["consumer "+c.Stream+"/"+c.Name] = ci.Created.String() + " " + string(cfg)
	}
	return out
}

func decodeReport(t *testing.T, out string) provisionReport {
	t.Helper()
	var r provisionReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("provision --json printed %q: %v", out, err)
	}
	return r
}

// provision creates everything serve would on a fresh server, prints it, and a second
// run changes nothing.
func TestProvisionCreatesThenChangesNothing(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	nc := jstest.Conn(t, srv)

	out, errOut, err := cli(t, "", "provision", "--json")
	if err != nil {
		t.Fatalf("provision --json: %v\n%s", err, errOut)
	}
	first := decodeReport(t, out)
	if first.Server != srv.ClientURL() {
		t.Errorf("server = %q; want %q", first.Server, srv.ClientURL())
	}
	names := map[string]bool{}
	for _, s := range first.Streams {
		names[s.Name] = s.Error == ""
	}
	for _, c := range first.Consumers {
		names[c.Stream+"/"+c.Name] = c.Error == ""
	}
	for _, want := range []string{"CHAT", "COMPACT_REQUESTS", "COMPACT_EVENTS", "COMPACT_DEAD", "ACTIVITY", "KV_compaction",
		"KV_compaction-policy", "OBJ_compaction-objects", "KV_compaction-forgotten",
		"CHAT/compactor-trigger", "ACTIVITY/compactor-idle", "COMPACT_REQUESTS/compactor-workers"} {
		if !names[want] {
			t.Errorf("provision printed no %s (or an error for it): %v", want, names)
		}
	}
	before := provisioned(t, nc, first)

	out, errOut, err = cli(t, "", "provision")
	if err != nil {
		t.Fatalf("second provision: %v\n%s", err, errOut)
	}
	for _, want := range []string{"provisioned NATS at " + srv.ClientURL() + " (from COMPACTOR_NATS_URL)", "STREAM", "KV_compaction-policy",
		"CONSUMER", "compactor-workers"} {
		if !strings.Contains(out, want) {
			t.Errorf("second provision printed no %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("second provision logged %q; want nothing", errOut)
	}
	after := provisioned(t, nc, first)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("second provision changed %s:\n was %s\n now %s", k, v, after[k])
		}
	}
}

// A setting that differs from the existing streams' exits 2, naming it, and changes
// nothing; --update-streams applies it.
func TestProvisionConflictAndUpdate(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	if _, errOut, err := cli(t, "", "provision"); err != nil {
		t.Fatalf("provision: %v\n%s", err, errOut)
	}
	js, _ := jstest.Conn(t, srv).JetStream()

	t.Setenv("COMPACTOR_CHAT_MAX_AGE", "3m")
	_, _, err := cli(t, "", "provision")
	if exitCode(err) != exitUsage {
		t.Fatalf("provision with a conflicting COMPACTOR_CHAT_MAX_AGE: %v (exit %d); want exit 2", err, exitCode(err))
	}
	for _, want := range []string{"stream CHAT", "max_age", "3m0s", "COMPACTOR_UPDATE_STREAMS=true or provision --update-streams"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("provision error %q does not mention %q", err, want)
		}
	}
	if si, err := js.StreamInfo("CHAT"); err != nil || si.Config.MaxAge != 0 {
		t.Fatalf("CHAT after the refused provision: %v; want max age 0", err)
	}

	out, errOut, err := cli(t, "", "provision", "--update-streams")
	if err != nil {
		t.Fatalf("provision --update-streams: %v\n%s", err, errOut)
	}
	if si, err := js.StreamInfo("CHAT"); err != nil || si.Config.MaxAge != 3*time.Minute {
		t.Fatalf("CHAT after provision --update-streams: %v; want max age 3m", err)
	}
	if !strings.Contains(errOut, "changed an existing setting") || !strings.Contains(errOut, "max_age") || !strings.Contains(out, "CHAT") {
		t.Errorf("provision --update-streams: stdout %q, stderr %q; want the change logged and the streams printed", out, errOut)
	}
}

// provision starts no embedded server: without COMPACTOR_NATS_URL or -s it is a usage
// error, also when the nats CLI's NATS_URL names a server (it never reads it).
func TestProvisionNeedsAURL(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("NATS_URL", srv.ClientURL())
	_, _, err := cli(t, "", "provision")
	var ue usageError
	if !errors.As(err, &ue) || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "COMPACTOR_NATS_URL") ||
		!strings.Contains(err.Error(), "-s/--server") || !strings.Contains(ue.usage, "Usage: compactor provision") {
		t.Fatalf("provision without a URL: %v (exit %d); want a usage error naming COMPACTOR_NATS_URL and -s/--server", err, exitCode(err))
	}
	// -s names it.
	if _, errOut, err := cli(t, "", "provision", "-s", srv.ClientURL()); err != nil {
		t.Fatalf("provision -s: %v\n%s", err, errOut)
	}
	for _, args := range [][]string{{"provision", "x"}, {"provision", "--timeout", "0s", "-s", srv.ClientURL()}} {
		if _, _, err := cli(t, "", args...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v; want a usage error", args, err)
		}
	}
	out, _, err := cli(t, "", "help")
	if err != nil || !strings.Contains(out, "compactor provision ") {
		t.Errorf("help: %v; want provision listed:\n%s", err, out)
	}
	out, _, err = cli(t, "", "help", "provision")
	if err != nil || !strings.Contains(out, "COMPACTOR_NATS_*; none (a server must be named)") {
		t.Errorf("help provision: %v; want no embedded server among the connection settings:\n%s", err, out)
	}
}

// provision waits for JetStream up to --timeout, then exits 6; for a NATS that never
// answers, 7.
func TestProvisionTimeouts(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_LOG_LEVEL", "error")
	ns := natsWithoutJetStream(t)
	_, _, err := cli(t, "", "provision", "-s", ns.ClientURL(), "--timeout", "1s")
	if exitCode(err) != exitTimeout || !strings.Contains(err.Error(), "not ready within 1s (--timeout)") {
		t.Errorf("provision without JetStream: %v (exit %d); want exit 6 naming --timeout", err, exitCode(err))
	}
	url := "nats://" + freeAddr(t)
	_, _, err = cli(t, "", "provision", "-s", url, "--timeout", "1s")
	if exitCode(err) != exitUnavailable || !strings.Contains(err.Error(), "cannot reach NATS at "+url) {
		t.Errorf("provision of a NATS that is not there: %v (exit %d); want exit 7", err, exitCode(err))
	}
	if err := ns.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, errOut, err := cli(t, "", "provision", "-s", ns.ClientURL(), "--timeout", "20s"); err != nil {
		t.Fatalf("provision once JetStream is enabled: %v\n%s", err, errOut)
	}
}

// With deploy/nats/accounts.conf: the worker user may not create the streams, and
// provision says so at once (exit 2, naming the refused subject) instead of waiting out
// its timeout; the admin provisions; then the worker's provision only reads, and passes.
func TestProvisionAsAccountsConfUsers(t *testing.T) {
	testEnv(t, 128000)
	url, _ := rolestest.Server(t)
	as := func(user string) {
		t.Setenv("COMPACTOR_NATS_URL", url)
		t.Setenv("COMPACTOR_NATS_USER", user)
		t.Setenv("COMPACTOR_NATS_PASSWORD", os.Getenv("NATS_"+strings.ToUpper(user)+"_PASSWORD"))
		t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", "_INBOX_"+user)
	}
	as("worker")
	start := time.Now()
	_, _, err := cli(t, "", "provision", "--timeout", "25s")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), `Permissions Violation for Publish to "$JS.API.STREAM.CREATE.`) ||
		!strings.Contains(err.Error(), "admin") {
		t.Fatalf("provision as worker: %v (exit %d); want exit 2 naming the permissions violation", err, exitCode(err))
	}
	t.Logf("provision as worker refused after %s: %v", time.Since(start).Round(time.Millisecond), err)

	as("admin")
	out, errOut, err := cli(t, "", "provision", "--json")
	if err != nil {
		t.Fatalf("provision as admin: %v\n%s", err, errOut)
	}
	if r := decodeReport(t, out); len(r.Streams) == 0 || readBackError(r.Status) != nil {
		t.Fatalf("provision as admin printed %s", out)
	}

	as("worker")
	if _, errOut, err := cli(t, "", "provision"); err != nil {
		t.Fatalf("provision as worker after the admin: %v\n%s", err, errOut)
	}
}
