package node_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Processes of one deployment that disagree on the policy defaults say so: a worker
// started at a 128,000-token window beside a trigger at 8,000 logs a warning naming the
// key and both values when it starts, and the pipeline's status lists the difference.
// Processes that agree say nothing.
func TestProcessesThatDisagreeOnThePolicySaySo(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := func(roles node.Roles, window int) (string, []string) {
		var logs bytes.Buffer
		cfg := node.Config{Roles: roles, Resolver: resolver(t, window), Logger: zerolog.New(&logs)}
		return logs.String(), node.CheckPolicy(ctx, cfg, st)
	}
	if logs, diffs := start(node.Roles{Trigger: true}, 8000); len(diffs) != 0 {
		t.Fatalf("the first process found differences %v:\n%s", diffs, logs)
	}
	if logs, diffs := start(node.Roles{API: true}, 8000); len(diffs) != 0 {
		t.Fatalf("a process that agrees found differences %v:\n%s", diffs, logs)
	}
	var logs bytes.Buffer
	cfg := node.Config{Roles: node.Roles{Worker: true}, Resolver: resolver(t, 128000), Logger: zerolog.New(&logs)}
	diffs := node.CheckPolicy(ctx, cfg, st)
	want := "context_window: api 8000, this process 128000, trigger 8000"
	if len(diffs) != 1 || diffs[0] != want || !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Fatalf("the disagreeing worker found %q and logged:\n%s\nwant a warning of %q", diffs, logs.String(), want)
	}
	s := st.Status(ctx)
	if got := strings.Join(s.PolicyDisagreements, "; "); got != "context_window: api 8000, trigger 8000, worker 128000" {
		t.Fatalf("status lists %q; want the worker's window against the others'", got)
	}
}

// With the least-privilege users of accounts.conf, each role's process records its
// policy defaults and compares them with the others' without a permissions violation:
// the trigger, the worker and the api each write their own key of the deployment
// bucket and read every role's, and the api's status lists the difference. A role may
// not write another role's record.
func TestPolicyRecordsWithTheLeastPrivilegeUsers(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := jetstream.Provision(ctx, connect("admin").NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	conns := map[string]*rolestest.Conn{}
	stores := map[string]*jetstream.Store{}
	for _, p := range []struct {
		role   string
		roles  node.Roles
		window int
		want   string
	}{
		{"trigger", node.Roles{Trigger: true}, 8000, ""},
		{"api", node.Roles{API: true}, 8000, ""},
		{"worker", node.Roles{Worker: true}, 128000, "context_window: api 8000, this process 128000, trigger 8000"},
	} {
		c := connect(p.role)
		st, err := jetstream.Provision(ctx, c.NC, cfg)
		if err != nil {
			t.Fatalf("provision as %s after the admin: %v", p.role, err)
		}
		conns[p.role], stores[p.role] = c, st
		var logs bytes.Buffer
		diffs := node.CheckPolicy(ctx, node.Config{Roles: p.roles, Resolver: resolver(t, p.window), Logger: zerolog.New(&logs)}, st)
		if strings.Join(diffs, "; ") != p.want || strings.Contains(logs.String(), "not recorded") {
			t.Fatalf("%s found %q and logged:\n%s\nwant %q", p.role, diffs, logs.String(), p.want)
		}
	}
	for role, st := range stores {
		rp, err := st.RolePolicies(ctx)
		if err != nil || len(rp) != 3 || rp[role]["context_window"] == "" {
			t.Fatalf("%s reads the records %v, %v; want the three roles'", role, rp, err)
		}
	}
	s := stores["api"].Status(ctx)
	if got := strings.Join(s.PolicyDisagreements, "; "); got != "context_window: api 8000, trigger 8000, worker 128000" || s.PolicyRecordsError != "" {
		t.Fatalf("the api's status lists %q (%s); want the worker's window against the others'", got, s.PolicyRecordsError)
	}
	// No role may write another role's record. Each refusal also shows that the server
	// has answered everything that role sent before: the only violation reported to it
	// is this one.
	next := map[string]string{"trigger": "worker", "worker": "api", "api": "trigger"}
	for role, c := range conns {
		other := "$KV." + cfg.DeploymentBucket + ".policy." + next[role]
		if err := c.NC.Publish(other, []byte(`{"context_window":"1"}`)); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("nats: permissions violation: Permissions Violation for Publish to %q", other)
		for !strings.Contains(c.Violations(), want) {
			if ctx.Err() != nil {
				t.Fatalf("%s wrote the %s's record: no %q among %q", role, next[role], want, c.Violations())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if v := c.Violations(); v != want {
			t.Fatalf("%s met a permissions violation: %s", role, v)
		}
	}
}
