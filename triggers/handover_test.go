package triggers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
)

// What a partition's trigger scheduled for a quiet conversation (the in-flight
// check of TestMissedOutcomeDoesNotHoldTheConversation, a failure's backoff retry, the
// wake after a decline) is dropped with its state when the partition moves, and the new
// owner, which rebuilds "on first sight", never sees the quiet conversation: the same
// case TestMissedOutcomeDoesNotHoldTheConversation shows working with one trigger is
// left over its budget after a routine hand-over (a process joining).
func TestAHandOverKeepsWhatWasScheduled(t *testing.T) {
	const n = 2
	nc, st := setupPartitionedConn(t, n)
	a := startPartitions(t, st, "member-a")
	waitUntil(t, 10*time.Second, "member-a to own every partition", func() bool {
		return slices.Equal(a.ps.Owned(), []int{0, 1})
	})
	// A conversation of the partition member-b will take.
	p := slices.Index(jetstream.AssignPartitions([]string{"member-a", "member-b"}, n), "member-b")
	conv := convIn(p, n, "moved")
	for range 15 { // over the threshold
		publish(t, st, conv, text(800))
	}
	d, _ := fetchRequest(t, st) // a worker has it
	first := stored(t, nc, st)

	b := startPartitions(t, st, "member-b")
	waitUntil(t, 10*time.Second, "member-b to own its partition and member-a to release it", func() bool {
		return slices.Contains(b.ps.Owned(), p) && !slices.Contains(a.ps.Owned(), p)
	})
	// The worker finished (its ack frees the slot) and died before its event; the
	// conversation is quiet and still over its threshold.
	if err := d.AckSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "a request after the first one left the queue without an outcome event", func() bool {
		return stored(t, nc, st) > first
	})
}
