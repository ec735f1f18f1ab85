package triggers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/triggers"
)

// setupPartitioned provisions n partitions with a short heartbeat and a pinned TTL
// longer than any wait of the tests: a partition that changes hands fast was unpinned.
func setupPartitioned(t *testing.T, n int) *jetstream.Store {
	_, st := setupPartitionedConn(t, n)
	return st
}

func setupPartitionedConn(t *testing.T, n int) (*nats.Conn, *jetstream.Store) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = n
	cfg.TriggerHeartbeat = 100 * time.Millisecond
	cfg.TriggerPinnedTTL = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}

type runningParts struct {
	ps     *triggers.Partitions
	cancel context.CancelFunc
	done   chan error
}

func startPartitions(t *testing.T, st *jetstream.Store, member string, settings ...func(*policy.Settings)) *runningParts {
	t.Helper()
	ps, err := triggers.NewPartitions(testConfig(), st, fixed(settings), zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel), member)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningParts{ps: ps, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- ps.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *runningParts) stop() {
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
		<-r.done
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// convIn returns a conversation id of partition p of n.
func convIn(p, n int, tag string) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", tag, i)
		if jetstream.PartitionOf(id, n) == p {
			return id
		}
	}
}

// A process alone owns every partition; a second one takes its share at once (the
// first drains and unpins what it gives away: with a pinned TTL of a minute, nothing
// else would hand the consumers over within the test) and counts the conversations of
// its partitions from the stream; when it stops, its partitions come back.
func TestPartitionsShareAndMove(t *testing.T) {
	const n = 4
	st := setupPartitioned(t, n)
	a := startPartitions(t, st, "member-a")
	waitUntil(t, 10*time.Second, "member-a to own every partition", func() bool {
		return slices.Equal(a.ps.Owned(), []int{0, 1, 2, 3})
	})
	convs := make([]string, n)
	for p := range n {
		convs[p] = convIn(p, n, "share")
		publish(t, st, convs[p], text(400))
	}
	for _, c := range convs {
		waitUntil(t, 10*time.Second, "member-a to count "+c, func() bool { _, ok := a.ps.TokensOf(c); return ok })
	}

	b := startPartitions(t, st, "member-b")
	want := jetstream.AssignPartitions([]string{"member-a", "member-b"}, n)
	var ofA, ofB []int
	for p, o := range want {
		if o == "member-a" {
			ofA = append(ofA, p)
		} else {
			ofB = append(ofB, p)
		}
	}
	waitUntil(t, 10*time.Second, fmt.Sprintf("the partitions shared out as %v", want), func() bool {
		return slices.Equal(a.ps.Owned(), ofA) && slices.Equal(b.ps.Owned(), ofB)
	})
	for _, p := range ofB {
		c := convs[p]
		// The state of a partition given away goes with it, once drained.
		waitUntil(t, 10*time.Second, "member-a to drop "+c+" of a partition it gave away", func() bool {
			_, ok := a.ps.TokensOf(c)
			return !ok
		})
		publish(t, st, c, text(400))
		waitUntil(t, 10*time.Second, "member-b to count "+c+" (recounted from the stream)", func() bool {
			n, ok := b.ps.TokensOf(c)
			return ok && n >= 200
		})
	}

	b.stop() // leaves, drains, unpins
	waitUntil(t, 10*time.Second, "member-a to own every partition again", func() bool {
		return slices.Equal(a.ps.Owned(), []int{0, 1, 2, 3})
	})
	for _, p := range ofB {
		c := convs[p]
		publish(t, st, c, text(400))
		waitUntil(t, 10*time.Second, "member-a to count "+c+" again", func() bool {
			n, ok := a.ps.TokensOf(c)
			return ok && n >= 300
		})
	}
}

// With one partition there is nothing to share: NewPartitions refuses it.
func TestPartitionsNeedPartitions(t *testing.T) {
	_, st := setup(t)
	if _, err := triggers.NewPartitions(testConfig(), st, fixed(nil), zerolog.Nop(), "m"); err == nil {
		t.Fatal("partitions over a store with one partition: no error")
	}
	st4 := setupPartitioned(t, 4)
	if _, err := triggers.NewPartitions(testConfig(), st4, fixed(nil), zerolog.Nop(), "bad.id"); err == nil {
		t.Fatal("member id bad.id: no error")
	}
}

// The idle timers of a partitioned trigger are stored under the conversation's
// partition, and the marker an expired one leaves reaches the partition's owner.
func TestPartitionsIdleTrigger(t *testing.T) {
	nc, st := setupPartitionedConn(t, 3)
	reqs := watchRequests(t, nc, st)
	startPartitions(t, st, "member-a", func(s *policy.Settings) { s.IdleAfter = time.Second; s.IdleThreshold = 0.1 })
	conv := convIn(2, 3, "quiet")
	for range 3 {
		publish(t, st, conv, text(800)) // ~600 tokens > 0.1 × 4000, under the threshold
	}
	waitUntil(t, 15*time.Second, "the idle request", func() bool { return reqs.count() >= 1 })
	reqs.sync(t)
	if got := reqs.got[0]; got.Trigger != schemas.TriggerTemporal || got.Conversation != conv {
		t.Fatalf("request = %+v; want a temporal one for %s", got, conv)
	}
}

// Changing the partition count: one process applies the new count
// (UpdateExisting); the processes with the old count go on with the old layout's
// consumers, those with the new count own the new layout's partitions, and each
// conversation is counted whole (every layout's messages) by its new owner.
func TestPartitionsChangeCount(t *testing.T) {
	nc, st2 := setupPartitionedConn(t, 2)
	old := startPartitions(t, st2, "old-1")
	waitUntil(t, 10*time.Second, "old-1 to own both partitions", func() bool { return slices.Equal(old.ps.Owned(), []int{0, 1}) })
	conv := "change-count"
	publish(t, st2, conv, text(400))
	waitUntil(t, 10*time.Second, "old-1 to count "+conv, func() bool { _, ok := old.ps.TokensOf(conv); return ok })

	cfg3 := st2.Config()
	cfg3.TriggerPartitions = 3
	cfg3.UpdateExisting = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st3, err := jetstream.Provision(ctx, nc, cfg3)
	if err != nil {
		t.Fatal(err)
	}
	cur := startPartitions(t, st3, "new-1")
	waitUntil(t, 10*time.Second, "new-1 to own the 3 new partitions", func() bool { return slices.Equal(cur.ps.Owned(), []int{0, 1, 2}) })
	if got := old.ps.Owned(); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("old-1 owns %v of the old layout after new-1 came; want [0 1] (members are counted per layout)", got)
	}
	publish(t, st3, conv, text(400))
	waitUntil(t, 10*time.Second, "new-1 to count "+conv+" whole (both layouts)", func() bool {
		n, ok := cur.ps.TokensOf(conv)
		return ok && n >= 200
	})
	first, _ := old.ps.TokensOf(conv)
	if n, _ := cur.ps.TokensOf(conv); n < 2*first-10 {
		t.Errorf("new-1 counts %d tokens of %s; want about twice the %d of its first message", n, conv, first)
	}
}
