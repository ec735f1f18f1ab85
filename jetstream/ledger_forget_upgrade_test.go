package jetstream_test

import (
	"context"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// An api process started before an admin provisioned LEDGER (the upgrade's order)
// keeps it in MissingBuckets for its life: its forgets skip the ledger, which the
// proxy fills once the admin provisioned.
func TestAForgetByAnAPIStartedBeforeTheLedgerDeletesItsEntries(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatal(err)
	}
	js, _ := natsjs.New(admin.NC)
	if err := js.DeleteStream(ctx, cfg.LedgerStream); err != nil {
		t.Fatal(err)
	}
	api, err := jetstream.Provision(ctx, connect("api").NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("api missing: %v", api.MissingBuckets())
	ast, err := jetstream.Provision(ctx, admin.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := jetstream.Provision(ctx, connect("proxy").NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Ledger().Append(ctx, ledgerEntry("c1", "0123456789abcdef", schemas.LedgerSent)); err != nil {
		t.Fatal(err)
	}
	out, err := api.Forget(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := ast.Ledger().Read(ctx, jetstream.LedgerRead{}, func(*schemas.LedgerEntry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("forget answered ledger_entries %d, no error; the ledger still holds %d of c1's entries", out.Deleted.LedgerEntries, n)
	}
}
