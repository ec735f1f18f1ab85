package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// Many conversations read at once share a few batched direct gets, and each gets what
// the leader reads give: its value and tombstone, nil for a key that was never written,
// was deleted or purged.
func TestFirstSightCoalescesReads(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		results, err := js.KeyValue(ctx, st.Config().ResultsBucket)
		if err != nil {
			t.Fatal(err)
		}
		forget, err := js.KeyValue(ctx, st.Config().ForgetBucket)
		if err != nil {
			t.Fatal(err)
		}
		// More conversations than one batch takes.
		const n = 3*jetstream.MaxCoalesced + 17
		convs := make([]string, n)
		for i := range convs {
			convs[i] = fmt.Sprintf("sight-%04d", i)
			conv := convs[i]
			switch i % 6 {
			case 0: // nothing stored
			case 1, 2: // a value (two revisions: the last counts)
				for g := range 2 {
					r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: uint64(g + 1),
						Summary: fmt.Sprintf("summary %d of %s", g, conv), TailStartSeq: uint64(i + g), FirstSeq: 1, CreatedAt: time.Now()}
					if _, err := st.Results().Put(ctx, r, latest(t, st, conv)); err != nil {
						t.Fatal(err)
					}
				}
			case 3: // a deleted value and a purged tombstone
				r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: "gone", TailStartSeq: 1, FirstSeq: 1, CreatedAt: time.Now()}
				if _, err := st.Results().Put(ctx, r, 0); err != nil {
					t.Fatal(err)
				}
				if err := results.Delete(ctx, conv); err != nil {
					t.Fatal(err)
				}
				putTomb(t, forget, conv, 9)
				if err := forget.Purge(ctx, schemas.ForgetKey(conv)); err != nil {
					t.Fatal(err)
				}
			case 4: // a tombstone only
				putTomb(t, forget, conv, uint64(i))
			case 5: // a tombstone and a value, the tombstone deleted
				r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: "kept", TailStartSeq: 2, FirstSeq: 1, CreatedAt: time.Now()}
				if _, err := st.Results().Put(ctx, r, 0); err != nil {
					t.Fatal(err)
				}
				putTomb(t, forget, conv, 3)
				if err := forget.Delete(ctx, schemas.ForgetKey(conv)); err != nil {
					t.Fatal(err)
				}
			}
		}

		// The reads are counted on their subject, from another connection.
		var requests atomic.Int64
		watcher := jstest.ConnTo(t, nc.ConnectedUrl())
		sub, err := watcher.Subscribe("$JS.API.DIRECT.GET.>", func(*nats.Msg) { requests.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := watcher.Flush(); err != nil {
			t.Fatal(err)
		}

		type got struct {
			tomb *schemas.Tombstone
			v    *schemas.Result
			rev  uint64
			err  error
		}
		out := make([]got, n)
		var wg sync.WaitGroup
		for i, conv := range convs {
			wg.Go(func() {
				tomb, v, rev, err := st.Results().FirstSight(ctx, conv)
				out[i] = got{tomb, v, rev, err}
			})
		}
		wg.Wait()
		for i, conv := range convs {
			g := out[i]
			if g.err != nil {
				t.Fatalf("%s: %v", conv, g.err)
			}
			wantTomb, err := st.Forgotten(ctx, conv)
			if err != nil {
				t.Fatal(err)
			}
			wantV, wantRev, err := st.Results().Get(ctx, conv, true)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g.tomb, wantTomb) || !reflect.DeepEqual(g.v, wantV) || g.rev != wantRev {
				t.Errorf("%s: got %+v, %+v, rev %d; the leader reads %+v, %+v, rev %d", conv, g.tomb, g.v, g.rev, wantTomb, wantV, wantRev)
			}
			switch i % 6 {
			case 0, 3:
				if g.tomb != nil || g.v != nil {
					t.Errorf("%s: nothing stored, got %+v, %+v", conv, g.tomb, g.v)
				}
			case 1, 2:
				if g.v == nil || g.v.Generation != 2 {
					t.Errorf("%s: got value %+v; want generation 2", conv, g.v)
				}
			case 4:
				if g.tomb == nil || g.tomb.ThroughSeq != uint64(i) {
					t.Errorf("%s: got tombstone %+v; want through %d", conv, g.tomb, i)
				}
			}
		}
		if err := watcher.Flush(); err != nil {
			t.Fatal(err)
		}
		// One at a time per bucket: at least 2n/MaxCoalesced, far fewer than one per key.
		if got := requests.Load(); got > 2*n/20 {
			t.Fatalf("%d reads of 2 keys each made %d direct gets; want them coalesced", n, got)
		}
		t.Logf("%d reads of 2 keys: %d direct gets", n, requests.Load())
	})
}

// latest is the revision of conv's value, 0 when it has none.
func latest(t *testing.T, st *jetstream.Store, conv string) uint64 {
	t.Helper()
	_, rev, err := st.Results().Get(ctxT(t), conv, true)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func putTomb(t *testing.T, forget natsjs.KeyValue, conv string, through uint64) {
	t.Helper()
	data, _ := json.Marshal(schemas.Tombstone{ThroughSeq: through, ForgottenAt: time.Now().UTC()})
	if _, err := forget.Put(ctxT(t), schemas.ForgetKey(conv), data); err != nil {
		t.Fatal(err)
	}
}

// A reader that gives up does not fail the others of its batch; a batch that fails
// fails every reader of it, none waits forever.
func TestFirstSightCancelAndErrors(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		r := &schemas.Result{SchemaVersion: 1, Conversation: "kept", Generation: 1, Summary: "s", TailStartSeq: 1, FirstSeq: 1, CreatedAt: time.Now()}
		if _, err := st.Results().Put(ctx, r, 0); err != nil {
			t.Fatal(err)
		}
		const n = 64
		errs := make([]error, n)
		vals := make([]*schemas.Result, n)
		var wg sync.WaitGroup
		for i := range n {
			cctx, cancel := context.WithCancel(ctx)
			switch i % 3 {
			case 1:
				cancel() // gave up before it waits: its read is queued all the same
			case 2:
				defer cancel()
				go cancel() // gives up while its batch is read, or after
			default:
				defer cancel()
			}
			wg.Go(func() { _, vals[i], _, errs[i] = st.Results().FirstSight(cctx, "kept") })
		}
		wg.Wait()
		for i := range n {
			switch {
			case i%3 == 1:
				if !errors.Is(errs[i], context.Canceled) {
					t.Errorf("reader %d gave up: got %v; want context.Canceled", i, errs[i])
				}
			case i%3 == 2 && errors.Is(errs[i], context.Canceled):
			case errs[i] != nil || vals[i] == nil || vals[i].Summary != "s":
				t.Errorf("reader %d: got %+v, %v; want the value", i, vals[i], errs[i])
			}
		}

		// Invalid ids are refused before anything is sent.
		if _, _, _, err := st.Results().FirstSight(ctx, "a.b"); err == nil {
			t.Fatal("FirstSight of an invalid id: no error")
		}
		nc.Close()
		for i := range n {
			wg.Go(func() { _, _, _, errs[i] = st.Results().FirstSight(ctx, fmt.Sprintf("c-%d", i)) })
		}
		wg.Wait()
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "closed") {
				t.Errorf("reader %d on a closed connection: got %v; want an error", i, err)
			}
		}
	})
}
