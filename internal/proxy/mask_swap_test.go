package proxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A masking (the first rung: no summary, old outputs replaced by a note) is a new
// generation like a summary, and the proxy swaps it in by the same rule: not while the
// provider's cache likely holds the prefix sent before, which stays byte-identical, and
// once the cache has likely expired.
func TestMaskedValueWaitsForTheCacheLikeASummary(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		now := time.Now()
		proxy.SetClock(f.conv, func() time.Time { return now })
		big := "OUTPUT-START " + strings.Repeat("a long build log line\n", 200) + "OUTPUT-END"
		h := []schemas.Message{user("run the build"), bot("running"), user(big), bot("it failed"), user("fix it")}
		f.turn("c-mask", h, "fixed")
		msgs, err := st.Chat().LoadLeader(f.ctx, "c-mask", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var bigSeq uint64
		for _, m := range msgs {
			if e := m.Entry(); strings.HasPrefix(e.Message.Content.String(), "OUTPUT-START") {
				bigSeq = m.Seq
			}
		}
		// Generation 1, a summary of nothing before the first message, is sent at once
		// (the conversation outgrew its threshold: that is why it was compacted).
		put := func(gen uint64, overrides []schemas.Override) {
			_, rev, _ := st.Results().Get(f.ctx, "c-mask", true)
			v := &schemas.Result{SchemaVersion: 1, Conversation: "c-mask", Generation: gen, Summary: "EARLIER WORK", Strategy: "mask",
				TailStartSeq: msgs[0].Seq, CoveredThroughSeq: msgs[0].Seq - 1, FirstSeq: msgs[0].Seq, CreatedAt: time.Now(), Overrides: overrides}
			if _, err := st.Results().Put(f.ctx, v, rev); err != nil {
				t.Fatal(err)
			}
		}
		put(1, nil)
		h = append(h, bot("fixed"), user("and the tests?"))
		first := sent(f.turn("c-mask", h, "passing"))
		if !strings.Contains(first, "EARLIER WORK") || !strings.Contains(first, "OUTPUT-END") {
			t.Fatalf("generation 1 not sent: %q", first)
		}
		// Generation 2 masks the old output.
		note := "[tool output masked; recall it with compactor recall c-mask]"
		put(2, []schemas.Override{{Seq: bigSeq, Note: note}})
		h = append(h, bot("passing"), user("ship it"))
		now = now.Add(time.Second)
		within := sent(f.turn("c-mask", h, "shipped"))
		if !strings.HasPrefix(within, first) || strings.Contains(within, note) {
			t.Fatalf("within the cache's life the masking was swapped in, or the prefix changed:\nbefore %q\nnow    %q", first, within)
		}
		h = append(h, bot("shipped"), user("thanks"))
		now = now.Add(2 * time.Minute) // past the fixture's CacheTTL of a minute
		tr := f.turn("c-mask", h, "")
		if after := sent(tr); tr.Context.Generation != 2 || !strings.Contains(after, note) || strings.Contains(after, "OUTPUT-END") {
			t.Fatalf("past the cache's life: generation %d, sent %q; want the masked output", tr.Context.Generation, after)
		}
	})
}
