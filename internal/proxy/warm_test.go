package proxy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/proxy/wire/openai"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// history is n messages of a conversation, user and assistant by turns, each naming
// its place.
func history(n int) []schemas.Message {
	out := make([]schemas.Message, n)
	for i := range out {
		if i%2 == 0 {
			out[i] = user(fmt.Sprintf("q%d", i))
		} else {
			out[i] = bot(fmt.Sprintf("a%d", i))
		}
	}
	return out
}

// The warm cache serves ordinary turns (the test would prove nothing of it otherwise)
// and never a context older than a compaction that landed: the turn after a new value
// is written reads it (the revision changed), and sends it when the provider's cache
// rules say so, exactly as a process without the cache.
func TestWarmContextTakesACompactionThatLanded(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		now := time.Now()
		proxy.SetClock(f.conv, func() time.Time { return now })
		h := history(20)
		for n := 1; n < 9; n += 2 {
			f.turn("w1", h[:n], h[n].Content.String())
		}
		if hits, deltas, _, _, _ := proxy.WarmStats(f.conv); hits+deltas == 0 {
			t.Fatalf("no turn was served from the warm cache")
		}
		putValue(f, "w1", 1, "FIRST SUMMARY", "q4")
		if tr := f.turn("w1", h[:11], "a11"); tr.Context.Generation != 1 || !strings.Contains(sent(tr), "FIRST SUMMARY") || strings.Contains(sent(tr), "q2|") {
			t.Fatalf("the turn after the first compaction: generation %d, sent %q", tr.Context.Generation, sent(tr))
		}
		if tr := f.turn("w1", h[:13], "a13"); tr.Context.Generation != 1 || !strings.HasSuffix(sent(tr), "FIRST SUMMARY|q4|a5|q6|a7|q8|a9|q10|a11|q12|") {
			t.Fatalf("the next turn, from the cache: generation %d, sent %q", tr.Context.Generation, sent(tr))
		}
		putValue(f, "w1", 2, "SECOND SUMMARY", "q10")
		now = now.Add(time.Second) // within the provider's cache: the first is sent again
		if tr := f.turn("w1", h[:15], "a15"); tr.Context.Generation != 1 || !strings.Contains(sent(tr), "FIRST SUMMARY|q4|") || !strings.HasSuffix(sent(tr), "q14|") {
			t.Fatalf("within the cache's life: generation %d, sent %q", tr.Context.Generation, sent(tr))
		}
		now = now.Add(2 * time.Minute) // past it: the second
		if tr := f.turn("w1", h[:17], "a17"); tr.Context.Generation != 2 || !strings.HasSuffix(sent(tr), "SECOND SUMMARY|q10|a11|q12|a13|q14|a15|q16|") {
			t.Fatalf("past the cache's life: generation %d, sent %q", tr.Context.Generation, sent(tr))
		}
		if tr := f.turn("w1", h[:19], "a19"); tr.Context.Generation != 2 || !strings.HasSuffix(sent(tr), "SECOND SUMMARY|q10|a11|q12|a13|q14|a15|q16|a17|q18|") {
			t.Fatalf("the turn after: generation %d, sent %q", tr.Context.Generation, sent(tr))
		}
	})
}

// A forgotten conversation is never served from the warm cache: after a forget the
// next turn sees an empty conversation (the client's own messages, stored anew) and
// never the old summary or messages; and a tombstone alone (a forget whose deletions
// have not run yet) is enough.
func TestWarmContextNeverServesAForgottenConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := history(12)
		for n := 1; n < 7; n += 2 {
			f.turn("w2", h[:n], h[n].Content.String())
		}
		putValue(f, "w2", 1, "OLD SUMMARY", "q2")
		if tr := f.turn("w2", h[:7], "a6"); !strings.Contains(sent(tr), "OLD SUMMARY") {
			t.Fatalf("before the forget: sent %q", sent(tr))
		}
		if _, err := st.Forget(f.ctx, "w2"); err != nil {
			t.Fatal(err)
		}
		fresh := []schemas.Message{user("new start")}
		tr := f.turn("w2", fresh, "new reply")
		if got := sent(tr); got != "new start|" || tr.Context.Generation != 0 {
			t.Fatalf("after the forget: generation %d, sent %q; want only the client's message", tr.Context.Generation, got)
		}
		// The client goes on: still nothing of the old conversation.
		tr = f.turn("w2", append(fresh, bot("new reply"), user("more")), "")
		if got := sent(tr); got != "new start|new reply|more|" {
			t.Fatalf("the turn after: sent %q", got)
		}

		// A tombstone written, the messages not deleted yet (of a conversation never
		// compacted: no value changes): the cache is not served.
		g := history(8)
		for n := 1; n < 9; n += 2 {
			f.turn("w3", g[:n], g[n].Content.String()) // warm, through a7
		}
		last, err := st.Chat().LastSeq(f.ctx, "w3")
		if err != nil {
			t.Fatal(err)
		}
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(f.ctx, st.Config().ForgetBucket)
		if err != nil {
			t.Fatal(err)
		}
		tomb, _ := json.Marshal(schemas.Tombstone{ThroughSeq: last, ForgottenAt: time.Now()})
		if _, err := kv.Put(f.ctx, schemas.ForgetKey("w3"), tomb); err != nil {
			t.Fatal(err)
		}
		// Without the cache the read refuses (the tail it must cover is forgotten): the
		// cache must not answer in its place.
		tr, err = f.conv.Prepare(f.ctx, "w3", append(g, user("after")), f.opts)
		if err == nil && strings.Contains(sent(tr), "q0|a1|") {
			t.Fatalf("with the tombstone written: sent %q; want none of the forgotten context", sent(tr))
		}
		if err != nil && !errors.Is(err, pipeline.ErrNotCovered) {
			t.Fatal(err)
		}
	})
}

// Two proxy processes (two Stores on one NATS) take turns of one conversation: each
// sees the other's writes, each message is stored once, and every turn sends what a
// process without a warm cache would, through compactions and the other's turns.
func TestWarmContextSeesAnotherProcessWrites(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		a, b := newFixture(t, nc, st, 128000), newFixture(t, nc, st, 128000)
		a.opts.CacheTTL, b.opts.CacheTTL = 0, 0 // both send the newest compaction: comparable
		h := history(40)
		for n, i := 1, 0; n < len(h); n, i = n+2, i+1 {
			p := a
			if i%2 == 1 || i%5 == 0 {
				p = b
			}
			if n == 15 {
				putValue(a, "w4", 1, "SUMMARY ONE", "q6")
			}
			if n == 29 {
				putValue(a, "w4", 2, "SUMMARY TWO", "q20")
			}
			cold := newFixture(t, nc, st, 128000) // a new process: no cache
			cold.opts.CacheTTL = 0
			want, err := cold.conv.Prepare(cold.ctx, "w4", h[:n], cold.opts)
			if err != nil {
				t.Fatal(err)
			}
			tr := p.turn("w4", h[:n], h[n].Content.String())
			if sent(tr) != sent(want) || tr.Context.Generation != want.Context.Generation {
				t.Fatalf("turn %d: sent %q (generation %d); a process without the cache sends %q (generation %d)",
					n, sent(tr), tr.Context.Generation, sent(want), want.Context.Generation)
			}
		}
		var want []string
		for _, m := range h {
			want = append(want, m.Content.String())
		}
		if got := a.stored("w4"); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("CHAT holds %q; want each message once: %q", got, want)
		}
		for _, p := range []*fixture{a, b} {
			if hits, deltas, _, _, _ := proxy.WarmStats(p.conv); hits+deltas == 0 {
				t.Fatalf("a process served no turn from its warm cache")
			}
		}
	})
}

// The warm cache's memory is bounded: past its limit it drops conversations, and what
// it serves is still right.
func TestWarmCacheIsBounded(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		const limit = 4 << 10
		proxy.SetWarmLimit(f.conv, limit)
		big := strings.Repeat("x", 300)
		for c := range 12 {
			conv := fmt.Sprintf("w5-%d", c)
			h := []schemas.Message{user(big + "q0"), bot(big + "a0"), user(big + "q1"), bot(big + "a1"), user(big + "q2")}
			for n := 1; n < len(h); n += 2 {
				if tr := f.turn(conv, h[:n], h[n].Content.String()); !strings.HasSuffix(sent(tr), h[n-1].Content.String()+"|") {
					t.Fatalf("%s turn %d: sent %q", conv, n, sent(tr))
				}
				if _, _, _, convs, bytes := proxy.WarmStats(f.conv); bytes > limit || convs > 12 {
					t.Fatalf("the cache holds %d bytes of %d conversations; its limit is %d", bytes, convs, limit)
				}
			}
		}
		if _, _, _, convs, _ := proxy.WarmStats(f.conv); convs == 0 || convs >= 12 {
			t.Fatalf("the cache holds %d conversations: want some dropped, some kept", convs)
		}
	})
}

// Turns of one conversation prepared at once share what the warm cache holds: none
// changes another's context, and each is what a process without the cache sends (run
// with -race, this also finds a write to the shared messages).
func TestWarmContextSharedByConcurrentTurns(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		h := history(24)
		for n := 1; n < 13; n += 2 {
			f.turn("w6", h[:n], h[n].Content.String())
		}
		putValue(f, "w6", 1, "SHARED SUMMARY", "q4")
		f.turn("w6", h[:13], "a13")
		cold := newFixture(t, nc, st, 128000)
		want, err := cold.conv.Prepare(cold.ctx, "w6", h[:15], cold.opts)
		if err != nil {
			t.Fatal(err)
		}
		w := openai.OpenAI()
		req, err := w.Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				tr, err := f.conv.Prepare(f.ctx, "w6", h[:15], f.opts)
				if err == nil && sent(tr) != sent(want) {
					err = fmt.Errorf("sent %q; want %q", sent(tr), sent(want))
				}
				if err == nil {
					_, err = w.Build(req, tr.Context)
				}
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	})
}
