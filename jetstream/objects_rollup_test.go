package jetstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// The objects bucket refuses roll-ups: a producer of accounts.conf, which may store
// objects, can neither erase the bucket (Nats-Rollup: all) nor the descriptions of
// another conversation's object (Nats-Rollup: sub), and a description it writes over
// another object's does not change what readers read.
func TestProducerCannotRollUpOrRewriteObjects(t *testing.T) {
	_, connect := rolestest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := jetstream.DefaultConfig()
	admin, err := jetstream.Provision(ctx, connect("admin").NC, cfg)
	if err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	pnc := connect("producer").NC
	producer, err := jetstream.Open(ctx, pnc, cfg)
	if err != nil {
		t.Fatalf("open as producer: %v", err)
	}
	body, victim := object("victim", 3000, "victim's large tool output ")
	if err := producer.Objects().Put(ctx, "victim", victim.Name, body); err != nil {
		t.Fatalf("the producer stores an object: %v", err)
	}
	js, err := natsjs.New(pnc)
	if err != nil {
		t.Fatal(err)
	}
	meta := "$O." + cfg.ObjectsBucket + ".M." + base64URL(victim.Name)
	for _, roll := range []string{"all", "sub"} {
		m := nats.NewMsg(meta)
		m.Header.Set("Nats-Rollup", roll)
		m.Data = []byte(`{"name":"` + victim.Name + `","deleted":true}`)
		if _, err := js.PublishMsg(ctx, m); err == nil || !strings.Contains(err.Error(), "rollup") {
			t.Errorf("the producer's Nats-Rollup: %s on the objects bucket: %v; want it refused", roll, err)
		}
	}
	// Written over the victim's description, without a roll-up: a deleted marker, a
	// link elsewhere, and the victim's description with its chunks elsewhere.
	objs, err := testJS(t, connect("admin").NC).Stream(ctx, "OBJ_"+cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	last, err := objs.GetLastMsgForSubject(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	info := &natsjs.ObjectInfo{}
	if err := json.Unmarshal(last.Data, info); err != nil {
		t.Fatal(err)
	}
	hostile := []map[string]any{
		{"name": victim.Name, "bucket": cfg.ObjectsBucket, "deleted": true},
		{"name": victim.Name, "bucket": cfg.ObjectsBucket, "options": map[string]any{"link": map[string]any{"bucket": "other"}}},
	}
	moved := *info
	moved.NUID = "AAAAAAAAAAAAAAAAAAAAAAAAAA"
	b, _ := json.Marshal(moved)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	hostile = append(hostile, m)
	for _, h := range hostile {
		data, _ := json.Marshal(h)
		if _, err := js.Publish(ctx, meta, data); err != nil {
			t.Fatalf("a description written over another (the producer may write any name's): %v", err)
		}
		for _, st := range []*jetstream.Store{admin, producer} {
			got, err := st.Objects().Read(ctx, "victim", victim)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("after a description %s written over the victim's: read %d bytes, %v; want its %d bytes", data, len(got), err, len(body))
			}
		}
	}
}

// An existing deployment's objects bucket allows roll-ups (nats.go made it, as every
// version before this one did). Provisioning leaves it as it is, not a conflict, and
// names the pending upgrade; objects stored with a roll-up (nats.go's Put, the
// TypeScript client before this version) and without one read alike; the update of
// existing streams turns roll-ups off, and the older objects still read.
func TestObjectsBucketUpgradeTurnsRollUpsOff(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := jetstream.DefaultConfig()
	js := testJS(t, nc)
	obs, err := js.CreateObjectStore(ctx, natsjs.ObjectStoreConfig{Bucket: cfg.ObjectsBucket, Storage: natsjs.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	old, oldRef := object("older", 3000, "stored by nats.go with a roll-up ")
	if _, err := obs.PutBytes(ctx, oldRef.Name, old); err != nil {
		t.Fatal(err)
	}
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatalf("provision over a bucket that allows roll-ups: %v; want it served", err)
	}
	if p := st.PendingUpgrades(); len(p) != 1 || p[0].Setting != "allow_rollup" || p[0].Name != cfg.ObjectsBucket {
		t.Fatalf("pending upgrades %+v; want the objects bucket's roll-ups", p)
	}
	body, ref := object("newer", 3000, "stored without a roll-up ")
	if err := st.Objects().Put(ctx, "newer", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	readBoth := func(st *jetstream.Store) {
		t.Helper()
		for _, o := range []struct {
			conv string
			ref  *schemas.ContentRef
			want []byte
		}{{"older", oldRef, old}, {"newer", ref, body}} {
			got, err := st.Objects().Read(ctx, o.conv, o.ref)
			if err != nil || !bytes.Equal(got, o.want) {
				t.Fatalf("read %s: %d bytes, %v; want %d", o.ref.Name, len(got), err, len(o.want))
			}
		}
	}
	readBoth(st)
	up := cfg
	up.UpdateExisting = true
	st, err = jetstream.Provision(ctx, nc, up)
	if err != nil || len(st.PendingUpgrades()) != 0 {
		t.Fatalf("update of existing streams: pending %v, %v", st.PendingUpgrades(), err)
	}
	s, err := js.Stream(ctx, "OBJ_"+cfg.ObjectsBucket)
	if err != nil || s.CachedInfo().Config.AllowRollup {
		t.Fatalf("objects stream after the update: %v; want roll-ups refused", err)
	}
	readBoth(st)
	m := nats.NewMsg("$O." + cfg.ObjectsBucket + ".M." + base64URL(ref.Name))
	m.Header.Set("Nats-Rollup", "all")
	if _, err := js.PublishMsg(ctx, m); err == nil {
		t.Fatal("a roll-up after the upgrade was taken")
	}
	// A bucket made by this version allows none from the start, and is no upgrade.
	if st, err = jetstream.Provision(ctx, nc, cfg); err != nil || len(st.PendingUpgrades()) != 0 {
		t.Fatalf("provision after the upgrade: pending %v, %v", st.PendingUpgrades(), err)
	}
	if errors.Is(err, jetstream.ErrConflict) {
		t.Fatal(err)
	}
}

func allowRollUps(t *testing.T, nc *nats.Conn) {
	t.Helper()
	jstest.AllowRollUps(t, nc, jetstream.DefaultNames().ObjectsBucket)
}

// A description written over an object's (the bucket keeps every description: no
// roll-ups) does not hide the object's own chunks from a forget of its conversation:
// the chunks every earlier description names are deleted too.
func TestForgetDeletesTheChunksOfEveryDescription(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	cfg := st.Config()
	name := largeMessage(t, st, "hidden", bytes.Repeat([]byte("NEEDLE-hidden large tool output "), 40))
	meta := "$O." + cfg.ObjectsBucket + ".M." + base64URL(name)
	data, _ := json.Marshal(map[string]any{"name": name, "bucket": cfg.ObjectsBucket, "deleted": true})
	if _, err := testJS(t, nc).Publish(ctx, meta, data); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Forget(ctx, "hidden"); err != nil {
		t.Fatal(err)
	}
	if n := objectsStreamMsgs(t, nc); n != 0 {
		t.Fatalf("the objects stream holds %d messages after the forget; want the object's chunks and descriptions gone", n)
	}
}
