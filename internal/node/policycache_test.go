package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
)

// cachedSource starts a PolicySource whose watch runs until the test ends.
func cachedSource(t testing.TB, st *jetstream.Store) node.PolicySource {
	t.Helper()
	r, err := policy.NewResolver(policy.Layer{"context_window": "8000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := node.NewPolicySource(st, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	// Run subscribes in its goroutine: wait until the cache is in use (a hit).
	waitUntil(t, 10*time.Second, "the cache to answer", func() bool {
		before := src.CacheStats().Hits
		settingsOf(t, src, "warm-up")
		settingsOf(t, src, "warm-up")
		return src.CacheStats().Hits > before
	})
	return src
}

// uncached is a PolicySource without its watch: every call reads the stream, as before
// the cache.
func uncached(t testing.TB, st *jetstream.Store) node.PolicySource {
	t.Helper()
	r, err := policy.NewResolver(policy.Layer{"context_window": "8000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return node.NewPolicySource(st, r)
}

func settingsOf(t testing.TB, src node.PolicySource, conv string) policy.Settings {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := src.Settings(ctx, conv)
	if err != nil {
		t.Fatalf("settings of %s: %v", conv, err)
	}
	return s
}

func waitUntil(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heard returns a function that waits until st's policy watch has delivered every
// change writer made before the call (the cache hears each before this watcher does).
// It publishes a notification of its own after them on writer's connection, which the
// server routes after the writer's earlier publishes, and waits for it.
func heard(t *testing.T, st *jetstream.Store) func(writer *jetstream.Store) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]bool{}
	sub, err := st.Policies().Watch(func(conv string) {
		mu.Lock()
		got[conv] = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	n := 0
	return func(writer *jetstream.Store) {
		t.Helper()
		n++
		mark := fmt.Sprintf("heard-%d", n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := writer.Policies().Notify(ctx, mark); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, "the watch to deliver "+mark, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return got[mark]
		})
	}
}

func putPolicy(t testing.TB, st *jetstream.Store, conv string, l policy.Layer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var data []byte
	if l != nil {
		data, _ = policy.EncodeConversation(l)
	}
	if err := st.Policies().Update(ctx, conv, func([]byte) ([]byte, bool, error) { return data, true, nil }); err != nil {
		t.Fatal(err)
	}
}

// twoProcesses is a server with two stores on their own connections: the one whose
// cache is tested, and another process that writes policies.
func twoProcesses(t *testing.T) (cached, other *jetstream.Store) {
	t.Helper()
	srv := jstest.Server(t)
	other = jstest.Provision(t, jstest.Conn(t, srv))
	cached = jstest.Provision(t, jstest.Conn(t, srv))
	return cached, other
}

// A policy another process writes, changes or deletes is served by the first call
// after the change is heard; until then, calls are answered from memory.
func TestPolicyCacheSeesChangesOfOthers(t *testing.T) {
	cachedSt, other := twoProcesses(t)
	src := cachedSource(t, cachedSt)
	wait := heard(t, cachedSt)
	const conv = "cache-1"
	steps := []struct {
		what   string
		policy policy.Layer // nil: deleted
		want   float64
	}{
		{"no policy", nil, 0.75},
		{"set", policy.Layer{"threshold": "0.6"}, 0.6},
		{"changed", policy.Layer{"threshold": "0.55"}, 0.55},
		{"deleted", nil, 0.75},
	}
	for i, step := range steps {
		if i > 0 {
			putPolicy(t, other, conv, step.policy)
			wait(other)
		}
		if s := settingsOf(t, src, conv); s.Threshold != step.want {
			t.Fatalf("%s by another process: threshold %v; want %v", step.what, s.Threshold, step.want)
		}
		// Read again without a change: from memory (absence included).
		hits := src.CacheStats().Hits
		if s := settingsOf(t, src, conv); s.Threshold != step.want || src.CacheStats().Hits != hits+1 {
			t.Fatalf("%s: read again without a change: threshold %v, %d hits (were %d); want from memory", step.what, s.Threshold, src.CacheStats().Hits, hits)
		}
	}
}

// A policy this process writes is read back at once, even while the watch has not
// delivered the change (held here behind a slow watcher).
func TestPolicyCacheReadsItsOwnWrites(t *testing.T) {
	cachedSt, other := twoProcesses(t)
	src := cachedSource(t, cachedSt)
	const conv, blocker = "own-1", "blocker-1"
	release := make(chan struct{})
	blocked := make(chan struct{})
	sub, err := cachedSt.Policies().Watch(func(c string) {
		if c == blocker {
			close(blocked)
			<-release
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	defer close(release)

	settingsOf(t, src, conv) // cached: no policy
	putPolicy(t, other, blocker, policy.Layer{"threshold": "0.9"})
	<-blocked // the watch delivers nothing more until released

	putPolicy(t, cachedSt, conv, policy.Layer{"threshold": "0.6"})
	if s := settingsOf(t, src, conv); s.Threshold != 0.6 {
		t.Fatalf("threshold %v right after this process set 0.6", s.Threshold)
	}
	putPolicy(t, cachedSt, conv, nil)
	if s := settingsOf(t, src, conv); s.Threshold != 0.75 {
		t.Fatalf("threshold %v right after this process deleted the policy", s.Threshold)
	}
}

// A forget purges the policy (no publish a watch hears): its notification makes every
// process's cache drop it.
func TestPolicyCacheForgetsAForgottenPolicy(t *testing.T) {
	cachedSt, other := twoProcesses(t)
	src := cachedSource(t, cachedSt)
	wait := heard(t, cachedSt)
	const conv = "forget-cache-1"
	putPolicy(t, other, conv, policy.Layer{"threshold": "0.6"})
	wait(other)
	if s := settingsOf(t, src, conv); s.Threshold != 0.6 {
		t.Fatalf("threshold %v", s.Threshold)
	}
	settingsOf(t, src, conv) // a hit
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := other.Forget(ctx, conv)
	if err != nil || out.Deleted.PolicyRevisions != 1 {
		t.Fatalf("forget: %+v, %v", out.Deleted, err)
	}
	wait(other)
	if s := settingsOf(t, src, conv); s.Threshold != 0.75 {
		t.Fatalf("threshold %v after the conversation was forgotten: its policy is still served", s.Threshold)
	}
	// The notification stored nothing.
	if data, rev, err := other.Policies().Get(ctx, conv); data != nil || rev != 0 || err != nil {
		t.Fatalf("after the forget the policy bucket holds %q at %d (%v)", data, rev, err)
	}
}

// A connection that lost what the server sent (a change among it) and reconnected
// starts the cache afresh: the change is served, not the policy cached before.
func TestPolicyCacheHealsAfterAReconnect(t *testing.T) {
	srv := jstest.ServerWith(t, nil)
	relay := jstest.NewRelay(t, jstest.HostPort(srv))
	other := jstest.Provision(t, jstest.ConnTo(t, srv.ClientURL()))
	nc, err := nats.Connect(relay.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cachedSt := jstest.Provision(t, nc)
	src := cachedSource(t, cachedSt)
	const conv = "reconnect-1"
	if s := settingsOf(t, src, conv); s.Threshold != 0.75 {
		t.Fatalf("threshold %v", s.Threshold)
	}
	relay.Mute(true) // the notification of the next change is lost
	putPolicy(t, other, conv, policy.Layer{"threshold": "0.6"})
	relay.Break()
	waitUntil(t, 30*time.Second, "the change to be served after the reconnect", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := src.Settings(ctx, conv)
		return err == nil && s.Threshold == 0.6
	})
	// From then on, only the change is served, from memory once the watch is live again.
	waitUntil(t, 10*time.Second, "the cache to answer again", func() bool {
		hits := src.CacheStats().Hits
		if s := settingsOf(t, src, conv); s.Threshold != 0.6 {
			t.Fatalf("threshold %v after the reconnect: the policy cached before it is served", s.Threshold)
		}
		return src.CacheStats().Hits > hits
	})
}

// A user that may not subscribe to the policy subjects still gets every change: its
// watch is refused, and every call reads the stream.
func TestPolicyCacheWithoutWatchPermission(t *testing.T) {
	srv := jstest.ServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "limited", Password: "limited", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_limited.>"}},
			}},
		}
	})
	url := "nats://" + jstest.HostPort(srv)
	admin, err := nats.Connect(url, nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	other := jstest.Provision(t, admin)
	limited, err := nats.Connect(url, nats.UserInfo("limited", "limited"), nats.CustomInboxPrefix("_INBOX_limited"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(limited.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := jetstream.Provision(ctx, limited, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := policy.NewResolver(policy.Layer{"context_window": "8000"}, nil, nil)
	src := node.NewPolicySource(st, r)
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(rctx) }()
	defer func() { rcancel(); <-done }()
	waitUntil(t, 10*time.Second, "the watch to be refused", func() bool { return st.Policies().WatchState().Refused })

	const conv = "limited-1"
	for i, th := range []string{"0.6", "0.55", ""} {
		var l policy.Layer
		want := 0.75
		if th != "" {
			l = policy.Layer{"threshold": th}
			fmt.Sscan(th, &want)
		}
		putPolicy(t, other, conv, l)
		if s := settingsOf(t, src, conv); s.Threshold != want {
			t.Fatalf("step %d: threshold %v; want %v", i, s.Threshold, want)
		}
	}
	if st := src.CacheStats(); st.Hits != 0 || st.Live {
		t.Fatalf("a refused watch: %+v; want no hit and not live", st)
	}
}

// Differential: under random writes and deletes by this process and another, each
// followed by its notification, the cached settings of every conversation are those
// a read of the stream gives.
func TestPolicyCacheAgreesWithTheStream(t *testing.T) {
	cachedSt, other := twoProcesses(t)
	src := cachedSource(t, cachedSt)
	direct := uncached(t, cachedSt)
	wait := heard(t, cachedSt)
	rng := rand.New(rand.NewPCG(19, 3))
	convs := make([]string, 12)
	for i := range convs {
		convs[i] = fmt.Sprintf("diff-%d", i)
	}
	for step := range 120 {
		conv := convs[rng.IntN(len(convs))]
		writer := other
		if rng.IntN(2) == 0 {
			writer = cachedSt
		}
		var l policy.Layer
		switch rng.IntN(4) {
		case 0: // delete
		case 1:
			l = policy.Layer{"profile": "ghost"} // does not resolve: the error is cached too
		default:
			l = policy.Layer{"threshold": fmt.Sprintf("0.%d", 6+rng.IntN(3))}
		}
		putPolicy(t, writer, conv, l)
		wait(writer)
		for _, c := range convs {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, gerr := src.Settings(ctx, c)
			want, werr := direct.Settings(ctx, c)
			cancel()
			if got != want || fmt.Sprint(gerr) != fmt.Sprint(werr) {
				t.Fatalf("step %d, %s: cached %+v (%v); the stream gives %+v (%v)", step, c, got, gerr, want, werr)
			}
		}
	}
	if st := src.CacheStats(); st.Hits == 0 {
		t.Fatalf("no hit: %+v", st)
	}
}

// BenchmarkPolicySettings asks the settings of 1,000 conversations, half of them with
// a policy of their own, from the cache and from the stream (the source without its
// watch, as every call was before the cache).
func BenchmarkPolicySettings(b *testing.B) {
	srv := jstest.Server(b)
	st := jstest.Provision(b, jstest.Conn(b, srv))
	convs := make([]string, 1000)
	for i := range convs {
		convs[i] = fmt.Sprintf("bench-%d", i)
		if i%2 == 0 {
			putPolicy(b, st, convs[i], policy.Layer{"threshold": fmt.Sprintf("0.%d", 6+i%3), "strategy": "tool-rounds"})
		}
	}
	for _, tc := range []struct {
		name string
		src  func(testing.TB, *jetstream.Store) node.PolicySource
	}{{"cache", cachedSource}, {"stream", uncached}} {
		b.Run(tc.name, func(b *testing.B) {
			src := tc.src(b, st)
			for _, c := range convs { // warm: every conversation read once
				settingsOf(b, src, c)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if _, err := src.Settings(ctx, convs[i%len(convs)]); err != nil && !strings.Contains(err.Error(), "policy") {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkNewConversationSettings asks the settings of conversations never seen
// before, none with a policy (as a trigger does at a new conversation's first message):
// from the cache, which knows they have none, and from the stream (the source without
// its watch: a leader read each, as the cache did before it listed the policies).
func BenchmarkNewConversationSettings(b *testing.B) {
	srv := jstest.Server(b)
	st := jstest.Provision(b, jstest.Conn(b, srv))
	for i := range 100 {
		putPolicy(b, st, fmt.Sprintf("has-%d", i), policy.Layer{"threshold": "0.6"})
	}
	for _, tc := range []struct {
		name string
		src  func(testing.TB, *jetstream.Store) node.PolicySource
	}{{"cache", cachedSource}, {"stream", uncached}} {
		b.Run(tc.name, func(b *testing.B) {
			src := tc.src(b, st)
			if tc.name == "cache" {
				n := 0
				waitUntil(b, 10*time.Second, "the cache to list the policies", func() bool {
					n++
					settingsOf(b, src, fmt.Sprintf("probe-%d", n))
					return src.CacheStats().Absent > 0
				})
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := src.Settings(ctx, fmt.Sprintf("%s-new-%d", tc.name, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// The roles of deploy/nats that resolve settings (trigger, worker, api) may watch the
// policies: their caches are live, and the server refused none of their subscriptions.
func TestPolicyCacheUnderTheRoles(t *testing.T) {
	_, connect := rolestest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := connect("admin")
	if _, err := jetstream.Provision(ctx, admin.NC, jetstream.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"trigger", "worker", "api"} {
		t.Run(role, func(t *testing.T) {
			c := connect(role)
			st, err := jetstream.Provision(ctx, c.NC, jetstream.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			src := cachedSource(t, st)
			// A subscription the role may not make, after the watch's: its refusal comes
			// after any refusal of the watch's, in order.
			if _, err := c.NC.SubscribeSync("not.allowed.marker"); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 10*time.Second, "the marker's refusal", func() bool {
				return strings.Contains(c.Violations(), "not.allowed.marker")
			})
			if v := c.Violations(); strings.Contains(v, "compaction-policy") {
				t.Fatalf("the %s role may not watch the policies: %s", role, v)
			}
			if cs, w := src.CacheStats(), st.Policies().WatchState(); !cs.Live || !w.Live || w.Refused || cs.Hits == 0 {
				t.Fatalf("the %s role's cache: %+v, watch %+v", role, cs, w)
			}
		})
	}
}

// A conversation without a policy is answered with the defaults without a read of the
// stream, and without an entry, once the cache has listed the conversations with one:
// a policy written before the cache started is listed and read, and one another process
// writes afterwards is heard and read. Before, every new conversation cost a read of the
// stream leader that found nothing, and an entry.
func TestPolicyCacheAnswersConversationsWithoutAPolicyWithoutARead(t *testing.T) {
	cachedSt, other := twoProcesses(t)
	putPolicy(t, other, "before-1", policy.Layer{"threshold": "0.6"})
	src := cachedSource(t, cachedSt)
	wait := heard(t, cachedSt)
	n := 0
	waitUntil(t, 10*time.Second, "the cache to list the conversations with a policy", func() bool {
		n++
		settingsOf(t, src, fmt.Sprintf("probe-%d", n))
		return src.CacheStats().Absent > 0
	})
	if s := settingsOf(t, src, "before-1"); s.Threshold != 0.6 {
		t.Fatalf("a policy written before the cache started: threshold %v; want 0.6", s.Threshold)
	}
	before := src.CacheStats()
	for i := range 100 {
		if s := settingsOf(t, src, fmt.Sprintf("new-%d", i)); s.Threshold != 0.75 || s.ContextWindow != 8000 {
			t.Fatalf("a new conversation: %+v; want the defaults", s)
		}
	}
	after := src.CacheStats()
	if after.Misses != before.Misses || after.Absent != before.Absent+100 || after.Entries != before.Entries {
		t.Fatalf("100 new conversations without a policy: %+v, was %+v; want no read, no entry", after, before)
	}
	putPolicy(t, other, "new-7", policy.Layer{"threshold": "0.7"})
	wait(other)
	if s := settingsOf(t, src, "new-7"); s.Threshold != 0.7 {
		t.Fatalf("a policy another process wrote: threshold %v; want 0.7", s.Threshold)
	}
	putPolicy(t, cachedSt, "new-8", policy.Layer{"threshold": "0.65"})
	if s := settingsOf(t, src, "new-8"); s.Threshold != 0.65 {
		t.Fatalf("a policy this process wrote: threshold %v; want 0.65", s.Threshold)
	}
}
