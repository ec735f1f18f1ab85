package node_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
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
