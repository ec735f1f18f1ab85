package savings_test

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A conversation compacted 8 times in the period, whose completed events aged out of
// COMPACT_EVENTS (7 days) while the results bucket keeps its last 5 values: the report
// counted 5 compactions and 0 unknown, and 3 generations' summarizer tokens vanished
// unmarked; they are counted as unknown now.
func TestGenerationsPastTheEventsAgeAreCountedUnknown(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now().UTC()
	s := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: "x-0000000000000001", Phase: schemas.LedgerSent, At: now,
		Conversation: "c", Mode: schemas.LedgerRewrite, API: "openai", Model: "m", ClientTokens: 9000, CompactedTokens: 3000}
	if err := st.Ledger().Append(ctx, s); err != nil {
		t.Fatal(err)
	}
	var rev uint64
	for g := uint64(1); g <= 8; g++ {
		r := &schemas.Result{SchemaVersion: 1, Conversation: "c", Generation: g, Summary: "s", TailStartSeq: 1, FirstSeq: 1,
			CreatedAt: now, Usage: &schemas.Usage{PromptTokens: 1000, CompletionTokens: 100}}
		var err error
		if rev, err = st.Results().Put(ctx, r, rev); err != nil {
			t.Fatal(err)
		}
	}
	td, err := savings.Read(ctx, st, "", "", savings.Period{Since: now.Add(-30 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rep := savings.Aggregate([]savings.TenantData{td}, nil, nil, savings.Period{Since: now.Add(-30 * 24 * time.Hour)})
	sm := rep.Total.Summarizer
	if sm.Compactions != 8 || sm.Unknown != 3 || sm.Input != 5000 {
		t.Errorf("8 generations in the period; the report counts %d compactions, %d unknown, %d input tokens", sm.Compactions, sm.Unknown, sm.Input)
	}
}
