package tenants

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/summary"
)

// clock is a settable time for a quota: the day's count and the reservations'
// deadlines follow it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)} }

func quotaOn(st *jetstream.Store, q Quotas, c *clock) *Quota {
	qt := NewQuota("acme", q, st, zerolog.Nop())
	qt.now = c.now
	return qt
}

func tokensUsed(ctx context.Context, t *testing.T, st *jetstream.Store, day time.Time) int64 {
	t.Helper()
	n, _, err := st.TokensUsed(ctx, day)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A running compaction is counted once: the tokens its calls spent are the day's
// count, and they come out of its reservation rather than being added beside it.
// Before, the reservation and the calls' tokens were both in the count until the
// compaction ended: a compaction that had spent 3000 of its 4000 tokens counted 7000,
// and a second compaction that fit was declined.
func TestQuotaCountsARunningCompactionOnce(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		q := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		first, err := q.Allow(ctx, "c1", true, 4000)
		if err != nil || first.Reason != "" {
			t.Fatalf("first compaction: %+v, %v", first, err)
		}
		q.Charge(summary.ChargeTo(ctx, first.Tag), schemas.Usage{PromptTokens: 2500, CompletionTokens: 500}) // its call, answered
		if used := tokensUsed(ctx, t, st, c.now()); used != 3000 {
			t.Fatalf("the day's count is %d while the compaction runs; its call spent 3000", used)
		}
		second, err := q.Allow(ctx, "c2", true, 4000)
		if err != nil {
			t.Fatal(err)
		}
		if second.Reason != "" {
			t.Fatalf("3000 spent, 1000 still reserved, and 4000 more fit in 10000; declined: %s", second.Reason)
		}
		third, err := q.Allow(ctx, "c3", true, 4000)
		if err != nil {
			t.Fatal(err)
		}
		if third.Reason == "" {
			t.Fatal("3000 spent and 5000 reserved: 4000 more do not fit in 10000, and were allowed")
		}
		first.Release()
		second.Release()
		if used := tokensUsed(ctx, t, st, c.now()); used != 3000 {
			t.Fatalf("the day's count is %d once both ended; the tenant spent 3000", used)
		}
	})
}

// A reservation whose process died (a crash, a kill -9: nothing ran its Release)
// stops counting at its deadline, not at midnight. Before, it stayed in the day's count
// for the rest of the day: another process's compactions were declined until 00:00 UTC.
func TestQuotaReservationOfADeadProcessExpires(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		dead := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		if d, err := dead.Allow(ctx, "c1", true, 8000); err != nil || d.Reason != "" {
			t.Fatalf("the compaction of the process that dies: %+v, %v", d, err)
		}
		// The process dies here: its reservation is never released.
		other := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		d, err := other.Allow(ctx, "c2", true, 4000)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason == "" {
			t.Fatal("8000 reserved by a compaction that may still run, and 4000 more were allowed in 10000")
		}
		c.add(20 * time.Minute) // past the dead reservation's deadline, the same day
		d, err = other.Allow(ctx, "c2", true, 4000)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason != "" {
			t.Fatalf("20 minutes after its process died, its reservation still declines: %s", d.Reason)
		}
		d.Release()
		if used := tokensUsed(ctx, t, st, c.now()); used != 0 {
			t.Fatalf("nothing was spent; the day's count is %d", used)
		}
	})
}

// A reservation whose process lives on, working on a long compaction, does not expire:
// each call it counts pushes its deadline back.
func TestQuotaReservationOfALiveProcessHolds(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		live := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		d, err := live.Allow(ctx, "c1", true, 8000)
		if err != nil || d.Reason != "" {
			t.Fatalf("%+v, %v", d, err)
		}
		tagged := summary.ChargeTo(ctx, d.Tag)
		other := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		for range 4 { // an hour of calls, one every 10 minutes
			c.add(10 * time.Minute)
			live.Charge(tagged, schemas.Usage{PromptTokens: 100})
			d, err := other.Allow(ctx, "c2", true, 4000)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason == "" {
				t.Fatalf("at %s the working compaction's reservation no longer counted", c.now().Format(time.TimeOnly))
			}
		}
	})
}

func publishTo(t *testing.T, nc *nats.Conn, st *jetstream.Store, convs ...string) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	for _, conv := range convs {
		subj, err := st.Config().ChatSubject(conv)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(subj, []byte(`{"role":"user","content":"hello"}`)); err != nil {
			t.Fatal(err)
		}
	}
}

func allowed(ctx context.Context, t *testing.T, q *Quota, conv string) bool {
	t.Helper()
	d, err := q.Allow(ctx, conv, false, 100)
	if err != nil {
		t.Fatal(err)
	}
	return d.Reason == ""
}

// The proxy stores a client's edited history as branches of its conversation
// (<conversation>--<16 hex digits>): a conversation and its branches count as one.
// Before, each branch counted as a conversation of its own, and a tenant within its
// quota was declined as over it.
func TestQuotaCountsBranchesWithTheirConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		q := quotaOn(st, Quotas{Conversations: 2}, c)
		publishTo(t, nc, st, "c1", "c1--0123456789abcdef", "c1--fedcba9876543210", "c2")
		if !allowed(ctx, t, q, "c2") {
			t.Fatal("c1 (with two branches) and c2 are two conversations, within a quota of 2; c2 was declined")
		}
		if !allowed(ctx, t, q, "c1--0123456789abcdef") {
			t.Fatal("a branch of c1 was declined within the quota")
		}
		// "c1--x" is no branch: a conversation of its own, the third.
		publishTo(t, nc, st, "c1--x")
		c.add(time.Minute)
		if allowed(ctx, t, q, "c1--x") {
			t.Fatal("c1--x is a third conversation, over the quota of 2, and was allowed")
		}
	})
}

// Being over the conversations quota refuses new conversations only: those the tenant
// held before it went over go on being compacted, and so do their branches, in every
// process. Before, every conversation never compacted was declined once new ones
// pushed the tenant over.
func TestQuotaOverConversationsRefusesNewOnesOnly(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		q := quotaOn(st, Quotas{Conversations: 2}, c)
		publishTo(t, nc, st, "c1", "c2")
		if !allowed(ctx, t, q, "c1") {
			t.Fatal("c1 declined within the quota")
		}
		publishTo(t, nc, st, "c3", "c4", "c1")
		c.add(time.Minute)
		for _, conv := range []string{"c1", "c2"} {
			if !allowed(ctx, t, q, conv) {
				t.Fatalf("%s, held before the tenant went over its quota, was declined because c3 and c4 came", conv)
			}
		}
		for _, conv := range []string{"c3", "c4"} {
			if allowed(ctx, t, q, conv) {
				t.Fatalf("%s came once the tenant held its quota of conversations, and was allowed", conv)
			}
		}
		publishTo(t, nc, st, "c2--0123456789abcdef")
		other := quotaOn(st, Quotas{Conversations: 2}, c) // another process, started now
		if !allowed(ctx, t, other, "c2--0123456789abcdef") {
			t.Fatal("a new branch of c2 (held before) was declined by another process")
		}
		if allowed(ctx, t, other, "c4") {
			t.Fatal("another process allowed c4")
		}
	})
}

// Each call is charged to the reservation of the compaction that made it: two
// compactions running in one process, the second finishing first, leave the first's
// reservation whole. Before, a call's tokens came out of the process's oldest
// reservation: B's 4000 came out of A's, B's release dropped its untouched 4000, and a
// third 4000 was admitted while A could still spend 4000: 12000 in a day of 10000.
func TestQuotaChargesTheCallsOwnReservation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, _ *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		q := quotaOn(st, Quotas{SummarizerTokensPerDay: 10000}, c)
		a, err := q.Allow(ctx, "a", true, 4000)
		if err != nil || a.Reason != "" {
			t.Fatalf("a: %+v, %v", a, err)
		}
		b, err := q.Allow(ctx, "b", true, 4000)
		if err != nil || b.Reason != "" {
			t.Fatalf("b: %+v, %v", b, err)
		}
		q.Charge(summary.ChargeTo(ctx, b.Tag), schemas.Usage{PromptTokens: 4000}) // b's call
		b.Release()
		third, err := q.Allow(ctx, "c", true, 4000)
		if err != nil {
			t.Fatal(err)
		}
		if third.Reason == "" {
			t.Fatal("4000 spent by b and 4000 still reserved by a: a third 4000 was admitted past 10000")
		}
		q.Charge(summary.ChargeTo(ctx, a.Tag), schemas.Usage{PromptTokens: 4000}) // a's call
		a.Release()
		if used := tokensUsed(ctx, t, st, c.now()); used != 8000 {
			t.Fatalf("the day's count is %d; want the 8000 both calls spent", used)
		}
	})
}

// A conversation's branches count with it up to jetstream.BranchesPerConversation:
// past them each branch is a conversation of its own. A producer that names its new
// conversations <old conversation>--<16 hex digits> gets no more from the quota than
// one that names them anything else: they push the tenant over its quota, and the
// branches born since are declined, while the root and the tenant's other
// conversations go on. Before, every such branch counted as its root, and a tenant
// with a quota of 2 compacted 40 conversations without ever being over it.
func TestQuotaBoundsTheBranchesCountedWithTheirConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := context.Background()
		c := newClock()
		q := quotaOn(st, Quotas{Conversations: 2}, c)
		publishTo(t, nc, st, "c1", "c2")
		if !allowed(ctx, t, q, "c1") {
			t.Fatal("c1 declined within the quota")
		}
		var branches []string
		for i := range jetstream.BranchesPerConversation + 8 {
			branches = append(branches, fmt.Sprintf("c1--%016x", i))
		}
		publishTo(t, nc, st, branches...)
		c.add(time.Minute)
		if d, err := q.Allow(ctx, branches[len(branches)-1], false, 100); err != nil || d.Reason == "" {
			t.Fatalf("the %d-th branch of c1, born once c1 had more branches than count with it, was allowed (%+v, %v)", len(branches), d, err)
		}
		if allowed(ctx, t, q, branches[0]) {
			t.Fatal("a branch of c1 born after the tenant reached its quota was allowed: c1's age admitted it past the bound")
		}
		for _, conv := range []string{"c1", "c2"} {
			if !allowed(ctx, t, q, conv) {
				t.Fatalf("%s, held before, was declined", conv)
			}
		}
	})
}
