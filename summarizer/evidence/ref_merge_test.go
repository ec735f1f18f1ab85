// Code copied from merge.go as it was before the one-pass scanner, every
// package-level name prefixed with ref: the trusted reference the differential tests
// and fuzz targets compare the fast paths with. Do not edit but to fix it.

package evidence

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// MaxPerKind bounds how many items of each kind an Evidence value keeps; the least
// valuable (see Rank) are dropped first. Together they stay within
// schemas.MaxEvidenceItems. They are wide: MaxEncodedBytes is what binds first, so that
// a long conversation is not cut to a fixed number of commands while its section has
// room for more.
var refMaxPerKind = map[string]int{
	schemas.EvidenceFile:    700,
	schemas.EvidenceCommand: 700,
	schemas.EvidenceURL:     200,
	schemas.EvidenceID:      200,
	schemas.EvidenceNumber:  200,
}

// MaxEncodedBytes bounds an Evidence value Merge returns, as stored: its JSON encoding,
// escapes included (a value of control characters or quotes takes up to six bytes a
// byte). The least valuable items leave first.
const refMaxEncodedBytes = schemas.MaxEvidenceBytes

// Merge adds the evidence of entries (newly covered messages, through sequence
// through) to prev (the previous compaction's; nil for none) and returns the new value:
// counts add up, the newest sequence and "changed" carry over, and the value is cut to
// MaxPerKind items of each kind and MaxEncodedBytes of JSON, least valuable first.
// Secrets in prev's items (stored before they were redacted) are redacted. prev is not modified. A prev that does not pass
// Validate is not built on: the caller reports it and passes nil.
func refMerge(prev *schemas.Evidence, entries []schemas.Entry, through uint64) *schemas.Evidence {
	c := refNewCollector()
	if prev != nil {

		for _, it := range prev.Items {
			it.Value = refRedact(it.Value)
			c.merge(it)
		}
		through = max(through, prev.ThroughSeq)
	}
	for _, it := range refExtract(entries) {
		c.merge(it)
	}
	items := c.list()
	for i := range items {
		through = max(through, items[i].LastSeq)
	}
	return &schemas.Evidence{ThroughSeq: through, Items: refBound(items, through)}
}

// merge adds it to the collected items: to the item of the same kind and value when
// there is one (counts add up, the newest sequence and "changed" carry over).
func (c *refCollector) merge(it schemas.EvidenceItem) {
	k := refItemKey{it.Kind, it.Value}
	if old := c.items[k]; old != nil {
		old.Count += it.Count
		old.LastSeq = max(old.LastSeq, it.LastSeq)
		old.Changed = old.Changed || it.Changed
		return
	}
	c.items[k] = &it
}

// bound keeps at most MaxPerKind items of each kind and MaxEncodedBytes of encoding
// (through through), the most valuable by Rank, and returns them in canonical order.
func refBound(items []schemas.EvidenceItem, through uint64) []schemas.EvidenceItem {
	ranked := slices.Clone(items)
	slices.SortFunc(ranked, refRank)
	kept := make(map[string]int, len(refMaxPerKind))
	out := ranked[:0]
	size := refEncodedSize(&schemas.Evidence{ThroughSeq: through, Items: []schemas.EvidenceItem{}})
	for _, it := range ranked {
		n := refEncodedSize(&it) + 1
		if kept[it.Kind] >= refMaxPerKind[it.Kind] || len(out) >= schemas.MaxEvidenceItems || size+n > refMaxEncodedBytes {
			continue
		}
		kept[it.Kind]++
		size += n
		out = append(out, it)
	}
	slices.SortFunc(out, refCanonical)
	return out
}

// encodedSize is the length of v's JSON encoding.
func refEncodedSize(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return math.MaxInt / 2
	}
	return len(b)
}

// frequent is how many references make an item "most referenced".
const refFrequent = 3

// tier orders items by value: changed files first, then items referenced at least
// `frequent` times, then the rest.
func refTier(it schemas.EvidenceItem) int {
	switch {
	case it.Changed:
		return 0
	case it.Count >= refFrequent:
		return 1
	}
	return 2
}

// Rank orders items most valuable first: changed files, then the most referenced
// (three times or more), then the rest; within each, newest first (highest LastSeq),
// then more references, then kind and value, so the order is total and the same on
// every run.
func refRank(a, b schemas.EvidenceItem) int {
	return cmp.Or(
		cmp.Compare(refTier(a), refTier(b)),
		cmp.Compare(b.LastSeq, a.LastSeq),
		cmp.Compare(b.Count, a.Count),
		refCanonical(a, b),
	)
}

// canonical orders items by kind (in schemas.EvidenceKinds order), then value.
func refCanonical(a, b schemas.EvidenceItem) int {
	return cmp.Or(cmp.Compare(refKindOrder(a.Kind), refKindOrder(b.Kind)), strings.Compare(a.Value, b.Value))
}

func refKindOrder(k string) int {
	if i := slices.Index(schemas.EvidenceKinds, k); i >= 0 {
		return i
	}
	return len(schemas.EvidenceKinds)
}
