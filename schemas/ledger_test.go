package schemas_test

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

func validEntry() schemas.LedgerEntry {
	return schemas.LedgerEntry{V: schemas.LedgerVersion, ID: "0123456789abcdef", Phase: schemas.LedgerSent, At: time.Now(),
		Conversation: "c1", Mode: schemas.LedgerShadow, API: "openai", Model: "gpt-4.1", Client: "claude-cli",
		ClientTokens: 100, ClientPrefixTokens: 90, CompactedTokens: 40, CompactedPrefixTokens: 40}
}

// A ledger entry is read from a subject anyone with the right may write: every field
// is checked, and a name that could rewrite a terminal or a table is refused.
func TestLedgerEntryValidate(t *testing.T) {
	if e := validEntry(); e.Validate() != nil {
		t.Fatalf("a valid entry: %v", e.Validate())
	}
	for name, change := range map[string]func(*schemas.LedgerEntry){
		"another version":           func(e *schemas.LedgerEntry) { e.V = 2 },
		"a short id":                func(e *schemas.LedgerEntry) { e.ID = "abc" },
		"an id with a dot":          func(e *schemas.LedgerEntry) { e.ID = "0123456789abcdef.x" },
		"an unknown phase":          func(e *schemas.LedgerEntry) { e.Phase = "half" },
		"an unknown mode":           func(e *schemas.LedgerEntry) { e.Mode = "both" },
		"no time":                   func(e *schemas.LedgerEntry) { e.At = time.Time{} },
		"a bad conversation":        func(e *schemas.LedgerEntry) { e.Conversation = "a.b" },
		"an escape in the model":    func(e *schemas.LedgerEntry) { e.Model = "gpt\x1b[2Jx" },
		"a newline in the client":   func(e *schemas.LedgerEntry) { e.Client = "a\nTOTAL 1" },
		"a bidi override":           func(e *schemas.LedgerEntry) { e.Model = "gpt\u202e4" },
		"a long model":              func(e *schemas.LedgerEntry) { e.Model = strings.Repeat("m", schemas.MaxLedgerName+1) },
		"negative tokens":           func(e *schemas.LedgerEntry) { e.ClientTokens = -1 },
		"a prefix over its request": func(e *schemas.LedgerEntry) { e.CompactedPrefixTokens = 41 },
		"tokens past the bound":     func(e *schemas.LedgerEntry) { e.ClientTokens = schemas.MaxLedgerTokens + 1 },
		"cache figures over input": func(e *schemas.LedgerEntry) {
			e.Usage = &schemas.LedgerUsage{Input: 10, CacheRead: 8, CacheWrite: 3}
		},
		"a status past HTTP's": func(e *schemas.LedgerEntry) { e.Status = 1000 },
	} {
		e := validEntry()
		change(&e)
		if e.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDecodeLedgerEntryBoundsItsInput(t *testing.T) {
	if _, err := schemas.DecodeLedgerEntry([]byte(`{"v":1,"pad":"` + strings.Repeat("x", schemas.MaxLedgerEntryBytes) + `"}`)); err == nil {
		t.Error("an entry over the bound was decoded")
	}
	if _, err := schemas.DecodeLedgerEntry([]byte(`not json`)); err == nil {
		t.Error("junk was decoded")
	}
}
