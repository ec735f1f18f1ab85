package jetstream_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

func TestPermissionErrorOf(t *testing.T) {
	for _, tc := range []struct {
		in      string
		op, sub string
	}{
		{`nats: permissions violation: Permissions Violation for Publish to "compactor.compact"`, "publish", "compactor.compact"},
		{`nats: permissions violation: Permissions Violation for Subscription to "_INBOX.abc.*"`, "subscribe", "_INBOX.abc.*"},
		{`nats: permissions violation: Permissions Violation for Subscription to "q.x" using queue "workers"`, "subscribe", "q.x"},
	} {
		pe, ok := jetstream.PermissionErrorOf(errors.New(tc.in))
		if !ok || pe.Op != tc.op || pe.Subject != tc.sub || !errors.Is(pe, jetstream.ErrPermission) {
			t.Errorf("%s: %+v, %v; want %s %s", tc.in, pe, ok, tc.op, tc.sub)
		}
	}
	for _, in := range []string{"nats: timeout", "nats: authorization violation", ""} {
		if pe, ok := jetstream.PermissionErrorOf(errors.New(in)); ok {
			t.Errorf("%q read as a refusal: %+v", in, pe)
		}
	}
}

// A request to a subject the user may not publish gets no answer; under
// RefusedContext it ends as soon as the server's refusal comes, with the refusal as
// its error, and the connection's own error handler still sees it. A refusal of
// another subject leaves the request alone.
func TestRefusedContextEndsARefusedRequest(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(conf, []byte(`authorization { users: [ { user: u, password: p, permissions: { publish: { deny: ["forbidden.>"] } } } ] }`), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := jstest.ServerFromFile(t, conf)
	var seen atomic.Int32
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("u", "p"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) { seen.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	rctx, stop := jetstream.RefusedContext(ctx, nc, func(pe *jetstream.PermissionError) bool { return pe.Subject == "forbidden.a" })
	_, err = nc.RequestWithContext(rctx, "forbidden.a", nil)
	err = jetstream.PermissionCause(rctx, err)
	stop()
	if !errors.Is(err, jetstream.ErrPermission) || !strings.Contains(err.Error(), "forbidden.a") || ctx.Err() != nil {
		t.Fatalf("refused request: %v (deadline: %v); want the refusal naming forbidden.a before the deadline", err, ctx.Err())
	}
	if jetstream.Refusals(nc) != 1 {
		t.Errorf("%d refusals counted; want 1", jetstream.Refusals(nc))
	}
	for seen.Load() == 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // the handler set before is called after the hub
	}
	if seen.Load() == 0 {
		t.Error("the connection's own error handler did not see the refusal")
	}

	other, stop := jetstream.RefusedContext(ctx, nc, func(pe *jetstream.PermissionError) bool { return pe.Subject == "forbidden.b" })
	defer stop()
	if err := nc.Publish("forbidden.a", nil); err != nil {
		t.Fatal(err)
	}
	for jetstream.Refusals(nc) < 2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if other.Err() != nil {
		t.Errorf("a refusal of another subject ended the context: %v", context.Cause(other))
	}
}
