package pipeline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// A large message whose content the conversation sent before: its object is stored
// already, so the publish stores nothing; a forget of the conversation then runs whole
// before the stub is published, deleting that object. The new message keeps its
// content: the client stores the object again once it sees the forget.
func TestLargeMessagePublishedAcrossAForgetKeepsItsObject(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		big := bigOutput("c1", 3*maxPayload)
		big.Role, big.ToolCallID = schemas.RoleUser, "" // a pasted log: no tool round
		if _, err := c.Publish(ctx, "fgo", big); err != nil {
			t.Fatal(err)
		}
		var forgotten uint64
		pipeline.SetBeforeStubHook(t, func() {
			out, err := st.Forget(ctx, "fgo")
			if err != nil {
				t.Error(err)
			}
			if forgotten = out.Deleted.Objects; forgotten != 1 {
				t.Errorf("the forget deleted %d objects; want the first message's", forgotten)
			}
		})
		if _, err := c.Publish(ctx, "fgo", big); err != nil {
			t.Fatal(err)
		}
		cx, err := c.Context(ctx, "fgo")
		if err != nil {
			t.Fatal(err)
		}
		if len(cx.Skipped) != 0 || len(cx.Messages) != 1 || !strings.Contains(cx.Messages[0].Content.String(), "NEEDLE-tail") {
			t.Fatalf("context after the forget: %d messages, skipped %+v; want the whole new message", len(cx.Messages), cx.Skipped)
		}
	})
}

// A forget that runs once a large message's stub is stored, before the client checks
// its object, takes the message and the object both. The client sees a forget newer
// than its object: it must not store the object again, since the forget covers the
// stub, and stored again the content would outlive the forget (nothing deletes it
// before its age limit). It did, once.
func TestAForgetThatCoversTheStubKeepsTheObjectDeleted(t *testing.T) {
	withSmallPayload(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		big := bigOutput("c1", 3*maxPayload)
		big.Role, big.ToolCallID = schemas.RoleUser, ""
		var deleted uint64
		pipeline.SetAfterStubHook(t, func() {
			out, err := st.Forget(ctx, "fgc")
			if err != nil {
				t.Error(err)
			}
			deleted = out.Deleted.Objects
		})
		if _, err := c.Publish(ctx, "fgc", big); err != nil {
			t.Fatalf("publish: %v; want the message stored (then forgotten), no error", err)
		}
		if deleted != 1 {
			t.Fatalf("the forget deleted %d objects; want the message's", deleted)
		}
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		obs, err := js.ObjectStore(ctx, jetstream.DefaultConfig().ObjectsBucket)
		if err != nil {
			t.Fatal(err)
		}
		infos, err := obs.List(ctx)
		if err != nil && !errors.Is(err, natsjs.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		for _, in := range infos {
			t.Errorf("object %s (%d bytes) stored after the forget that covered its message", in.Name, in.Size)
		}
		cx, err := c.Context(ctx, "fgc")
		if err != nil {
			t.Fatal(err)
		}
		if len(cx.Messages) != 0 {
			t.Errorf("context after the forget: %d messages; want none", len(cx.Messages))
		}
	})
}
