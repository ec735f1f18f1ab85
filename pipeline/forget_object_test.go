package pipeline_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

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
