package pipeline_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// Value reads with an earlier value while it is safe: the prefix a caller sent before
// stays the same after a newer compaction. A value of another conversation, one newer
// than the live value, and one a forget covers are never used.
func TestContextWithAnEarlierValue(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		c := pipeline.NewWithStore(nc, st)
		conv := "sticky"
		var seqs []uint64
		for _, text := range []string{"one", "two", "three", "four", "five"} {
			seq, err := c.Publish(ctx, conv, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)})
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		value := func(gen uint64, summary string, tail int) *schemas.Result {
			return &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: gen, Summary: summary,
				TailStartSeq: seqs[tail], CoveredThroughSeq: seqs[tail-1], FirstSeq: seqs[0], CreatedAt: time.Now()}
		}
		first, second := value(1, "first summary", 2), value(2, "second summary", 4)
		if _, err := st.Results().Put(ctx, first, 0); err != nil {
			t.Fatal(err)
		}
		_, rev, _ := st.Results().Get(ctx, conv, true)
		if _, err := st.Results().Put(ctx, second, rev); err != nil {
			t.Fatal(err)
		}
		read := func(name string, opts ...pipeline.ContextOption) (uint64, int) {
			t.Helper()
			cx, err := c.Context(ctx, conv, opts...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return cx.Generation, len(cx.Messages)
		}
		if gen, n := read("live"); gen != 2 || n != 2 {
			t.Fatalf("live read: generation %d with %d messages; want 2 with summary + five", gen, n)
		}
		if gen, n := read("earlier", pipeline.Value(first)); gen != 1 || n != 4 {
			t.Fatalf("earlier value: generation %d with %d messages; want 1 with summary + three..five", gen, n)
		}
		other := *first
		other.Conversation = "another"
		if gen, _ := read("another conversation's", pipeline.Value(&other)); gen != 2 {
			t.Fatalf("another conversation's value was used: generation %d", gen)
		}
		newer := *first
		newer.Generation = 9
		if gen, _ := read("newer than live", pipeline.Value(&newer)); gen != 2 {
			t.Fatalf("a value newer than the live one was used: generation %d", gen)
		}
		if _, err := st.Forget(ctx, conv); err != nil {
			t.Fatal(err)
		}
		if gen, n := read("after a forget", pipeline.Value(first)); gen != 0 || n != 0 {
			t.Fatalf("after a forget the earlier value was served: generation %d with %d messages", gen, n)
		}
	})
}
