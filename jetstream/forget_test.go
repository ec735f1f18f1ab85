package jetstream_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// seedConversation stores something of conv in every place forget deletes: messages
// holding needle, three revisions of its value, a policy, a pending request, events, a
// dead letter, an idle timer, and two objects (plus a deleted one) in the objects
// bucket. It returns the last CHAT sequence.
func seedConversation(t *testing.T, st *jetstream.Store, obs natsjs.ObjectStore, conv, needle string) uint64 {
	t.Helper()
	ctx := ctxT(t)
	var last uint64
	for i := range 4 {
		seq, err := st.Chat().Publish(ctx, conv, fmt.Appendf(nil, `{"role":"user","content":"%s message %d"}`, needle, i), "")
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	var rev uint64
	for g := range 3 {
		r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: uint64(g + 1), Summary: "summary of " + needle,
			TailStartSeq: last, FirstSeq: 1, CreatedAt: time.Now()}
		var err error
		if rev, err = st.Results().Put(ctx, r, rev); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Policies().Put(ctx, conv, fmt.Appendf(nil, `{"instructions":"remember %s"}`, needle), 0); err != nil {
		t.Fatal(err)
	}
	req := schemas.Request{RequestID: "r-" + conv, Conversation: conv, Trigger: schemas.TriggerManual,
		Instructions: "keep " + needle, RequestedAt: time.Now(), UpToSeq: last}
	if _, err := st.Queue().Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{schemas.EventRequested, schemas.EventFailed} {
		if err := st.Events().Publish(ctx, schemas.Event{Type: typ, Conversation: conv, RequestID: req.RequestID, Error: needle}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Events().PublishDead(ctx, conv, schemas.DeadLetter{Request: req, Error: "llm down", Attempts: 5}); err != nil {
		t.Fatal(err)
	}
	if err := st.Activity().ArmIdle(conv, time.Hour, last); err != nil {
		t.Fatal(err)
	}
	// Objects of messages over the max payload, each named by its stub in CHAT (forget
	// finds them there), one of them deleted since.
	for _, name := range []string{"x", "y", "gone"} {
		body := bytes.Repeat([]byte(needle+" object "+name+" "), 50)
		if err := st.Objects().Put(ctx, conv, schemas.ObjectName(conv, body), body); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Chat().Publish(ctx, conv, stubOf(t, st, conv, body), ""); err != nil {
			t.Fatal(err)
		}
		if name == "gone" {
			if err := obs.Delete(ctx, schemas.ObjectName(conv, body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	last, err := st.Chat().Publish(ctx, conv, fmt.Appendf(nil, `{"role":"user","content":"%s last"}`, needle), "")
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// After Forget, no stream, bucket or object store holds a byte of the conversation
// (its id or its content), the tombstone holds its last sequence under the hash of its
// id, and another conversation is untouched.
func TestForgetDeletesEverythingOfTheConversation(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	allowRollUps(t, nc) // nats.go's Delete below, as on a bucket of an earlier version
	ctx := ctxT(t)
	cfg := st.Config()
	obs, err := testJS(t, nc).ObjectStore(ctx, cfg.ObjectsBucket) // provisioned
	if err != nil {
		t.Fatal(err)
	}
	seedConversation(t, st, obs, "keep-me", "NEEDLE-kept")
	last := seedConversation(t, st, obs, "forget-me", "NEEDLE-forgotten")
	// Something in every place is there before: the scan sees it.
	if found, _ := jstest.Scan(t, nc, "forget-me", "NEEDLE-forgotten"); len(found) < 10 {
		t.Fatalf("before the forget, the scan finds the conversation in %d messages; want it everywhere: %v", len(found), found)
	}
	out, err := st.Forget(ctx, "forget-me")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("forget answered %+v", out)
	want := schemas.ForgetCounts{ChatMessages: 8, ChatMessagesErased: 8, ResultRevisions: 3, PolicyRevisions: 1, Requests: 1, Events: 2,
		DeadLetters: 1, ActivityMarkers: 1, Objects: 2}
	if out.Deleted != want || out.Conversation != "forget-me" || out.ThroughSeq < last {
		t.Fatalf("forget answered %+v; want deleted %+v through seq ≥ %d", out, want, last)
	}
	found, read := jstest.Scan(t, nc, "forget-me", "NEEDLE-forgotten")
	if len(found) > 0 {
		t.Fatalf("after the forget, %d stored messages still hold the conversation:\n%v", len(found), found)
	}
	kept, _ := jstest.Scan(t, nc, "keep-me", "NEEDLE-kept")
	if len(kept) < 10 {
		t.Fatalf("the other conversation is in %d messages after the forget; want it untouched: %v", len(kept), kept)
	}
	t.Logf("scanned %d stored messages: none holds the forgotten conversation", read)

	tomb, err := st.Forgotten(ctx, "forget-me")
	if err != nil || tomb == nil || tomb.ThroughSeq != out.ThroughSeq {
		t.Fatalf("tombstone %+v, %v; want through_seq %d", tomb, err, out.ThroughSeq)
	}
	if tomb, err := st.Forgotten(ctx, "keep-me"); tomb != nil || err != nil {
		t.Fatalf("tombstone of a conversation never forgotten: %+v, %v", tomb, err)
	}
	for _, name := range []string{"x", "y"} {
		body := bytes.Repeat([]byte("NEEDLE-kept object "+name+" "), 50)
		if _, err := obs.GetInfo(ctx, schemas.ObjectName("keep-me", body)); err != nil {
			t.Errorf("object %s of keep-me after forgetting another conversation: %v", name, err)
		}
	}
	if v, _, err := st.Results().Get(ctx, "keep-me", true); err != nil || v == nil || v.Generation != 3 {
		t.Errorf("value of the other conversation: %+v, %v", v, err)
	}

	// Forgetting again, or forgetting what was never there, deletes nothing and is no
	// error; an invalid id is refused before anything is written.
	for _, conv := range []string{"forget-me", "never-there"} {
		again, err := st.Forget(ctx, conv)
		if err != nil || again.Deleted != (schemas.ForgetCounts{}) {
			t.Errorf("forget %s: %+v, %v; want nothing deleted and no error", conv, again, err)
		}
	}
	for _, conv := range []string{"", "a.b", "*", ">", strings.Repeat("x", 129)} {
		if _, err := st.Forget(ctx, conv); !errors.Is(err, schemas.ErrInvalid) {
			t.Errorf("forget %q: %v; want schemas.ErrInvalid", conv, err)
		}
	}
}

// Forget keeps what is published after it: a message above the tombstone's sequence
// is a new conversation of the same id.
func TestForgetKeepsLaterMessages(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		for i := range 3 {
			if _, err := st.Chat().Publish(ctx, "again", fmt.Appendf(nil, `{"role":"user","content":"old %d"}`, i), ""); err != nil {
				t.Fatal(err)
			}
		}
		out, err := st.Forget(ctx, "again")
		if err != nil {
			t.Fatal(err)
		}
		seq, err := st.Chat().Publish(ctx, "again", []byte(`{"role":"user","content":"new"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		es, err := st.Chat().LoadEntries(ctx, "again", 0, 0)
		if err != nil || len(es) != 1 || es[0].Seq != seq || seq <= out.ThroughSeq {
			t.Fatalf("after the forget: %d entries (%v); want only the new message at %d > %d", len(es), err, seq, out.ThroughSeq)
		}
	})
}

// RemoveResult deletes the value's revisions up to the one given and never a newer one;
// TakeBack deletes exactly what was recorded.
func TestRemoveResultAndTakeBack(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		r := &schemas.Result{SchemaVersion: 1, Conversation: "c", Summary: "old", TailStartSeq: 1, CreatedAt: time.Now()}
		rev1, err := st.Results().Put(ctx, r, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.Summary = "newer"
		rev2, err := st.Results().Put(ctx, r, rev1)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Results().Remove(ctx, "c", rev1); err != nil {
			t.Fatal(err)
		}
		v, rev, err := st.Results().Get(ctx, "c", true)
		if err != nil || v == nil || rev != rev2 || v.Summary != "newer" {
			t.Fatalf("after removing through revision %d: %+v at %d, %v; want the newer value at %d", rev1, v, rev, err, rev2)
		}
		var w jetstream.Writes
		if err := st.Events().PublishRecorded(ctx, schemas.Event{Type: schemas.EventStarted, Conversation: "c", RequestID: "taken-back"}, &w); err != nil {
			t.Fatal(err)
		}
		if err := st.Events().Publish(ctx, schemas.Event{Type: schemas.EventStarted, Conversation: "c", RequestID: "kept-event"}); err != nil {
			t.Fatal(err)
		}
		if err := st.Events().PublishDeadRecorded(ctx, "c", schemas.DeadLetter{Request: schemas.Request{RequestID: "taken-back"}}, &w); err != nil {
			t.Fatal(err)
		}
		seq, err := st.Queue().Enqueue(ctx, schemas.Request{RequestID: "taken-back", Conversation: "c", Trigger: "budget"})
		if err != nil {
			t.Fatal(err)
		}
		w.Request(seq)
		w.Result(rev2)
		if err := st.TakeBack(ctx, "c", &w); err != nil {
			t.Fatal(err)
		}
		if err := st.TakeBack(ctx, "c", &w); err != nil { // all gone already: no error
			t.Fatalf("second take-back: %v", err)
		}
		found, _ := jstest.Scan(t, nc, "taken-back")
		if len(found) > 0 {
			t.Fatalf("after the take-back: %v", found)
		}
		if found, _ := jstest.Scan(t, nc, "kept-event"); len(found) != 1 {
			t.Fatalf("the event not recorded: %v; want it kept", found)
		}
		if v, _, _ := st.Results().Get(ctx, "c", true); v != nil {
			t.Fatalf("value after the take-back: %+v", v)
		}
	})
}

// The forgotten conversation's raw history is overwritten in the server's files, not
// only unlinked: no CHAT file holds its bytes afterwards, while the other
// conversation's are still there. (KV buckets deny message deletes: a value's bytes
// stay in its stream's file until the server compacts that block; see the README.)
func TestForgetErasesRawHistoryOnDisk(t *testing.T) {
	dir := t.TempDir()
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	for i := range 300 { // more than one batch of direct gets
		for _, c := range []string{"disk-gone", "disk-kept"} {
			if _, err := st.Chat().Publish(ctx, c, fmt.Appendf(nil, `{"role":"user","content":"NEEDLE-%s %d"}`, c, i), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	onDisk := func(needle string) int {
		n := 0
		err := filepath.WalkDir(filepath.Join(dir, "jetstream"), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.Contains(p, string(filepath.Separator)+"CHAT"+string(filepath.Separator)) {
				return err
			}
			b, err := os.ReadFile(p)
			n += bytes.Count(b, []byte(needle))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := onDisk("NEEDLE-disk-gone"); n != 300 {
		t.Fatalf("before the forget CHAT's files hold the needle %d times; want 300", n)
	}
	out, err := st.Forget(ctx, "disk-gone")
	if err != nil || out.Deleted.ChatMessages != 300 || out.Deleted.ChatMessagesErased != 300 {
		t.Fatalf("forget: %+v, %v; want 300 messages, all erased", out, err)
	}
	if n := onDisk("NEEDLE-disk-gone"); n != 0 {
		t.Fatalf("after the forget CHAT's files still hold the forgotten messages %d times", n)
	}
	if n := onDisk("NEEDLE-disk-kept"); n != 300 {
		t.Fatalf("after the forget CHAT's files hold the other conversation %d times; want 300", n)
	}
}

// BenchmarkForget forgets a conversation of 1,000 messages among as many of another:
// the erase of each message, the purges and the tombstone.
func BenchmarkForget(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		for i := range 1000 {
			for _, c := range []string{"bench-gone", "bench-kept"} {
				if _, err := st.Chat().Publish(ctx, c, fmt.Appendf(nil, `{"role":"user","content":"message %d of %s"}`, i, c), ""); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		if out, err := st.Forget(ctx, "bench-gone"); err != nil || out.Deleted.ChatMessages != 1000 {
			b.Fatalf("forget: %+v, %v", out, err)
		}
	}
}

// Object descriptions are written by producers: one in the forgotten conversation's
// prefix that names another conversation's chunks, or every chunk with a wildcard, must
// not make forget delete them. The forget reports it and still deletes everything else.
func TestForgetTrustsNoObjectDescription(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	allowRollUps(t, nc) // nats.go's Put below, as on a bucket of an earlier version
	ctx := ctxT(t)
	cfg := st.Config()
	obs, err := testJS(t, nc).ObjectStore(ctx, cfg.ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := obs.PutString(ctx, "victim/big", "NEEDLE-victim's large tool output")
	if err != nil {
		t.Fatal(err)
	}
	seedConversation(t, st, obs, "hostile", "NEEDLE-hostile")
	// Descriptions in hostile's prefix pointing at the victim's chunks, and at all chunks.
	for name, nuid := range map[string]string{"hostile/copied": victim.NUID, "hostile/wild": ">", "hostile/empty": ""} {
		meta := fmt.Sprintf(`{"name":%q,"bucket":%q,"nuid":%q,"size":33,"chunks":1,"digest":"SHA-256=x"}`, name, cfg.ObjectsBucket, nuid)
		subj := "$O." + cfg.ObjectsBucket + ".M." + base64URL(name)
		if _, err := testJS(t, nc).Publish(ctx, subj, []byte(meta), natsjs.WithMsgID(name)); err != nil {
			t.Fatal(err)
		}
		stub := fmt.Sprintf(`{"role":"user","content_ref":{"bucket":%q,"name":%q,"size":33,"sha256":"%064d"}}`, cfg.ObjectsBucket, name, 0)
		if _, err := st.Chat().Publish(ctx, "hostile", []byte(stub), ""); err != nil {
			t.Fatal(err)
		}
	}
	out, err := st.Forget(ctx, "hostile")
	var step *jetstream.ForgetStepError
	if !errors.As(err, &step) || step.Step != "delete the objects" || !strings.Contains(err.Error(), "hostile/copied") {
		t.Fatalf("forget: %v; want the objects step to report the descriptions it did not trust", err)
	}
	if got, err := obs.GetString(ctx, "victim/big"); err != nil || !strings.Contains(got, "NEEDLE-victim") {
		t.Fatalf("the victim's object after the forget: %q, %v; want it whole", got, err)
	}
	// Every other place was still deleted, the dead letters and events after the objects too.
	if out.Deleted.ChatMessages == 0 || out.Deleted.DeadLetters == 0 || out.Deleted.Events == 0 {
		t.Fatalf("deleted %+v; want the messages, dead letters and events too", out.Deleted)
	}
	if found, _ := jstest.Scan(t, nc, "hostile/", "NEEDLE-hostile"); len(found) > 0 {
		t.Fatalf("after the forget: %v", found)
	}
}

// stubOf is the encoded stub of a tool message whose content is body, stored as an
// object of conv.
func stubOf(t *testing.T, st *jetstream.Store, conv string, body []byte) []byte {
	t.Helper()
	m := schemas.Message{Role: schemas.RoleUser, ContentRef: &schemas.ContentRef{Bucket: st.Config().ObjectsBucket,
		Name: schemas.ObjectName(conv, body), Size: int64(len(body)), SHA256: strings.TrimPrefix(schemas.ObjectName("", body), "/")}}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func base64URL(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }

// Dead letters of requests that named no valid conversation are no conversation's:
// forgetting one named "invalid" leaves them.
func TestForgetLeavesTheDeadLettersOfInvalidRequests(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	if err := st.Events().PublishDead(ctx, "", schemas.DeadLetter{Error: "request does not decode"}); err != nil {
		t.Fatal(err)
	}
	out, err := st.Forget(ctx, "invalid")
	if err != nil || out.Deleted.DeadLetters != 0 {
		t.Fatalf("forget invalid: %+v, %v; want no dead letter deleted", out.Deleted, err)
	}
	str, err := testJS(t, nc).Stream(ctx, st.Config().DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := str.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("dead letters after the forget: %+v, %v; want the invalid request's", info, err)
	}
}

// Forgetting a conversation forgets its branches (<conv>--<digest>, where the proxy
// stores an edited history), and nothing of another conversation that shares the
// prefix without the separator.
func TestForgetTakesTheBranches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		for _, conv := range []string{"root", "root--0123456789abcdef", "root--fedcba9876543210", "rootless", "other--0123456789abcdef"} {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("in " + conv)}
			data, _ := m.Encode()
			if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
				t.Fatal(err)
			}
		}
		out, err := st.Forget(ctx, "root")
		if err != nil {
			t.Fatal(err)
		}
		if out.Deleted.ChatMessages != 3 {
			t.Fatalf("forget deleted %d messages; want 3 (root and its two branches)", out.Deleted.ChatMessages)
		}
		for conv, want := range map[string]bool{"root": false, "root--0123456789abcdef": false, "root--fedcba9876543210": false, "rootless": true, "other--0123456789abcdef": true} {
			seq, err := st.Chat().LastSeq(ctx, conv)
			if err != nil {
				t.Fatal(err)
			}
			if (seq != 0) != want {
				t.Errorf("%s has messages: %v; want %v", conv, seq != 0, want)
			}
		}
	})
}

// A forget takes exactly its branches: <conv>--<16 lowercase hex digits>, whatever conv
// holds ("team--x" has its own), and never a conversation that only starts with conv
// and "--" (proj--billing is not proj's).
func TestForgetTakesOnlyItsBranches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		convs := []string{"proj", "proj--billing", "proj--0123456789abcdef", "proj--0123456789ABCDEF", "proj--0123456789abcdef0",
			"team--x", "team--x--fedcba9876543210"}
		for _, conv := range convs {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("in " + conv)}
			data, _ := m.Encode()
			if _, err := st.Chat().Publish(ctx, conv, data, ""); err != nil {
				t.Fatal(err)
			}
		}
		for _, conv := range []string{"proj", "team--x"} {
			if _, err := st.Forget(ctx, conv); err != nil {
				t.Fatal(err)
			}
		}
		gone := map[string]bool{"proj": true, "proj--0123456789abcdef": true, "team--x": true, "team--x--fedcba9876543210": true}
		for _, conv := range convs {
			seq, err := st.Chat().LastSeq(ctx, conv)
			if err != nil {
				t.Fatal(err)
			}
			if (seq == 0) != gone[conv] {
				t.Errorf("%s gone: %v; want %v", conv, seq == 0, gone[conv])
			}
		}
	})
}
