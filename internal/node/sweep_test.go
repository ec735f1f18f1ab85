package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A node with the api role sweeps at start: a value that outlived its conversation's
// forget (written after the tombstone by a worker that died before its check, the
// forget having deleted its request) is removed without any job or trigger meeting the
// conversation.
func TestAPINodeSweepsValuesThatOutlivedTheirForget(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := st.Chat().Publish(ctx, "left", []byte(`{"role":"user","content":"x"}`), ""); err != nil {
		t.Fatal(err)
	}
	out, err := st.Forget(ctx, "left")
	if err != nil {
		t.Fatal(err)
	}
	late := &schemas.Result{SchemaVersion: 1, Conversation: "left", Generation: 2, Summary: "forgotten", TailStartSeq: out.ThroughSeq + 1,
		CoveredThroughSeq: out.ThroughSeq, FirstSeq: 1, CreatedAt: time.Now()}
	if _, err := st.Results().Put(ctx, late, 0); err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{Roles: node.Roles{API: true}, Resolver: resolver(t, 2000),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}, nc, st)
	if err != nil {
		t.Fatal(err)
	}
	stop := n.Start(ctx)
	defer func() { _ = stop() }()
	for {
		v, _, err := st.Results().Get(ctx, "left", true)
		if err == nil && v == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the value that outlived its forget is still there: %+v, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond) // polling an observable: the KV value
	}
}
