// Package holes finds the messages missing from a conversation's raw history: a
// schemas.Witness says how many messages a reader saw in a range of stream sequences
// and the power sums of their sequences; comparing it with the sequences stored there
// now gives the count missing and, up to Sums of them, which ones (the power sums of
// the missing set are the differences, Newton's identities give the polynomial whose
// roots they are). Pure functions: no NATS.
package holes

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// Modulus is the prime the power sums are taken modulo: the largest below 2^53, so
// every sum is an exact JSON number in every language.
const Modulus = schemas.WitnessModulus

// Sums is how many power sums a witness carries: how many missing messages of one
// range can be named.
const Sums = 4

// MaxScan bounds how many sequences of a range are tried as roots when more than one
// message is missing: past it the holes are counted, not named.
const MaxScan = 1 << 22

// New is an empty witness.
func New() schemas.Witness { return schemas.Witness{Sums: make([]uint64, Sums)} }

// Of is the witness of the sequences seqs (in any order, each once) over [from, through].
func Of(from, through uint64, seqs []uint64) schemas.Witness {
	w := New()
	w.FromSeq, w.ThroughSeq = from, through
	for _, s := range seqs {
		addSums(w.Sums, s)
		w.Count++
	}
	return w
}

// Acc accumulates a witness one sequence at a time; the zero value is empty. It is the
// trigger's per-conversation form: no slice, six words. It keeps no newest sequence:
// its reader has one already (the trigger's watermark) and passes it to Witness.
type Acc struct {
	From, Count uint64
	Sums        [Sums]uint64
}

// Add counts the sequence seq once (callers add each sequence once).
func (a *Acc) Add(seq uint64) {
	if a.Count == 0 || seq < a.From {
		a.From = seq
	}
	a.Count++
	addSums(a.Sums[:], seq)
}

// Witness is the accumulated witness over [From, through]; ok is false when nothing
// was added. through is the newest sequence the reader had seen: at least every
// sequence added (the witness of a range that leaves out an added sequence would
// claim it missing).
func (a *Acc) Witness(through uint64) (w schemas.Witness, ok bool) {
	if a.Count == 0 {
		return schemas.Witness{}, false
	}
	return schemas.Witness{FromSeq: a.From, ThroughSeq: max(through, a.From), Count: a.Count, Sums: slices.Clone(a.Sums[:])}, true
}

// Merge is the witness of two ranges that follow each other (a before b).
func Merge(a, b schemas.Witness) schemas.Witness {
	n := min(len(a.Sums), len(b.Sums))
	out := schemas.Witness{FromSeq: a.FromSeq, ThroughSeq: b.ThroughSeq, Count: a.Count + b.Count, Sums: make([]uint64, n)}
	for i := range n {
		out.Sums[i] = (a.Sums[i] + b.Sums[i]) % Modulus
	}
	return out
}

func addSums(sums []uint64, seq uint64) {
	x := seq % Modulus
	pow := uint64(1)
	for i := range sums {
		pow = mulMod(pow, x)
		sums[i] = (sums[i] + pow) % Modulus
	}
}

func mulMod(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return bits.Rem64(hi, lo, Modulus)
}

func subMod(a, b uint64) uint64 { return (a + Modulus - b%Modulus) % Modulus }

func powMod(a, e uint64) uint64 {
	r := uint64(1)
	for ; e > 0; e >>= 1 {
		if e&1 == 1 {
			r = mulMod(r, a)
		}
		a = mulMod(a, a)
	}
	return r
}

func invMod(a uint64) uint64 { return powMod(a, Modulus-2) }

// Validate checks a witness as read from the wire (schemas.Witness.Validate).
func Validate(w schemas.Witness) error { return w.Validate() }

// Result is what a comparison found.
type Result struct {
	// Missing is how many messages the witness counts that are not stored now.
	Missing uint64
	// Seqs are the missing sequences, when they could be named (len(Seqs) == Missing).
	Seqs []uint64
	// Disagrees says the stored sequences are not a subset of what the witness saw
	// (more of them, or others): the witness cannot tell what is missing.
	Disagrees bool
}

// Compare compares the witness want with the sequences stored now in its range
// (found: the conversation's sequences in [want.FromSeq, want.ThroughSeq], each once).
func Compare(want schemas.Witness, found []uint64) Result {
	got := Of(want.FromSeq, want.ThroughSeq, found)
	if got.Count > want.Count {
		return Result{Disagrees: true}
	}
	k := want.Count - got.Count
	n := min(len(want.Sums), Sums)
	d := make([]uint64, n) // the power sums of the missing sequences
	for i := range n {
		d[i] = subMod(want.Sums[i], got.Sums[i])
	}
	if k == 0 {
		if slices.ContainsFunc(d, func(x uint64) bool { return x != 0 }) {
			return Result{Disagrees: true}
		}
		return Result{}
	}
	res := Result{Missing: k}
	if k > uint64(n) {
		return res
	}
	if k == 1 {
		if s := d[0]; s >= want.FromSeq && s <= want.ThroughSeq && !slices.Contains(found, s) && checkSums(d, []uint64{s}) {
			res.Seqs = []uint64{s}
		}
		return res
	}
	// e[j], the elementary symmetric polynomials of the missing set, by Newton's
	// identities: j·e[j] = Σ_{i=1..j} (−1)^(i−1) e[j−i] p[i].
	e := make([]uint64, k+1)
	e[0] = 1
	for j := 1; j <= int(k); j++ {
		var acc uint64
		for i := 1; i <= j; i++ {
			t := mulMod(e[j-i], d[i-1])
			if i%2 == 1 {
				acc = (acc + t) % Modulus
			} else {
				acc = subMod(acc, t)
			}
		}
		e[j] = mulMod(acc, invMod(uint64(j)))
	}
	// The missing sequences are the roots of x^k − e1 x^(k−1) + e2 x^(k−2) − …
	if want.ThroughSeq-want.FromSeq >= MaxScan {
		return res
	}
	stored := make(map[uint64]bool, len(found))
	for _, s := range found {
		stored[s] = true
	}
	var roots []uint64
	for x := want.FromSeq; x <= want.ThroughSeq && len(roots) <= int(k); x++ {
		if stored[x] {
			continue
		}
		var v uint64
		for j := 0; j <= int(k); j++ {
			v = mulMod(v, x%Modulus)
			if j%2 == 0 {
				v = (v + e[j]) % Modulus
			} else {
				v = subMod(v, e[j])
			}
		}
		if v == 0 {
			roots = append(roots, x)
		}
	}
	if uint64(len(roots)) == k && checkSums(d, roots) {
		res.Seqs = roots
	}
	return res
}

// checkSums reports whether seqs have exactly the power sums d.
func checkSums(d []uint64, seqs []uint64) bool {
	w := Of(0, 0, seqs)
	for i := range d {
		if w.Sums[i] != d[i] {
			return false
		}
	}
	return true
}

// Check compares the witness want with the conversation's sequences stored now in its
// range (found) and says whether what is missing is a hole. goneThrough is the
// sequence at or below which a message may be gone for a reason: the conversation's
// tombstone (a forget) or the stream's oldest message less one (its age limit, a
// purge of the stream); both remove a prefix, so one cut tells them. A hole has at
// least one missing message above it. why says what was found when there is no hole
// but something is not as the witness says ("" when everything is stored).
//
// Missing messages that cannot be named (more than Sums of them) make a hole when more
// are missing than there are sequences at or below goneThrough not stored: at least
// the difference was lost above it (the hole then counts at least that many, from
// goneThrough+1). Otherwise they may all be below it.
func Check(want schemas.Witness, found []uint64, goneThrough uint64) (h *schemas.Hole, why string) {
	r := Compare(want, found)
	switch {
	case r.Disagrees:
		return nil, fmt.Sprintf("the messages stored in [%d, %d] are not those the witness counted (%d): it cannot tell what is missing", want.FromSeq, want.ThroughSeq, want.Count)
	case r.Missing == 0:
		return nil, ""
	case r.Seqs == nil && want.FromSeq > goneThrough:
		return &schemas.Hole{FromSeq: want.FromSeq, ThroughSeq: want.ThroughSeq, Missing: r.Missing}, ""
	case r.Seqs == nil:
		// At most the sequences at or below the cut that are not stored can be gone for a
		// reason; more missing than that are lost above it.
		below := min(goneThrough, want.ThroughSeq) - want.FromSeq + 1
		for _, s := range found {
			if s <= goneThrough {
				below--
			}
		}
		if r.Missing > below {
			return &schemas.Hole{FromSeq: goneThrough + 1, ThroughSeq: want.ThroughSeq, Missing: r.Missing - below}, ""
		}
		return nil, fmt.Sprintf("%d messages missing in [%d, %d], not named, and as many may be at or below %d (forgotten or aged out): not told apart", r.Missing, want.FromSeq, want.ThroughSeq, goneThrough)
	}
	lost := slices.DeleteFunc(slices.Clone(r.Seqs), func(s uint64) bool { return s <= goneThrough })
	if len(lost) == 0 {
		return nil, fmt.Sprintf("%d messages gone at or below %d (forgotten or aged out)", r.Missing, goneThrough)
	}
	return &schemas.Hole{FromSeq: want.FromSeq, ThroughSeq: want.ThroughSeq, Missing: uint64(len(lost)), Seqs: lost}, ""
}

// String words a hole for a reason, a log line or compactor verify.
func String(h schemas.Hole) string {
	if len(h.Seqs) > 0 {
		parts := make([]string, len(h.Seqs))
		for i, s := range h.Seqs {
			parts[i] = fmt.Sprint(s)
		}
		noun := "message"
		if len(h.Seqs) > 1 {
			noun = "messages"
		}
		return fmt.Sprintf("%s at seq %s", noun, strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%d messages between seq %d and %d (more than %d: not named)", h.Missing, h.FromSeq, h.ThroughSeq, Sums)
}
