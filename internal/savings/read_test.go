package savings_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// BenchmarkRead reads a ledger of 200 conversations, each with one settled exchange
// and a compaction value of generation 3 (so its events are read too; over all time,
// generations 1 and 2, which no event names, are counted unknown) into an Aggregator:
// the cost of a report per conversation.
func BenchmarkRead(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const convs = 200
	now := time.Now().UTC()
	for i := range convs {
		conv := fmt.Sprintf("bench-%d", i)
		s := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: fmt.Sprintf("x-%016d", i), Phase: schemas.LedgerSent, At: now,
			Conversation: conv, Mode: schemas.LedgerRewrite, API: "openai", Model: "m", ClientTokens: 9000, CompactedTokens: 3000}
		d := *s
		d.Phase, d.Status, d.Usage = schemas.LedgerDone, 200, &schemas.LedgerUsage{Input: 3100, Output: 10}
		for _, e := range []*schemas.LedgerEntry{s, &d} {
			if err := st.Ledger().Append(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
		r := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 3, Summary: "s", TailStartSeq: 1, FirstSeq: 1,
			CreatedAt: now, Usage: &schemas.Usage{PromptTokens: 100, CompletionTokens: 10}}
		if _, err := st.Results().Put(ctx, r, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		a := savings.NewAggregator(nil, savings.Period{})
		stats, err := a.Read(ctx, st, "", "", 0)
		if n := a.Reports()[0].Total.Summarizer.Compactions; err != nil || stats.Read != 2*convs || n != 3*convs {
			b.Fatalf("read %d entries, %d compactions: %v", stats.Read, n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/convs, "µs/conversation")
}
