package jetstream_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// smallPayload is the max_payload of the servers of these tests: objects of a few
// chunks stay small.
const smallPayload = 16 << 10

// smallStore provisions the contract on a server whose max payload is smallPayload.
func smallStore(t *testing.T) (*nats.Conn, *jetstream.Store) {
	t.Helper()
	ns := jstest.ServerWith(t, jstest.MaxPayload(smallPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	st, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

// object returns an object body of about n bytes for conv, its name and reference.
func object(conv string, n int, fill string) ([]byte, *schemas.ContentRef) {
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat(fill, n/len(fill)))}
	stub, body, err := m.Offload(conv, jetstream.DefaultNames().ObjectsBucket, 1)
	if err != nil {
		panic(err)
	}
	return body, stub.ContentRef
}

func objectsStreamMsgs(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	s, err := testJS(t, nc).Stream(ctxT(t), "OBJ_"+jetstream.DefaultNames().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}

// An object of three times the max payload is stored in chunks under the max payload
// and read back whole; storing it again (a retried publish) stores nothing.
func TestObjectRoundTripInChunks(t *testing.T) {
	nc, st := smallStore(t)
	body, ref := object("c", 3*smallPayload, "0123456789")
	if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	stored := objectsStreamMsgs(t, nc)
	if stored < 4 { // three chunks at least, and the description
		t.Fatalf("%d messages in the objects stream; want chunks under the max payload", stored)
	}
	var inStatus bool
	for _, ss := range st.Status(ctxT(t)).Streams {
		inStatus = inStatus || ss.Name == "OBJ_"+st.Config().ObjectsBucket && ss.Messages == stored && ss.Error == ""
	}
	if !inStatus {
		t.Errorf("status %+v does not show the objects bucket's %d messages", st.Status(ctxT(t)).Streams, stored)
	}
	got, err := st.Objects().Read(ctxT(t), "c", ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes back; want the %d stored", len(got), len(body))
	}
	if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	if again := objectsStreamMsgs(t, nc); again != stored {
		t.Fatalf("storing the same object again made %d messages of %d; want none", again-stored, stored)
	}
	if err := st.Objects().Put(ctxT(t), "c", "c/"+strings.Repeat("0", 64), body); err == nil {
		t.Fatal("PutObject under a name that is not the object's hash succeeded")
	}
}

// A reference to another conversation's object or bucket, or over the max object size,
// is refused before anything is sent to the server, even when the object exists.
func TestObjectReferenceRefusedBeforeAnyRequest(t *testing.T) {
	nc, st := smallStore(t)
	body, other := object("other", 100, "secret ")
	if err := st.Objects().Put(ctxT(t), "other", other.Name, body); err != nil {
		t.Fatal(err)
	}
	huge := *other
	huge.Name, huge.Size = "mine/"+huge.SHA256, jetstream.DefaultMaxObjectSize+1
	bucket := *other
	bucket.Name, bucket.Bucket = "mine/"+bucket.SHA256, "KV_compaction"
	for _, tt := range []struct {
		name string
		ref  *schemas.ContentRef
		want string
	}{
		{"another conversation's object", other, `outside conversation "mine"`},
		{"another bucket", &bucket, `names bucket "KV_compaction"`},
		{"over the max object size", &huge, "over the max object size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sent := nc.Stats().OutMsgs
			_, err := st.Objects().Read(ctxT(t), "mine", tt.ref)
			if !errors.Is(err, jetstream.ErrObjectRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ReadObject = %v; want ErrObjectRefused saying %q", err, tt.want)
			}
			if n := nc.Stats().OutMsgs - sent; n != 0 {
				t.Fatalf("%d requests sent for a refused reference; want none", n)
			}
		})
	}
}

// putMeta writes an object description by hand, as any client with write rights on the
// objects bucket could.
func putMeta(t *testing.T, nc *nats.Conn, name string, info map[string]any) {
	t.Helper()
	b, _ := json.Marshal(info)
	m := nats.NewMsg("$O." + jetstream.DefaultNames().ObjectsBucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name)))
	m.Header.Set("Nats-Rollup", "sub")
	m.Data = b
	if _, err := testJS(t, nc).PublishMsg(ctxT(t), m); err != nil {
		t.Fatal(err)
	}
}

func putChunk(t *testing.T, nc *nats.Conn, nuid string, data []byte) {
	t.Helper()
	if _, err := testJS(t, nc).Publish(ctxT(t), "$O."+jetstream.DefaultNames().ObjectsBucket+".C."+nuid, data); err != nil {
		t.Fatal(err)
	}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
}

// Gone, deleted, corrupt or hostile objects are ErrObjectMissing or ErrObjectRefused,
// decided from the description before reading, or from the bytes' hash after; no more
// than the reference's size is read.
func TestObjectMissingCorruptOrHostile(t *testing.T) {
	nc, st := smallStore(t)
	// Roll-ups as on a bucket of an earlier version: each description below replaces
	// the name's earlier ones (TestProducerCannotRollUpOrRewriteObjects: without them,
	// readers read an earlier whole one).
	allowRollUps(t, nc)
	bucket := jetstream.DefaultNames().ObjectsBucket
	obs, err := testJS(t, nc).ObjectStore(ctxT(t), bucket)
	if err != nil {
		t.Fatal(err)
	}
	read := func(ref *schemas.ContentRef) error {
		_, err := st.Objects().Read(ctxT(t), "c", ref)
		return err
	}
	t.Run("never stored", func(t *testing.T) {
		_, ref := object("c", 50, "never ")
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "never stored") {
			t.Fatalf("read = %v; want ErrObjectMissing", err)
		}
	})
	t.Run("deleted", func(t *testing.T) {
		body, ref := object("c", 50, "deleted ")
		if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
			t.Fatal(err)
		}
		if err := obs.Delete(ctxT(t), ref.Name); err != nil {
			t.Fatal(err)
		}
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) {
			t.Fatalf("read = %v; want ErrObjectMissing", err)
		}
	})
	t.Run("other bytes of the same size", func(t *testing.T) {
		body, ref := object("c", 50, "genuine ")
		forged := bytes.Repeat([]byte("x"), len(body))
		putChunk(t, nc, "FORGED1", forged)
		putMeta(t, nc, ref.Name, map[string]any{"name": ref.Name, "bucket": bucket, "nuid": "FORGED1", "size": len(body), "chunks": 1, "digest": digest(body)})
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "do not hash") {
			t.Fatalf("read = %v; want ErrObjectMissing for bytes that do not hash to the reference", err)
		}
	})
	t.Run("more bytes than described", func(t *testing.T) {
		body, ref := object("c", 50, "short ")
		putChunk(t, nc, "LONG1", body)
		putChunk(t, nc, "LONG1", bytes.Repeat([]byte("y"), 8000))
		putMeta(t, nc, ref.Name, map[string]any{"name": ref.Name, "bucket": bucket, "nuid": "LONG1", "size": len(body), "chunks": 1, "digest": digest(body)})
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "more than its") {
			t.Fatalf("read = %v; want ErrObjectMissing for chunks beyond the size", err)
		}
	})
	t.Run("description of another size or digest", func(t *testing.T) {
		body, ref := object("c", 50, "size ")
		putChunk(t, nc, "SIZE1", body)
		putMeta(t, nc, ref.Name, map[string]any{"name": ref.Name, "bucket": bucket, "nuid": "SIZE1", "size": 1 << 40, "chunks": 1, "digest": digest(body)})
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "the reference says") {
			t.Fatalf("read = %v; want a corrupt object", err)
		}
		putMeta(t, nc, ref.Name, map[string]any{"name": ref.Name, "bucket": bucket, "nuid": "SIZE1", "size": len(body), "chunks": 1, "digest": digest([]byte("other"))})
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "digest") {
			t.Fatalf("read = %v; want a corrupt object", err)
		}
	})
	t.Run("chunks on a wildcard subject", func(t *testing.T) {
		secret, _ := object("other", 50, "secret ")
		putChunk(t, nc, "SECRET", secret)
		_, ref := object("c", 50, "wild ")
		putMeta(t, nc, ref.Name, map[string]any{"name": ref.Name, "bucket": bucket, "nuid": "*", "size": ref.Size, "chunks": 1, "digest": "SHA-256=" + base64.URLEncoding.EncodeToString(mustHex(ref.SHA256))})
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) || !strings.Contains(err.Error(), "chunks are not described") {
			t.Fatalf("read = %v; want a corrupt object", err)
		}
	})
	t.Run("a link", func(t *testing.T) {
		body, target := object("other", 50, "linked ")
		if err := st.Objects().Put(ctxT(t), "other", target.Name, body); err != nil {
			t.Fatal(err)
		}
		info, err := obs.GetInfo(ctxT(t), target.Name)
		if err != nil {
			t.Fatal(err)
		}
		ref := *target
		ref.Name = "c/" + target.SHA256
		if _, err := obs.AddLink(ctxT(t), ref.Name, info); err != nil {
			t.Fatal(err)
		}
		if err := read(&ref); !errors.Is(err, jetstream.ErrObjectRefused) || !strings.Contains(err.Error(), "link") {
			t.Fatalf("read = %v; want ErrObjectRefused for a link", err)
		}
	})
	t.Run("no bucket", func(t *testing.T) {
		_, ref := object("c", 50, "bucketless ")
		if err := testJS(t, nc).DeleteObjectStore(ctxT(t), bucket); err != nil {
			t.Fatal(err)
		}
		if err := read(ref); !errors.Is(err, jetstream.ErrObjectMissing) {
			t.Fatalf("read = %v; want ErrObjectMissing", err)
		}
	})
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// ResolveEntries restores stubs in place and turns a stub it cannot restore into an
// invalid entry with the reason; a failure to read is an error, never a gap.
func TestResolveEntries(t *testing.T) {
	_, st := smallStore(t)
	full := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat("output ", 5000)), Reasoning: "r"}
	stub, body, err := full.Offload("c", st.Config().ObjectsBucket, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Objects().Put(ctxT(t), "c", stub.ContentRef.Name, body); err != nil {
		t.Fatal(err)
	}
	gone, _, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("never stored")}).Offload("c", st.Config().ObjectsBucket, 1)
	foreign, foreignBody, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("someone else's")}).Offload("d", st.Config().ObjectsBucket, 1)
	if err := st.Objects().Put(ctxT(t), "d", foreign.ContentRef.Name, foreignBody); err != nil {
		t.Fatal(err)
	}
	plain := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("small")}
	es := []schemas.Entry{{Seq: 1, Message: plain}, {Seq: 2, Message: stub}, {Seq: 3, Message: gone}, {Seq: 4, Message: foreign}}
	if err := st.Objects().Resolve(ctxT(t), "c", es); err != nil {
		t.Fatal(err)
	}
	want, _ := full.Encode()
	if got, _ := es[1].Message.Encode(); es[1].Err != nil || !bytes.Equal(got, want) {
		t.Fatalf("stub resolved to %.100s (%v); want the whole message", got, es[1].Err)
	}
	if es[0].Err != nil || es[0].Message.Content.String() != "small" {
		t.Fatalf("plain message changed: %+v", es[0])
	}
	if !errors.Is(es[2].Err, jetstream.ErrObjectMissing) || es[2].Message.Role != "" {
		t.Fatalf("missing object: %+v; want an invalid entry matching ErrObjectMissing", es[2])
	}
	if !errors.Is(es[3].Err, jetstream.ErrObjectRefused) || strings.Contains(fmt.Sprint(es[3]), "someone else's") {
		t.Fatalf("foreign object: %+v; want an invalid entry matching ErrObjectRefused", es[3])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	again := []schemas.Entry{{Seq: 2, Message: stub}}
	if err := st.Objects().Resolve(ctx, "c", again); err == nil || again[0].Err != nil {
		t.Fatalf("resolve without a connection to the server: %v, entry error %v; want an error and the entry untouched", err, again[0].Err)
	}
}

// With a finite CHAT max age, the objects bucket keeps objects for that age plus the
// duplicate window, and an object stored more than half a duplicate window ago is
// stored again when a message refers to it anew (its age starts over, so it outlives
// the new message); within that time a retry reuses it.
func TestObjectStoredAgainUnderAFiniteMaxAge(t *testing.T) {
	ns := jstest.ServerWith(t, jstest.MaxPayload(smallPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	cfg := jetstream.DefaultConfig()
	cfg.DuplicateWindow, cfg.ChatMaxAge = 2*time.Second, time.Hour
	st, err := jetstream.Provision(ctxT(t), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := testJS(t, nc).Stream(ctxT(t), "OBJ_"+cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != time.Hour+2*time.Second {
		t.Fatalf("objects bucket keeps objects %s; want CHAT's max age plus the duplicate window", got)
	}
	obs, err := testJS(t, nc).ObjectStore(ctxT(t), cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	body, ref := object("c", 2*smallPayload, "aging ")
	if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	first, err := obs.GetInfo(ctxT(t), ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	if again, _ := obs.GetInfo(ctxT(t), ref.Name); again.NUID != first.NUID {
		t.Fatal("an object stored again within half a duplicate window; want it reused")
	}
	for time.Since(first.ModTime) <= cfg.DuplicateWindow/2 {
		time.Sleep(50 * time.Millisecond)
	}
	if err := st.Objects().Put(ctxT(t), "c", ref.Name, body); err != nil {
		t.Fatal(err)
	}
	later, err := obs.GetInfo(ctxT(t), ref.Name)
	if err != nil {
		t.Fatal(err)
	}
	if later.NUID == first.NUID || !later.ModTime.After(first.ModTime) {
		t.Fatalf("object after half a duplicate window: stored at %s as %s; want it stored again", later.ModTime, later.NUID)
	}
	if got, err := st.Objects().Read(ctxT(t), "c", ref); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after storing again: %d bytes, %v", len(got), err)
	}
	// Stored again without a purge or a roll-up (a producer may do neither): the old
	// chunks and description stay until the age limit, and the new description names
	// the old chunks, so a forget finds them.
	if n := objectsStreamMsgs(t, nc); n != uint64(first.Chunks+later.Chunks)+2 {
		t.Fatalf("objects stream holds %d messages; want both copies' chunks (%d, %d) and descriptions", n, first.Chunks, later.Chunks)
	}
	if got := later.Metadata[jetstream.EarlierChunksKey]; got != first.NUID {
		t.Fatalf("the new description names earlier chunks %q; want the first copy's %s", got, first.NUID)
	}
	// Forget finds a conversation's objects through its messages' stubs.
	stub, err := json.Marshal(schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", ContentRef: ref})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Chat().Publish(ctxT(t), "c", stub, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Forget(ctxT(t), "c"); err != nil {
		t.Fatal(err)
	}
	if n := objectsStreamMsgs(t, nc); n != 0 {
		t.Fatalf("after forgetting the conversation the objects stream holds %d messages; want none (both copies' chunks)", n)
	}
}
