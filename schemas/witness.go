package schemas

// WitnessModulus is the prime a Witness's power sums are taken modulo: the largest
// below 2^53, so every sum is an exact JSON number in every language.
const WitnessModulus = 1<<53 - 111

// Witness is what a reader of CHAT saw of one conversation between two stream
// sequences: how many of its messages were stored in [FromSeq, ThroughSeq] and the
// power sums of their sequences (Σ seq^i mod 2^53−111, i = 1…len(Sums)). It needs no
// field on the messages, so it covers every producer and every client version, and it
// does not depend on their order: interleaved producers give the same witness. A reader
// that later finds fewer messages there knows how many are missing and, up to
// len(Sums) of them, which (schemas/holes).
type Witness struct {
	FromSeq    uint64   `json:"from_seq"`
	ThroughSeq uint64   `json:"through_seq"`
	Count      uint64   `json:"count"`
	Sums       []uint64 `json:"sums"`
}

// Hole is a place in a conversation's raw history where messages a reader saw (or a
// compaction read) are no longer stored, and were neither forgotten nor aged out:
// Missing messages in [FromSeq, ThroughSeq], at Seqs when they could be named.
type Hole struct {
	FromSeq    uint64   `json:"from_seq"`
	ThroughSeq uint64   `json:"through_seq"`
	Missing    uint64   `json:"missing"`
	Seqs       []uint64 `json:"seqs,omitempty"`
}

// Validate checks a witness as read from the wire: a range, a count that fits it and
// sums under the modulus. Its count is a hint to check against, never a bound on work.
func (w *Witness) Validate() error {
	switch {
	case w.FromSeq == 0 || w.ThroughSeq < w.FromSeq:
		return invalid("witness", "from_seq %d, through_seq %d: want 1 <= from_seq <= through_seq", w.FromSeq, w.ThroughSeq)
	case w.Count == 0 || w.Count > w.ThroughSeq-w.FromSeq+1:
		return invalid("witness", "count %d does not fit [%d, %d]", w.Count, w.FromSeq, w.ThroughSeq)
	case len(w.Sums) == 0 || len(w.Sums) > 16:
		return invalid("witness", "%d sums, want 1 to 16", len(w.Sums))
	}
	for i, s := range w.Sums {
		if s >= WitnessModulus {
			return invalid("witness", "sums[%d] = %d, not under %d", i, s, uint64(WitnessModulus))
		}
	}
	return nil
}
