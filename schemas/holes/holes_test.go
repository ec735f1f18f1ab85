package holes_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/holes"
)

func TestCompareNamesWhatIsMissing(t *testing.T) {
	// One conversation's sequences among others' (every third, and a run), as many
	// producers interleaving on one stream leave them.
	var all []uint64
	for s := uint64(100); s < 400; s += 3 {
		all = append(all, s)
	}
	all = append(all, 401, 402, 403, 404)
	tests := []struct {
		name      string
		give      []uint64 // removed from all
		wantMiss  uint64
		wantNamed bool
	}{
		{name: "none", give: nil},
		{name: "one in the middle", give: []uint64{196}, wantMiss: 1, wantNamed: true},
		{name: "the first", give: []uint64{100}, wantMiss: 1, wantNamed: true},
		{name: "the last", give: []uint64{404}, wantMiss: 1, wantNamed: true},
		{name: "two apart", give: []uint64{103, 397}, wantMiss: 2, wantNamed: true},
		{name: "three in a run", give: []uint64{401, 402, 403}, wantMiss: 3, wantNamed: true},
		{name: "four", give: []uint64{100, 199, 301, 404}, wantMiss: 4, wantNamed: true},
		{name: "five: counted, not named", give: []uint64{100, 199, 301, 403, 404}, wantMiss: 5},
	}
	want := holes.Of(100, 404, all)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found := slices.DeleteFunc(slices.Clone(all), func(s uint64) bool { return slices.Contains(tt.give, s) })
			rand.Shuffle(len(found), func(i, j int) { found[i], found[j] = found[j], found[i] })
			got := holes.Compare(want, found)
			if got.Disagrees {
				t.Fatalf("got disagrees; want a comparison")
			}
			if got.Missing != tt.wantMiss {
				t.Errorf("missing got %d; want %d", got.Missing, tt.wantMiss)
			}
			if tt.wantNamed && !slices.Equal(got.Seqs, tt.give) {
				t.Errorf("seqs got %v; want %v", got.Seqs, tt.give)
			}
			if !tt.wantNamed && got.Seqs != nil {
				t.Errorf("seqs got %v; want none named", got.Seqs)
			}
		})
	}
}

func TestCompareDisagreesWithAnotherSet(t *testing.T) {
	want := holes.Of(1, 10, []uint64{1, 5, 9})
	if got := holes.Compare(want, []uint64{1, 5, 9, 10}); !got.Disagrees {
		t.Errorf("one more stored: got %+v; want disagrees", got)
	}
	if got := holes.Compare(want, []uint64{1, 6, 9}); !got.Disagrees {
		t.Errorf("as many, others: got %+v; want disagrees", got)
	}
}

func TestAccAgreesWithOfAndMerge(t *testing.T) {
	var a, b holes.Acc
	seqs := []uint64{7, 3, 1 << 40, 12, 99}
	for _, s := range seqs {
		a.Add(s)
	}
	w, ok := a.Witness(1 << 40)
	if !ok || w.FromSeq != 3 || w.ThroughSeq != 1<<40 {
		t.Fatalf("witness got %+v, %v", w, ok)
	}
	if of := holes.Of(3, 1<<40, seqs); !slices.Equal(of.Sums, w.Sums) || of.Count != w.Count {
		t.Errorf("Acc got %+v; Of %+v", w, of)
	}
	if _, ok := b.Witness(5); ok {
		t.Error("an empty accumulator gave a witness")
	}
	m := holes.Merge(holes.Of(1, 10, []uint64{2, 4}), holes.Of(11, 20, []uint64{15}))
	if of := holes.Of(1, 20, []uint64{2, 4, 15}); !slices.Equal(of.Sums, m.Sums) || of.Count != m.Count || m.FromSeq != 1 || m.ThroughSeq != 20 {
		t.Errorf("Merge got %+v; want %+v", m, of)
	}
}

func TestValidate(t *testing.T) {
	if err := holes.Validate(holes.Of(1, 10, []uint64{1, 2})); err != nil {
		t.Fatalf("valid witness: %v", err)
	}
	backwards := holes.Of(10, 1, nil)
	backwards.Count = 1
	over := holes.Of(1, 2, []uint64{1, 2})
	over.Count = 3
	big := holes.Of(1, 2, []uint64{1})
	big.Sums[0] = holes.Modulus
	none := holes.Of(1, 2, []uint64{1})
	none.Sums = nil
	for name, w := range map[string]schemas.Witness{"range backwards": backwards, "count over the range": over,
		"sum over the modulus": big, "no sums": none} {
		if err := holes.Validate(w); err == nil {
			t.Errorf("%s: got no error", name)
		}
	}
}

func TestCheckTellsAHoleFromWhatWasForgottenOrAgedOut(t *testing.T) {
	all := []uint64{10, 20, 30, 40, 50, 60}
	want := holes.Of(10, 60, all)
	without := func(gone ...uint64) []uint64 {
		return slices.DeleteFunc(slices.Clone(all), func(s uint64) bool { return slices.Contains(gone, s) })
	}
	tests := []struct {
		name        string
		found       []uint64
		goneThrough uint64
		wantSeqs    []uint64 // nil: no hole
		wantMissing uint64
	}{
		{name: "all stored", found: all},
		{name: "one lost in the middle", found: without(30), wantSeqs: []uint64{30}, wantMissing: 1},
		{name: "aged out below the stream's first", found: without(10, 20), goneThrough: 24},
		{name: "forgotten through a tombstone", found: nil, goneThrough: 60},
		{name: "aged out and one lost above", found: without(10, 50), goneThrough: 15, wantSeqs: []uint64{50}, wantMissing: 1},
		{name: "five lost, none excused: counted", found: without(10, 20, 30, 40, 50), wantMissing: 5},
		{name: "five gone, at most three sequences below the cut: two lost above it", found: without(10, 20, 30, 40, 50), goneThrough: 12, wantMissing: 2},
		{name: "five gone, all may be below the cut: not told", found: without(10, 20, 30, 40, 50), goneThrough: 55},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, why := holes.Check(want, tt.found, tt.goneThrough)
			if tt.wantMissing == 0 {
				if h != nil {
					t.Fatalf("got hole %+v; want none", *h)
				}
				if len(tt.found) < len(all) && why == "" {
					t.Errorf("nothing said of the missing messages")
				}
				return
			}
			if h == nil {
				t.Fatalf("got no hole (%s); want %d missing", why, tt.wantMissing)
			}
			if h.Missing != tt.wantMissing || !slices.Equal(h.Seqs, tt.wantSeqs) {
				t.Errorf("got %+v; want %d missing at %v", *h, tt.wantMissing, tt.wantSeqs)
			}
		})
	}
}

// A loss of more than Sums messages well above an accepted or aged-out cut is a hole:
// the cut excuses at most the sequences below it (a witness over 100 to 10000, the cut
// at 150, 5000 to 5009 lost).
func TestCheckFindsAnUnnamedLossAboveTheCut(t *testing.T) {
	var all []uint64
	for s := uint64(100); s <= 10000; s++ {
		all = append(all, s)
	}
	want := holes.Of(100, 10000, all)
	found := slices.DeleteFunc(slices.Clone(all), func(s uint64) bool { return s >= 5000 && s <= 5009 })
	h, why := holes.Check(want, found, 150)
	if h == nil || h.Missing != 10 || h.FromSeq != 151 || h.ThroughSeq != 10000 {
		t.Fatalf("got %+v (%s); want a hole of 10 missing above seq 150", h, why)
	}
	// With the first 51 aged out as well, the same 10 are still lost above the cut.
	found = slices.DeleteFunc(found, func(s uint64) bool { return s <= 150 })
	if h, why := holes.Check(want, found, 150); h == nil || h.Missing != 10 {
		t.Fatalf("got %+v (%s) with the prefix aged out; want the 10 lost above the cut", h, why)
	}
}
