package jetstream_test

import (
	"context"
	"slices"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
)

// A deployment provisioned by an earlier version lacks the buckets this one adds (the
// learned summarizer windows, the roles' policy records). A least-privilege process may
// not create them: it still provisions and starts, names them missing, and works
// without what they hold; an admin's provisioning creates them.
func TestLeastPrivilegeRolesStartWithoutTheOptionalBuckets(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	js, err := natsjs.New(admin.NC)
	if err != nil {
		t.Fatal(err)
	}
	optional := []string{cfg.WindowsBucket, cfg.DeploymentBucket}
	for _, b := range optional {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, role := range []string{"worker", "trigger", "api"} {
		// The whole provisioning must not wait out a timeout: a refusal ends the wait.
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		st, err := jetstream.Provision(pctx, connect(role).NC, cfg)
		pcancel()
		if err != nil {
			t.Fatalf("%s on a deployment without the optional buckets: %v", role, err)
		}
		if got := st.MissingBuckets(); !slices.Equal(got, optional) {
			t.Errorf("%s: missing buckets %v; want %v", role, got, optional)
		}
	}
	st, err := jetstream.Provision(ctx, admin.NC, cfg)
	if err != nil || len(st.MissingBuckets()) != 0 {
		t.Fatalf("provision as admin: missing %v, %v; want both created", st.MissingBuckets(), err)
	}
	for _, b := range optional {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s after the admin's provisioning: %v", b, err)
		}
	}
}
