package jetstream_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/compactor/compactor/jetstream"
)

func members(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d-x%03d", prefix, 1000+i*7, i)
	}
	return out
}

func loads(owners []string) map[string]int {
	m := map[string]int{}
	for _, o := range owners {
		m[o]++
	}
	return m
}

// Every member owns ⌊n/m⌋ or ⌈n/m⌉ partitions, whatever the ids; every partition has
// an owner; the order of the member list does not matter.
func TestAssignBalance(t *testing.T) {
	for _, tc := range []struct{ parts, members int }{
		{1, 1}, {4, 1}, {4, 3}, {6, 3}, {6, 4}, {6, 7}, {16, 5}, {64, 3}, {256, 10},
	} {
		for seed := range 20 {
			ms := members(fmt.Sprintf("host%d", seed), tc.members)
			owners := jetstream.AssignPartitions(ms, tc.parts)
			rev := slices.Clone(ms)
			slices.Reverse(rev)
			if got := jetstream.AssignPartitions(append(rev, ms[0]), tc.parts); !slices.Equal(got, owners) {
				t.Fatalf("%d partitions, %d members: another member order (and a duplicate) gives %v; want %v", tc.parts, tc.members, got, owners)
			}
			lo, hi := tc.parts/tc.members, (tc.parts+tc.members-1)/tc.members
			l := loads(owners)
			if l[""] > 0 {
				t.Fatalf("%d partitions, %d members: %d without owner", tc.parts, tc.members, l[""])
			}
			for _, m := range ms {
				if l[m] < lo || l[m] > hi {
					t.Fatalf("%d partitions, %d members (seed %d): %s owns %d; want %d to %d (%v)", tc.parts, tc.members, seed, m, l[m], lo, hi, l)
				}
			}
		}
	}
	if got := jetstream.AssignPartitions(nil, 3); !slices.Equal(got, []string{"", "", ""}) {
		t.Errorf("no members: %q", got)
	}
}

// A member that leaves or joins moves its own partitions and few others: measured over
// many member sets, against the least any balanced assignment must move.
func TestAssignMovement(t *testing.T) {
	for _, tc := range []struct{ parts, members int }{{6, 3}, {16, 4}, {64, 4}, {64, 8}} {
		moved, least := 0, 0
		for seed := range 50 {
			ms := members(fmt.Sprintf("h%d", seed), tc.members)
			before := jetstream.AssignPartitions(ms, tc.parts)
			// One leaves: its partitions must move, others should mostly stay.
			gone := ms[seed%len(ms)]
			after := jetstream.AssignPartitions(slices.DeleteFunc(slices.Clone(ms), func(m string) bool { return m == gone }), tc.parts)
			for p := range before {
				if before[p] != after[p] {
					moved++
				}
				if before[p] == gone {
					least++
					if after[p] == gone {
						t.Fatalf("partition %d still owned by the member that left", p)
					}
				}
			}
			// It joins again: the assignment is the one before (no history).
			if again := jetstream.AssignPartitions(ms, tc.parts); !slices.Equal(again, before) {
				t.Fatalf("assignment after rejoining differs")
			}
		}
		t.Logf("%d partitions, %d → %d members: %d partitions moved, %d had to (%.2f×)", tc.parts, tc.members, tc.members-1, moved, least, float64(moved)/float64(least))
		// Re-hashing everything (owner = hash mod members) would move about
		// (1 - 1/(m-1)) of all partitions, 7× the least for 64 over 8; bounded rendezvous
		// stays within 2× of it (1.1× to 1.5× measured).
		if float64(moved) > 2*float64(least) {
			t.Errorf("%d partitions, %d members: %d moved for %d necessary", tc.parts, tc.members, moved, least)
		}
	}
}
