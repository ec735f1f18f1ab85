package jetstream_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// offloaded is the stub and the object of a user message with text, as a client
// publishing a message over the max payload makes them.
func offloaded(t *testing.T, st *jetstream.Store, conv string, text []byte) (stub, object []byte, name string) {
	t.Helper()
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(string(text))}
	sm, object, err := m.Offload(conv, st.Config().ObjectsBucket, len(text)/4)
	if err != nil {
		t.Fatal(err)
	}
	if stub, err = sm.Encode(); err != nil {
		t.Fatal(err)
	}
	return stub, object, sm.ContentRef.Name
}

// largeMessage stores text as an object of conv and publishes its stub, as a client
// publishing a message over the max payload does, and returns the object's name.
func largeMessage(t *testing.T, st *jetstream.Store, conv string, text []byte) string {
	t.Helper()
	ctx := ctxT(t)
	stub, object, name := offloaded(t, st, conv, text)
	if err := st.Objects().Put(ctx, conv, name, object); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Chat().Publish(ctx, conv, stub, ""); err != nil {
		t.Fatal(err)
	}
	return name
}

// Forget orders objects against its tombstone: an object stored before it, of a message
// of the forgotten conversation, is deleted; one stored after it (the same content sent
// again, for a message published after the forget, while the forget runs) stays, and
// the new message reads it whole.
func TestForgetOrdersObjectsAgainstTheTombstone(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	again := bytes.Repeat([]byte("NEEDLE-again sent twice "), 40)
	once := bytes.Repeat([]byte("NEEDLE-once sent before the forget "), 40)
	nameAgain := largeMessage(t, st, "ord", again)
	nameOnce := largeMessage(t, st, "ord", once)
	stubAgain, objectAgain, _ := offloaded(t, st, "ord", again)
	jetstream.SetForgetStepHook(t, func(step string) {
		if step == "objects" { // the agent sends the same content again: its client stores it first
			if err := st.Objects().Put(ctx, "ord", nameAgain, objectAgain); err != nil {
				t.Error(err)
			}
		}
	})
	out, err := st.Forget(ctx, "ord")
	if err != nil {
		t.Fatal(err)
	}
	// ... then publishes its stub, after the forget.
	seq, err := st.Chat().Publish(ctx, "ord", stubAgain, "")
	if err != nil || seq <= out.ThroughSeq {
		t.Fatalf("publish after the forget: %d, %v (forgotten through %d)", seq, err, out.ThroughSeq)
	}
	if out.Deleted.Objects != 1 {
		t.Errorf("deleted %d objects; want 1, the one stored before the tombstone", out.Deleted.Objects)
	}
	es, err := st.Chat().LoadEntries(ctx, "ord", out.ThroughSeq+1, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("the new conversation: %d messages, %v", len(es), err)
	}
	if err := st.Objects().Resolve(ctx, "ord", es); err != nil || es[0].Err != nil || !strings.Contains(es[0].Message.Content.String(), "NEEDLE-again") {
		t.Fatalf("the new message's object: %v, %v; want it whole", err, es[0].Err)
	}
	testObs := objectStore(t, nc, st)
	if _, err := testObs.GetInfo(ctx, nameOnce); err == nil {
		t.Errorf("object %s, stored before the tombstone, survived the forget", nameOnce)
	}
}

// Forget finds a conversation's objects through its messages: it reads the
// descriptions of its own objects and no other's, and lists nothing, however many
// objects other conversations hold.
func TestForgetReadsOnlyTheConversationsObjects(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	for i := range 60 {
		largeMessage(t, st, fmt.Sprintf("other-%d", i), fmt.Appendf(nil, "NEEDLE-other %d %s", i, strings.Repeat("x", 300)))
	}
	mine := map[string]bool{}
	for i := range 3 {
		mine[largeMessage(t, st, "mine", fmt.Appendf(nil, "NEEDLE-mine %d %s", i, strings.Repeat("y", 300)))] = true
	}
	// The spy's messages go to a channel from the connection's reader, in order: once
	// its Flush returns, every message the server sent it before is in the channel (an
	// async handler could still be running).
	spy := jstest.Conn(t, srv)
	seen := make(chan *nats.Msg, 1<<14)
	objects := "OBJ_" + st.Config().ObjectsBucket
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE." + objects + ".>", "$JS.API.CONSUMER.CREATE." + objects,
		"$JS.API.STREAM.MSG.GET." + objects, "$JS.API.DIRECT.GET." + objects + ".>"} {
		if _, err := spy.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	out, err := st.Forget(ctx, "mine")
	if err != nil || out.Deleted.Objects != 3 {
		t.Fatalf("forget: %+v, %v; want 3 objects deleted", out.Deleted, err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var creates int
	var metaReads []string
	for len(seen) > 0 {
		m := <-seen
		if strings.HasPrefix(m.Subject, "$JS.API.CONSUMER.CREATE.") {
			creates++
			continue
		}
		var req struct {
			Last string `json:"last_by_subj"`
		}
		_ = json.Unmarshal(m.Data, &req)
		if strings.Contains(req.Last, ".M.") || strings.Contains(m.Subject, ".M.") {
			metaReads = append(metaReads, req.Last+strings.TrimPrefix(m.Subject, "$JS.API.DIRECT.GET."+objects))
		}
	}
	if creates != 0 || len(metaReads) != len(mine) {
		t.Fatalf("forget made %d consumers on the objects stream and read %d descriptions (%v); want none and %d, its own",
			creates, len(metaReads), metaReads, len(mine))
	}
}

func objectStore(t *testing.T, nc *nats.Conn, st *jetstream.Store) natsjs.ObjectStore {
	t.Helper()
	obs, err := testJS(t, nc).ObjectStore(ctxT(t), st.Config().ObjectsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return obs
}
