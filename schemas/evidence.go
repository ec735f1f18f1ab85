package schemas

import "unicode/utf8"

// Evidence kinds: what an evidence item is.
const (
	EvidenceFile    = "file"    // a path the agent read or changed
	EvidenceCommand = "command" // a shell command the agent ran (compact form)
	EvidenceURL     = "url"     // an http or https URL
	EvidenceID      = "id"      // an issue or ticket id, a commit hash, an error code
	EvidenceNumber  = "number"  // a number with its unit, from a user message
)

// EvidenceKinds lists the kinds in the order a rendered section shows them.
var EvidenceKinds = []string{EvidenceFile, EvidenceCommand, EvidenceURL, EvidenceID, EvidenceNumber}

// Bounds of an Evidence value: a writer keeps within them, a reader refuses more.
const (
	// MaxEvidenceItems is the most items one Evidence holds.
	MaxEvidenceItems = 2000
	// MaxEvidenceValueBytes is the longest item value, in bytes.
	MaxEvidenceValueBytes = 512
	// MaxEvidenceBytes is the most an Evidence value's JSON encoding takes, escapes
	// included. A writer keeps within it; Validate does not check it, so that a value
	// written before the bound is trimmed by the next compaction, not refused.
	MaxEvidenceBytes = 64 << 10
)

// Evidence is what a compaction extracted deterministically from the messages it
// covered (and carried forward from earlier ones): files, commands, URLs, identifiers
// and numbers with units. It is plain data; summarizer/evidence extracts, merges and
// renders it.
type Evidence struct {
	// ThroughSeq is the newest CHAT sequence the evidence was extracted from.
	ThroughSeq uint64         `json:"through_seq"`
	Items      []EvidenceItem `json:"items"`
}

// EvidenceItem is one distinct piece of evidence.
type EvidenceItem struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
	// Count is how many times the covered messages referenced it.
	Count int `json:"count"`
	// LastSeq is the CHAT sequence of its newest reference.
	LastSeq uint64 `json:"last_seq"`
	// Changed says a file was written, edited, created, moved or removed, not only read.
	Changed bool `json:"changed,omitempty"`
}

// Validate checks an Evidence value: known kinds, non-empty values within
// MaxEvidenceValueBytes of valid UTF-8, positive counts, at most MaxEvidenceItems items,
// no item twice.
func (e *Evidence) Validate() error {
	if len(e.Items) > MaxEvidenceItems {
		return invalid("evidence.items", "at most %d items, got %d", MaxEvidenceItems, len(e.Items))
	}
	type key struct{ kind, value string }
	seen := make(map[key]bool, len(e.Items))
	for i, it := range e.Items {
		switch {
		case !knownEvidenceKind(it.Kind):
			return invalid("evidence.items", "item %d: unknown kind %q; must be file, command, url, id or number", i, it.Kind)
		case it.Value == "":
			return invalid("evidence.items", "item %d: value must not be empty", i)
		case len(it.Value) > MaxEvidenceValueBytes:
			return invalid("evidence.items", "item %d: value is %d bytes, over %d", i, len(it.Value), MaxEvidenceValueBytes)
		case !utf8.ValidString(it.Value):
			return invalid("evidence.items", "item %d: value must be valid UTF-8", i)
		case it.Count < 1:
			return invalid("evidence.items", "item %d: count must be at least 1, got %d", i, it.Count)
		case it.LastSeq > e.ThroughSeq:
			return invalid("evidence.items", "item %d: last_seq %d is past through_seq %d", i, it.LastSeq, e.ThroughSeq)
		case it.Changed && it.Kind != EvidenceFile:
			return invalid("evidence.items", "item %d: only a file can be changed", i)
		}
		k := key{it.Kind, it.Value}
		if seen[k] {
			return invalid("evidence.items", "item %d: %s %q is listed twice", i, it.Kind, it.Value)
		}
		seen[k] = true
	}
	return nil
}

func knownEvidenceKind(k string) bool {
	for _, v := range EvidenceKinds {
		if v == k {
			return true
		}
	}
	return false
}
