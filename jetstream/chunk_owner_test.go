package jetstream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// copyDescription does what a hostile producer may (descriptions are readable with
// DIRECT.GET and writable with $O.<bucket>.M.>): it publishes a copy of info under
// name, listing earlier as the chunk ids of earlier copies, and a stub in conv naming
// it.
func copyDescription(t *testing.T, st *jetstream.Store, js natsjs.JetStream, conv, name string, info natsjs.ObjectInfo, earlier string) {
	t.Helper()
	ctx := ctxT(t)
	bucket := st.Config().ObjectsBucket
	info.Name, info.Metadata = name, nil
	if earlier != "" {
		info.Metadata = map[string]string{jetstream.EarlierChunksKey: earlier}
	}
	meta, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "$O."+bucket+".M."+base64URL(name), meta); err != nil {
		t.Fatal(err)
	}
	stub := fmt.Sprintf(`{"role":"user","content_ref":{"bucket":%q,"name":%q,"size":%d,"sha256":%q,"tokens":1}}`,
		bucket, name, info.Size, name[strings.LastIndexByte(name, '/')+1:])
	if _, err := st.Chat().Publish(ctx, conv, []byte(stub), ""); err != nil {
		t.Fatal(err)
	}
}

// Object names share the content's hash across conversations, so a hostile producer
// can copy a victim's description under <own conv>/<the victim's hash>, keeping the
// victim's chunk id, and forget its own conversation without ever knowing the content.
// The chunks Objects.Put writes name their object (jetstream.ChunkOwnerHeader): the
// forget refuses chunks written for another object, reports it, and the victim's
// object stays whole (read back with nats.go, which reads past the header).
func TestForgetPurgesNoChunksWrittenForAnotherObject(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	js := testJS(t, nc)
	obs, err := js.ObjectStore(ctx, st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	victimName := largeMessage(t, st, "victim", bytes.Repeat([]byte("NEEDLE-victim's large tool output "), 30))
	victim, err := obs.GetInfo(ctx, victimName)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := js.Stream(ctx, "OBJ_"+st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	chunk, err := objs.GetLastMsgForSubject(ctx, "$O."+st.Config().ObjectsBucket+".C."+victim.NUID)
	if err != nil || chunk.Header.Get(jetstream.ChunkOwnerHeader) != victimName {
		t.Fatalf("a chunk Objects.Put wrote: %v; want its %s header to name %s", err, jetstream.ChunkOwnerHeader, victimName)
	}
	hostileName := "hostile/" + victimName[strings.LastIndexByte(victimName, '/')+1:]
	copyDescription(t, st, js, "hostile", hostileName, *victim, "")

	out, err := st.Forget(ctx, "hostile")
	var step *jetstream.ForgetStepError
	if !errors.As(err, &step) || !strings.Contains(err.Error(), hostileName) || !strings.Contains(err.Error(), "written for another object") {
		t.Fatalf("forget: %v; want the objects step to report the chunks written for another object", err)
	}
	if out.Deleted.Objects != 0 {
		t.Errorf("forget counts %d objects deleted; want none", out.Deleted.Objects)
	}
	if got, err := obs.GetString(ctx, victimName); err != nil || !strings.Contains(got, "NEEDLE-victim") {
		t.Fatalf("the victim's object after the hostile conversation's forget: %.40q, %v; want it whole", got, err)
	}
	if _, err := obs.GetInfo(ctx, hostileName); err == nil {
		t.Fatal("the hostile copy of the description survived the forget")
	}
}

// The same check covers the chunks a description lists as its earlier copies: here
// the hostile copy names, as its own, the chunks of an object nats.go wrote (no header:
// the hash check alone, which they pass, so they are purged: the weaker guarantee of
// such objects) and, as an earlier copy, the chunks Objects.Put wrote for another
// conversation's object of the same content, which stay.
func TestForgetPurgesNoEarlierChunksWrittenForAnotherObject(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	allowRollUps(t, nc) // nats.go's Put below, as on a bucket of an earlier version
	ctx := ctxT(t)
	js := testJS(t, nc)
	obs, err := js.ObjectStore(ctx, st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("NEEDLE-shared large tool output "), 30)
	victimName := largeMessage(t, st, "victim", text)
	victim, err := obs.GetInfo(ctx, victimName)
	if err != nil {
		t.Fatal(err)
	}
	_, object, legacyName := offloaded(t, st, "legacy", text)
	legacy, err := obs.PutBytes(ctx, legacyName, object)
	if err != nil {
		t.Fatal(err)
	}
	hostileName := "hostile/" + victimName[strings.LastIndexByte(victimName, '/')+1:]
	copyDescription(t, st, js, "hostile", hostileName, *legacy, victim.NUID)

	_, err = st.Forget(ctx, "hostile")
	if err == nil || !strings.Contains(err.Error(), victim.NUID) || !strings.Contains(err.Error(), "written for another object") {
		t.Fatalf("forget: %v; want the objects step to report the earlier chunks written for another object", err)
	}
	if got, err := obs.GetString(ctx, victimName); err != nil || !strings.Contains(got, "NEEDLE-shared") {
		t.Fatalf("the victim's object after the hostile conversation's forget: %.40q, %v; want it whole", got, err)
	}
}

// An object nats.go's ObjectStore.Put wrote (as the TS client's nats.js does, and as
// clients before ChunkOwnerHeader did) has chunks without the header: its own
// conversation's forget still deletes it, on the hash check alone.
func TestForgetDeletesAnObjectNatsGoWrote(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	allowRollUps(t, nc) // nats.go's Put below, as on a bucket of an earlier version
	ctx := ctxT(t)
	obs, err := testJS(t, nc).ObjectStore(ctx, st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	stub, object, name := offloaded(t, st, "legacy", bytes.Repeat([]byte("NEEDLE-legacy large tool output "), 30))
	if _, err := obs.PutBytes(ctx, name, object); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Chat().Publish(ctx, "legacy", stub, ""); err != nil {
		t.Fatal(err)
	}
	out, err := st.Forget(ctx, "legacy")
	if err != nil || out.Deleted.Objects != 1 {
		t.Fatalf("forget: deleted %d objects, %v; want 1 and no error", out.Deleted.Objects, err)
	}
	if n := objectsStreamMsgs(t, nc); n != 0 {
		t.Fatalf("after the forget the objects stream holds %d messages; want none", n)
	}
}
