package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// lateValue writes what a worker that outlived a forget would have: a value of an old
// generation built on the forgotten conversation (FirstSeq 1), after the tombstone.
func lateValue(ctx context.Context, t *testing.T, st *jetstream.Store, conv string, tailStart uint64) {
	t.Helper()
	late := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 3, Summary: "FORGOTTEN SUMMARY",
		TailStartSeq: tailStart, CoveredThroughSeq: tailStart - 1, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
}

// A value that survives a forget (written after the tombstone by a worker that gave up
// its check, or crashed before it) is never served: Context reads as if the
// conversation was never compacted, and only what was published after the forget. A
// value of the new conversation (FirstSeq above the tombstone) is served.
func TestContextDropsAValueTheTombstoneCovers(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		conv := "late-value"
		for _, text := range []string{"old one", "old two", "old three"} {
			if _, err := c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)}); err != nil {
				t.Fatal(err)
			}
		}
		out, err := st.Forget(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		lateValue(ctx, t, st, conv, out.ThroughSeq)
		seq, err := c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("new one")})
		if err != nil {
			t.Fatal(err)
		}
		check := func(name string, opts ...pipeline.ContextOption) {
			cx, err := c.Context(ctx, conv, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if cx.Generation != 0 || len(cx.Messages) != 1 || cx.Messages[0].Content.String() != "new one" {
				t.Fatalf("%s: context after the forget = generation %d, %+v; want only the new message", name, cx.Generation, cx.Messages)
			}
		}
		check("direct read")
		check("read your writes", pipeline.AtLeastSeq(seq))
		if v, err := c.Result(ctx, conv); err != nil || v != nil {
			t.Fatalf("Result = %+v, %v; want nil: the value is covered by the tombstone", v, err)
		}

		// The new conversation's own value is served.
		v, rev, _, err := st.Results().Live(ctx, conv, true)
		if err != nil || v != nil || rev != 0 {
			t.Fatalf("Live = %+v at %d, %v; want nothing", v, rev, err)
		}
		_, cur, _ := st.Results().Get(ctx, conv, true)
		fresh := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: "new summary",
			TailStartSeq: seq + 1, CoveredThroughSeq: seq, FirstSeq: seq, CreatedAt: time.Now()}
		if _, err := st.Results().Put(ctx, fresh, cur); err != nil {
			t.Fatal(err)
		}
		cx, err := c.Context(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		if cx.Generation != 1 || len(cx.Messages) == 0 || !strings.Contains(cx.Messages[0].Content.String(), "new summary") {
			t.Fatalf("the new conversation's value is not served: generation %d, %+v", cx.Generation, cx.Messages)
		}
	})
}
