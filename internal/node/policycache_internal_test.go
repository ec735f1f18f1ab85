package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
)

// testCache is a cache on a real store's watch, with a clock the test moves.
func testCache(t *testing.T) (c *policyCache, now *time.Time) {
	t.Helper()
	st := jstest.Provision(t, jstest.Conn(t, jstest.Server(t)))
	c = newPolicyCache(st, zerolog.Nop())
	sub, err := st.Policies().WatchFirst(c.changed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	c.running.Store(true)
	clock := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return clock }
	return c, &clock
}

// learn stores what a read of conv found, as Settings does after a miss.
func learn(t *testing.T, c *policyCache, conv string) {
	t.Helper()
	_, st, ok := c.get(conv)
	if ok {
		t.Fatalf("%s: already held", conv)
	}
	c.put(conv, c.begin(st), cacheEntry{s: &policy.Settings{}})
}

func held(c *policyCache, conv string) bool {
	_, _, ok := c.get(conv)
	return ok
}

// The entries are bounded; a conversation read all along stays while the others come
// and go.
func TestPolicyCacheIsBounded(t *testing.T) {
	c, _ := testCache(t)
	c.bound = 8
	learn(t, c, "keep")
	for i := range 100 {
		learn(t, c, fmt.Sprintf("c%d", i))
		if !held(c, "keep") {
			t.Fatalf("after %d others, the conversation read all along was dropped", i+1)
		}
		if n := len(c.cur) + len(c.old); n > c.bound {
			t.Fatalf("%d entries; bound %d", n, c.bound)
		}
	}
	if held(c, "c0") {
		t.Fatal("the first of 100 conversations read once is still held under a bound of 8")
	}
}

// No entry is served past the maximum age; one read within the settle window after a
// change is heard is read again once the window has passed.
func TestPolicyCacheExpires(t *testing.T) {
	c, now := testCache(t)
	learn(t, c, "a")
	*now = now.Add(c.maxAge - time.Second)
	if !held(c, "a") {
		t.Fatal("dropped before its age")
	}
	*now = now.Add(time.Second)
	if held(c, "a") {
		t.Fatal("served past the maximum age")
	}

	c.changed("b")
	*now = now.Add(time.Second)
	learn(t, c, "b")
	if !held(c, "b") {
		t.Fatal("a read after the change was not kept")
	}
	*now = now.Add(c.settle - time.Second)
	if held(c, "b") {
		t.Fatal("a read within the settle window of a change is served past the window")
	}
	learn(t, c, "b") // after the window: kept the full age
	*now = now.Add(c.maxAge - time.Second)
	if !held(c, "b") {
		t.Fatal("a read after the settle window was not kept")
	}
}

// A read begun before a change is heard is not kept: it may hold the old policy.
func TestPolicyCacheDropsAReadOlderThanAChange(t *testing.T) {
	c, now := testCache(t)
	_, st, _ := c.get("a")
	b := c.begin(st)
	c.changed("a")
	c.put("a", b, cacheEntry{s: &policy.Settings{}})
	if held(c, "a") {
		t.Fatal("a read begun before the change was kept")
	}
	// A read that took longer than the settle window is not kept either.
	_, st, _ = c.get("b")
	b = c.begin(st)
	*now = now.Add(c.settle)
	c.put("b", b, cacheEntry{s: &policy.Settings{}})
	if held(c, "b") {
		t.Fatal("a read that took the whole settle window was kept")
	}
}

// The changes heard are kept for the settle window only, dropped oldest first; a burst
// of more conversations changed within one window than the cache keeps makes it keep
// nothing new until the window after the burst has passed.
func TestPolicyCacheBurstOfChanges(t *testing.T) {
	c, now := testCache(t)
	c.maxRecent = 100
	for i := range 1000 { // 10 changes a settle window: only the window's stay
		*now = now.Add(c.settle / 10)
		c.changed(fmt.Sprintf("slow%d", i))
		if len(c.recent) > 10 || len(c.heard) > 10 {
			t.Fatalf("after %d changes: %d recent, %d heard; at most 10 fall within the window", i+1, len(c.recent), len(c.heard))
		}
	}
	for i := range c.maxRecent + 1 { // a burst past the bound, within one window
		c.changed(fmt.Sprintf("burst%d", i))
	}
	if len(c.recent) > c.maxRecent || len(c.heard) > c.maxRecent {
		t.Fatalf("a burst left %d recent and %d heard; bound %d", len(c.recent), len(c.heard), c.maxRecent)
	}
	*now = now.Add(time.Second)
	learn(t, c, "burst3")
	if held(c, "burst3") {
		t.Fatal("a read within the window after a burst was kept, though the burst's changes were not")
	}
	*now = now.Add(c.settle)
	learn(t, c, "burst3")
	if !held(c, "burst3") {
		t.Fatal("a read after the burst settled was not kept")
	}
}
