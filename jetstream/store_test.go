package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestProvisionIsIdempotent(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, _ *jetstream.Store) {
		for i := 0; i < 2; i++ {
			if _, err := jetstream.Provision(ctxT(t), nc, jetstream.DefaultConfig()); err != nil {
				t.Fatalf("provision again (%d): %v", i, err)
			}
		}
		if _, err := jetstream.Open(ctxT(t), nc, jetstream.DefaultConfig()); err != nil {
			t.Fatalf("open: %v", err)
		}
	})
}

func TestLoadConversationPagesAcrossBatches(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		const n = 2*jetstream.DirectBatchSize + 17
		var seqsA []uint64
		for i := 0; i < n; i++ {
			for _, conv := range []string{"a", "b"} {
				data := fmt.Appendf(nil, `{"role":"user","content":"%s-%d"}`, conv, i)
				seq, err := st.Chat().Publish(ctx, conv, data, "")
				if err != nil {
					t.Fatal(err)
				}
				if conv == "a" {
					seqsA = append(seqsA, seq)
				}
			}
		}
		for _, tc := range []struct {
			name       string
			from, upTo uint64
			want       []uint64
		}{
			{"all", 0, 0, seqsA},
			{"from middle", seqsA[300], 0, seqsA[300:]},
			{"up to", seqsA[10], seqsA[400], seqsA[10:401]},
			{"past the end", seqsA[n-1] + 1, 0, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for _, leader := range []bool{false, true} {
					load := st.Chat().Load
					if leader {
						load = st.Chat().LoadLeader
					}
					got, err := load(ctx, "a", tc.from, tc.upTo)
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(tc.want) {
						t.Fatalf("leader=%v: got %d messages; want %d", leader, len(got), len(tc.want))
					}
					for i := range got {
						if got[i].Seq != tc.want[i] {
							t.Fatalf("leader=%v: message %d has seq %d; want %d", leader, i, got[i].Seq, tc.want[i])
						}
					}
				}
			})
		}
		last, err := st.Chat().LastSeq(ctx, "a")
		if err != nil || last != seqsA[n-1] {
			t.Fatalf("LastSeq = %d, %v; want %d", last, err, seqsA[n-1])
		}
		if last, err := st.Chat().LastSeq(ctx, "nobody"); err != nil || last != 0 {
			t.Fatalf("LastSeq(nobody) = %d, %v; want 0, nil", last, err)
		}
	})
}

func TestPublishIsIdempotentWithMsgID(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		s1, err := st.Chat().Publish(ctx, "c", []byte(`{"role":"user","content":"x"}`), "id-1")
		if err != nil {
			t.Fatal(err)
		}
		s2, err := st.Chat().Publish(ctx, "c", []byte(`{"role":"user","content":"x"}`), "id-1")
		if err != nil || s2 != s1 {
			t.Fatalf("duplicate publish = %d, %v; want %d, nil", s2, err, s1)
		}
		got, _ := st.Chat().Load(ctx, "c", 0, 0)
		if len(got) != 1 {
			t.Fatalf("stored %d copies; want 1", len(got))
		}
	})
}

func TestResultCompareAndSet(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		for _, leader := range []bool{false, true} {
			if r, rev, err := st.Results().Get(ctx, "c", leader); r != nil || rev != 0 || err != nil {
				t.Fatalf("empty GetResult(leader=%v) = %v, %d, %v", leader, r, rev, err)
			}
		}
		v := &schemas.Result{SchemaVersion: 1, Conversation: "c", Generation: 1, Summary: "s1", TailStartSeq: 5}
		rev1, err := st.Results().Put(ctx, v, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Results().Put(ctx, v, 0); !errors.Is(err, jetstream.ErrRevisionMismatch) {
			t.Fatalf("second create: got %v; want ErrRevisionMismatch", err)
		}
		v2 := *v
		v2.Generation = 2
		rev2, err := st.Results().Put(ctx, &v2, rev1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Results().Put(ctx, &v2, rev1); !errors.Is(err, jetstream.ErrRevisionMismatch) {
			t.Fatalf("stale update: got %v; want ErrRevisionMismatch", err)
		}
		for _, leader := range []bool{false, true} {
			r, rev, err := st.Results().Get(ctx, "c", leader)
			if err != nil || rev != rev2 || r.Generation != 2 {
				t.Fatalf("GetResult(leader=%v) = gen %v rev %d, %v; want gen 2 rev %d", leader, r, rev, err, rev2)
			}
		}
	})
}

func TestEnqueueKeepsOnePendingPerConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		req := func(id, conv string) schemas.Request {
			return schemas.Request{RequestID: id, Conversation: conv, Trigger: schemas.TriggerManual, RequestedAt: time.Now()}
		}
		if _, err := st.Queue().Enqueue(ctx, req("r1", "c")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Queue().Enqueue(ctx, req("r2", "c")); !errors.Is(err, jetstream.ErrRequestPending) {
			t.Fatalf("second request: got %v; want ErrRequestPending", err)
		}
		if _, err := st.Queue().Enqueue(ctx, req("r3", "other")); err != nil {
			t.Fatalf("other conversation: %v", err)
		}
		if _, err := st.Queue().Enqueue(ctx, req("r4", "bad.id")); !errors.Is(err, schemas.ErrInvalid) {
			t.Fatalf("bad id: got %v; want ErrInvalid", err)
		}
		q, err := st.Queue().Requests(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d, err := q.Next(ctx, 5*time.Second)
		if err != nil || d == nil {
			t.Fatalf("next request: %v, %v", d, err)
		}
		if d.Conversation != "c" && d.Conversation != "other" {
			t.Fatalf("delivery conversation %q; want the subject's", d.Conversation)
		}
		if err := d.AckSync(ctx); err != nil {
			t.Fatal(err)
		}
		var pending error
		for i := 0; i < 2; i++ { // the freed slot is for whichever conversation was fetched
			_, pending = st.Queue().Enqueue(ctx, req(fmt.Sprintf("r5-%d", i), []string{"c", "other"}[i]))
			if pending == nil {
				break
			}
		}
		if pending != nil {
			t.Fatalf("after ack no slot freed: %v", pending)
		}
	})
}
