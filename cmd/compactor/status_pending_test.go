package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// `compactor status <conv>` shows the compaction request that is queued or being worked
// on, as the service's status and the web view do (the ctrl-C message of compact --wait
// sends the user there), and says when there is none.
func TestStatusShowsThePendingRequest(t *testing.T) {
	testEnv(t, 8000)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := pipeline.NewWithStore(nc, st)
	if _, err := c.Publish(ctx, "pend", schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, "", "status", "pend")
	if err != nil || pendingRow(out) != "none" {
		t.Fatalf("status with nothing queued = %q, %v; want a pending row saying none", out, err)
	}
	req := schemas.Request{RequestID: schemas.NewRequestID(), Conversation: "pend", Trigger: schemas.TriggerManual,
		Reason: "asked by the test", RequestedAt: time.Now().UTC()}
	if _, err := st.Queue().Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	out, _, err = cli(t, "", "status", "pend")
	if err != nil || !strings.HasPrefix(pendingRow(out), "request "+req.RequestID+" (manual") {
		t.Fatalf("status with a request queued = %q, %v; want it shown", out, err)
	}
	out, _, err = cli(t, "", "status", "pend", "--json")
	if err != nil || !strings.Contains(out, `"pending": true`) || !strings.Contains(out, `"pending_request_id": "`+req.RequestID+`"`) {
		t.Fatalf("status --json with a request queued = %s, %v; want pending and its id", out, err)
	}
}

// pendingRow is the text of status's pending row, "" when it has none.
func pendingRow(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "pending "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// `compactor status` lists the policy keys on which the roles of the deployment run
// with different defaults, as each process logged at its start.
func TestStatusListsPolicyDisagreements(t *testing.T) {
	testEnv(t, 8000)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range []struct {
		roles  node.Roles
		window string
	}{{node.Roles{Trigger: true}, "8000"}, {node.Roles{Worker: true}, "128000"}} {
		r, err := policy.NewResolver(policy.Layer{"context_window": p.window}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		node.CheckPolicy(ctx, node.Config{Roles: p.roles, Resolver: r, Logger: zerolog.Nop()}, st)
	}
	out, _, err := cli(t, "", "status")
	if err != nil || !strings.Contains(out, "different policy defaults") || !strings.Contains(out, "  context_window: trigger 8000, worker 128000\n") {
		t.Fatalf("status = %s, %v; want the window the roles disagree on", out, err)
	}
	out, _, err = cli(t, "", "status", "--json")
	if err != nil || !strings.Contains(out, `"context_window: trigger 8000, worker 128000"`) {
		t.Fatalf("status --json = %s, %v; want policy_disagreements", out, err)
	}
}
