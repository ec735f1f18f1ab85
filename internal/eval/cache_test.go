package eval

import (
	"math"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// TestSwapRule walks the proxy's rule through a scripted conversation: the value sent
// last is kept while its context fits the threshold and the cache lives, given up for
// the newest past either, and forgotten when a newer value landed while it was read.
func TestSwapRule(t *testing.T) {
	v1 := &schemas.Result{Conversation: "c", Generation: 1}
	v2 := &schemas.Result{Conversation: "c", Generation: 2}
	r := swapRule{ttl: 5 * time.Minute, gap: time.Minute, stale: 1000}

	if e := r.earlier(); e != nil {
		t.Fatalf("first turn: read with %v; want the newest (nil)", e)
	}
	r.keep(0, nil, nil)
	if e := r.earlier(); e != nil {
		t.Fatalf("after generation 0: read with %v; want the newest", e)
	}
	r.keep(1, nil, v1) // the first compaction landed and was sent
	e := r.earlier()
	if e != v1 {
		t.Fatalf("within the TTL: read with %v; want generation 1", e)
	}
	if r.swap(e, 1, 1000) {
		t.Error("a context at the threshold swapped; want kept (only past it)")
	}
	if !r.swap(e, 1, 1001) {
		t.Error("a context past the threshold kept; want the newest")
	}
	if r.swap(e, 2, 5000) {
		t.Error("a read that fell back to the newest value swapped again; want not (it is the newest)")
	}
	r.keep(1, e, v2) // generation 1 was sent: still the one remembered
	if r.sticky != v1 {
		t.Fatalf("kept %v; want generation 1", r.sticky)
	}
	r.keep(2, e, v1) // the context is generation 2 but the live value read is older: a newer one landed
	if r.sticky != nil {
		t.Fatalf("kept %v when the live value read is not the context's; want nothing", r.sticky)
	}
	r.keep(2, nil, v2)
	r.gap = 6 * time.Minute // past the TTL: the cache has likely expired
	if e := r.earlier(); e != nil || !r.expired() {
		t.Fatalf("past the TTL: read with %v, expired %v; want the newest, expired", e, r.expired())
	}
}

func msg(role schemas.Role, text string) schemas.Message {
	return schemas.Message{Role: role, Content: schemas.Text(text)}
}

// TestPrefixCache tallies a scripted run of contexts: appends keep the prefix and are
// read from the cache, a swapped-in summary breaks it (its writes are the swap's), an
// expired cache reads nothing although the bytes are the same.
func TestPrefixCache(t *testing.T) {
	sys, u1, a1, u2 := msg(schemas.RoleSystem, "be brief"), msg(schemas.RoleUser, "first question, forty chars long......."),
		msg(schemas.RoleAssistant, "an answer"), msg(schemas.RoleUser, "second")
	sum := msg(schemas.RoleUser, "[summary] the first question was answered")
	tok := func(ms ...schemas.Message) int { return tokens.Messages(ms) }
	for _, m := range []schemas.Message{sys, u1, a1, u2, sum} {
		if tokens.Message(&m) == 0 {
			t.Fatalf("%q counts 0 tokens", m.Content.String())
		}
	}
	var p prefixCache
	turns := []struct {
		msgs    []schemas.Message
		expired bool
	}{
		{[]schemas.Message{sys, u1}, false},
		{[]schemas.Message{sys, u1, a1, u2}, false}, // appended: all of turn 1 cached
		{[]schemas.Message{sys, sum, u2}, false},    // a summary swapped in: only sys cached
		{[]schemas.Message{sys, sum, u2}, true},     // same bytes, cache expired: nothing cached
	}
	for _, tr := range turns {
		if err := p.turn(tr.msgs, tok(tr.msgs...), tr.expired); err != nil {
			t.Fatal(err)
		}
	}
	sent := int64(tok(sys, u1) + tok(sys, u1, a1, u2) + 2*tok(sys, sum, u2))
	read := int64(tok(sys, u1) + tok(sys))
	want := CacheTally{Turns: 4, Compared: 3, PrefixKept: 2, Sent: sent, CacheRead: read, CacheWrite: sent - read,
		SwapWrite: int64(tok(sys, sum, u2) - tok(sys))}
	if p.t != want {
		t.Errorf("tally %+v; want %+v", p.t, want)
	}
	if got := p.t.PrefixShare(); math.Abs(got-2.0/3) > 1e-9 {
		t.Errorf("prefix share %.3f; want 2/3", got)
	}
}

// TestCost prices one arm's tallies by hand: without a cache every input token at
// input; with one the cached prefix at cached_input and the rest at cache_write (at
// input when the table's cache_write is 0); the summarizer at its model's prices.
func TestCost(t *testing.T) {
	s := StrategyReport{SummarizerIn: 1_000_000, SummarizerOut: 100_000,
		Cache:        CacheTally{Sent: 4_000_000, CacheRead: 3_000_000, CacheWrite: 1_000_000},
		CacheWithout: CacheTally{Sent: 10_000_000, CacheRead: 9_500_000, CacheWrite: 500_000}}
	anthropic := &savings.Price{Input: 3, CachedInput: 0.3, CacheWrite: 3.75, Output: 15}
	openai := &savings.Price{Input: 2, CachedInput: 0.5, CacheWrite: 0, Output: 8}
	mini := &savings.Price{Input: 0.4, CachedInput: 0.1, Output: 1.6}
	for _, tc := range []struct {
		name                        string
		p                           pricing
		noCache, cache, base, baseC float64
	}{
		// summarizer 1M × 0.4 + 0.1M × 1.6 = 0.56
		{"cache writes charged", pricing{agent: anthropic, summarizer: mini}, 4*3 + 0.56, 3*0.3 + 1*3.75 + 0.56, 10 * 3, 9.5*0.3 + 0.5*3.75},
		{"cache writes free", pricing{agent: openai, summarizer: mini}, 4*2 + 0.56, 3*0.5 + 1*2 + 0.56, 10 * 2, 9.5*0.5 + 0.5*2},
		{"summarizer unpriced", pricing{agent: openai}, 4 * 2, 3*0.5 + 1*2, 10 * 2, 9.5*0.5 + 0.5*2},
	} {
		c := tc.p.cost(s)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if !c.Priced || !near(c.NoCache, tc.noCache) || !near(c.Cache, tc.cache) || !near(c.BaselineNoCache, tc.base) ||
			!near(c.BaselineCache, tc.baseC) || !near(c.RatioNoCache, tc.noCache/tc.base) || !near(c.RatioCache, tc.cache/tc.baseC) {
			t.Errorf("%s: %+v; want no cache %.4f, cache %.4f, baselines %.4f and %.4f", tc.name, c, tc.noCache, tc.cache, tc.base, tc.baseC)
		}
	}
	c := pricing{}.cost(s)
	if c.Priced || !near2(c.TokenRatio, 5.1/10) || !near2(c.UncachedRatio, (1+1.1)/0.5) {
		t.Errorf("no prices: %+v; want unpriced, token ratio 0.51, uncached ratio 4.2", c)
	}
}

func near2(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
