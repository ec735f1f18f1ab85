package systemtest

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// The producer of accounts.conf stores messages over the max payload, and an object
// again once it is older than half the duplicate window, without the purge API: a purge
// of the objects bucket (which would erase every conversation's large messages) is
// refused, and storing needs no purge.
func TestPrivilegeProducerStoresObjectsWithoutPurge(t *testing.T) {
	_, connect := rolestest.Server(t)
	cfg := jetstream.DefaultConfig()
	cfg.DuplicateWindow, cfg.ChatMaxAge = 2*time.Second, time.Hour // objects are stored again after 1s
	ctx := ctxFor(t, time.Minute)
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, cfg); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	producer := connect("producer")
	pst, err := jetstream.Open(ctx, producer.NC, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc := pipeline.NewWithStore(producer.NC, pst)
	large := schemas.Message{Role: schemas.RoleUser,
		Content: schemas.Text("NEEDLE " + strings.Repeat("a large tool output line\n", 2*rolestest.MaxPayload/24))}
	if _, err := pc.Publish(ctx, "priv-large", large); err != nil {
		t.Fatalf("producer publishes a message over the max payload: %v", err)
	}
	es, err := pst.Chat().LoadEntries(ctx, "priv-large", 0, 0)
	if err != nil || len(es) != 1 || es[0].Message.ContentRef == nil {
		t.Fatalf("CHAT holds %d entries (%v); want one stub", len(es), err)
	}
	ref := es[0].Message.ContentRef
	body, err := pst.Objects().Read(ctx, "priv-large", ref)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := natsjs.New(admin.NC)
	if err != nil {
		t.Fatal(err)
	}
	store, err := obs.ObjectStore(ctx, cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	first, err := store.GetInfo(ctx, ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the object to be older than half the duplicate window", func() bool {
		return time.Since(first.ModTime) > cfg.DuplicateWindow/2
	})
	if err := pst.Objects().Put(ctx, "priv-large", ref.Name, body); err != nil {
		t.Fatalf("producer stores the object again: %v", err)
	}
	if later, err := store.GetInfo(ctx, ref.Name); err != nil || later.NUID == first.NUID {
		t.Fatalf("after storing again: %+v, %v; want a new copy", later, err)
	}
	if got, err := pst.Objects().Read(ctx, "priv-large", ref); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after storing again: %d bytes, %v", len(got), err)
	}
	if v := producer.Violations(); v != "" {
		t.Fatalf("the producer was refused subjects while storing objects:\n%s", v)
	}

	refused(t, producer, "purge the objects bucket", "$JS.API.STREAM.PURGE.OBJ_"+cfg.ObjectsBucket, func(ctx context.Context) error {
		_, err := producer.NC.RequestWithContext(ctx, "$JS.API.STREAM.PURGE.OBJ_"+cfg.ObjectsBucket, []byte(`{}`))
		return err
	})
	if _, err := pst.Objects().Read(ctx, "priv-large", ref); err != nil {
		t.Fatalf("the object after the producer's purge: %v", err)
	}
}
