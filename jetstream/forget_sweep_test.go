package jetstream_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// The sweep removes a value written after a forget's tombstone for an old generation
// (a worker that died between its write and its check, after the forget deleted its
// request), and nothing else: not a value of the new conversation, not a value of a
// conversation never forgotten, not a value written before a forget that still runs.
func TestSweepRemovesTheValuesTombstonesCover(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	put := func(conv string, firstSeq uint64, created time.Time) {
		t.Helper()
		v := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 2, Summary: "s", TailStartSeq: firstSeq + 1,
			CoveredThroughSeq: firstSeq, FirstSeq: firstSeq, CreatedAt: created}
		if _, err := st.Results().Put(ctx, v, 0); err != nil {
			t.Fatal(err)
		}
	}
	forget := func(conv string) uint64 {
		t.Helper()
		if _, err := st.Chat().Publish(ctx, conv, []byte(`{"role":"user","content":"x"}`), ""); err != nil {
			t.Fatal(err)
		}
		out, err := st.Forget(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		return out.ThroughSeq
	}
	forget("late")
	put("late", 1, time.Now()) // after the tombstone, built on the forgotten conversation
	through := forget("renewed")
	put("renewed", through+1, time.Now()) // the new conversation's
	put("never", 1, time.Now())
	forget("running")
	put("running", 1, time.Now().Add(-time.Hour)) // written before its forget, which runs
	n, err := st.SweepForgotten(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d, %v; want 1", n, err)
	}
	for conv, want := range map[string]bool{"late": false, "renewed": true, "never": true, "running": true} {
		v, _, err := st.Results().Get(ctx, conv, true)
		if err != nil || (v != nil) != want {
			t.Errorf("%s after the sweep: %+v, %v; want a value: %v", conv, v, err, want)
		}
	}
	if n, err := st.SweepForgotten(ctx); err != nil || n != 0 {
		t.Fatalf("a second sweep removed %d, %v; want nothing", n, err)
	}
}
