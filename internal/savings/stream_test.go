package savings

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// provisionTenant provisions tenant's streams and buckets on nc.
func provisionTenant(tb testing.TB, nc *nats.Conn, tenant string) *jetstream.Store {
	tb.Helper()
	cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := jetstream.Provision(ctx, nc, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// streamLedger appends to st n exchanges over 20 conversations, first `stuck` sent
// entries never settled, then the n others with at most `window` of them open at once
// (each settled once `window` newer ones are sent), and a compaction of each
// conversation.
func streamLedger(tb testing.TB, st *jetstream.Store, n, window, stuck int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	now := time.Now().UTC().Add(-time.Hour)
	mk := func(i int) *schemas.LedgerEntry {
		mode := schemas.LedgerRewrite
		if i%3 == 0 {
			mode = schemas.LedgerShadow
		}
		return &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: fmt.Sprintf("x-%016d", i), Phase: schemas.LedgerSent,
			At: now.Add(time.Duration(i) * time.Millisecond), Conversation: fmt.Sprintf("c%d", i%20), Mode: mode, API: "openai",
			Model: []string{"gpt-test", "claude-test-1"}[i%2], Client: "codex", ClientTokens: 9000, ClientPrefixTokens: 4000,
			CompactedTokens: 3000, CompactedPrefixTokens: 1000, Swap: i%17 == 0}
	}
	put := func(e *schemas.LedgerEntry) {
		if err := st.Ledger().Append(ctx, e); err != nil {
			tb.Fatal(err)
		}
	}
	settle := func(s *schemas.LedgerEntry) {
		d := *s
		d.Phase, d.At, d.Status, d.Usage = schemas.LedgerDone, s.At.Add(time.Second), 200, &schemas.LedgerUsage{Input: 3100, CacheRead: 900, Output: 40}
		put(&d)
	}
	for i := range stuck {
		put(mk(n + i))
	}
	var open []*schemas.LedgerEntry
	for i := range n {
		s := mk(i)
		put(s)
		open = append(open, s)
		if len(open) == window {
			settle(open[0])
			open = open[1:]
		}
	}
	for _, s := range open {
		settle(s)
	}
	for c := range 20 {
		r := &schemas.Result{SchemaVersion: 1, Conversation: fmt.Sprintf("c%d", c), Generation: 1, Summary: "s", TailStartSeq: 1,
			FirstSeq: 1, CreatedAt: now.Add(time.Duration(c) * time.Millisecond), Model: "sum-mini",
			Usage: &schemas.Usage{PromptTokens: 100, CompletionTokens: 10}}
		if _, err := st.Results().Put(ctx, r, 0); err != nil {
			tb.Fatal(err)
		}
	}
}

// A report read through an Aggregator holds the exchanges awaiting their done entry,
// not the ledger: over ledgers of 300 and 1200 settled exchanges with at most 5 open at
// once, and 3 never settled, at most 8 were held at any time; and its figures are those
// of the whole ledger read into memory and joined there.
func TestAggregatorReadHoldsTheOpenExchanges(t *testing.T) {
	prices := mustPrices(t)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	for _, n := range []int{300, 1200} {
		st := provisionTenant(t, nc, fmt.Sprintf("t%d", n))
		streamLedger(t, st, n, 5, 3)
		a := NewAggregator(prices, Period{}, nil, []string{ByConversation, ByMode})
		stats, err := a.Read(t.Context(), st, "t", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Read != 2*n+3 || a.peakPending != 8 {
			t.Errorf("%d exchanges: read %d entries, held %d exchanges at most; want %d, 8", n, stats.Read, a.peakPending, 2*n+3)
		}
		td, err := Read(t.Context(), st, "t", "", Period{})
		if err != nil {
			t.Fatal(err)
		}
		reps := a.Reports()
		for i, by := range [][]string{nil, {ByConversation, ByMode}} {
			want := oracleAggregate([]TenantData{td}, prices, by, Period{})
			if d := sameReport(reps[i], want); d != "" {
				t.Errorf("%d exchanges, by %v: %s", n, by, d)
			}
		}
		if tot := reps[0].Total; tot.Exchanges != int64(n+3) || tot.Unsettled != 3 || tot.Summarizer.Compactions != 20 {
			t.Errorf("%d exchanges: report of %d exchanges, %d unsettled, %d compactions; want %d, 3, 20", n, tot.Exchanges, tot.Unsettled, tot.Summarizer.Compactions, n+3)
		}
	}
}

// BenchmarkAggregateMemory aggregates ledgers of 10,000 and 40,000 exchanges (at
// most 5 open at once), made as they are fed and dropped after, and reports the most
// heap live during it (sampled every 1,000 entries, after a collection), in bytes: with
// the entries held, then aggregated (the in-memory join this package made), and summed
// as they come (an Aggregator). Run with -benchtime=1x. (Through an in-process NATS
// server the server's own caches share the heap and hide the difference.)
func BenchmarkAggregateMemory(b *testing.B) {
	for _, n := range []int{10000, 40000} {
		for _, path := range []string{"held", "streamed"} {
			b.Run(fmt.Sprintf("exchanges=%d/%s", n, path), func(b *testing.B) {
				var peak uint64
				for b.Loop() {
					var ms runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&ms)
					base := ms.HeapAlloc
					a := NewAggregator(nil, Period{}, nil, []string{ByConversation, ByMode})
					f := a.Tenant("t")
					var held []*schemas.LedgerEntry
					fed := 0
					feed := func(e *schemas.LedgerEntry) {
						if path == "held" {
							held = append(held, e)
						} else {
							f.Entry(e)
						}
						if fed++; fed%1000 == 0 {
							runtime.GC()
							runtime.ReadMemStats(&ms)
							peak = max(peak, ms.HeapAlloc-min(base, ms.HeapAlloc))
						}
					}
					now := time.Now().UTC()
					var open []*schemas.LedgerEntry
					for i := range n {
						s := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: fmt.Sprintf("x-%016d", i), Phase: schemas.LedgerSent,
							At: now.Add(time.Duration(i) * time.Millisecond), Conversation: fmt.Sprintf("c%d", i%20),
							Mode: schemas.LedgerRewrite, API: "openai", Model: "gpt-test", Client: "codex", ClientTokens: 9000, CompactedTokens: 3000}
						feed(s)
						if open = append(open, s); len(open) == 5 {
							d := *open[0]
							d.Phase, d.Status, d.Usage = schemas.LedgerDone, 200, &schemas.LedgerUsage{Input: 3100, Output: 40}
							feed(&d)
							open = open[1:]
						}
					}
					if path == "held" {
						Aggregate([]TenantData{{Tenant: "t", Entries: held}}, nil, []string{ByConversation, ByMode}, Period{})
					} else {
						f.Close(0, false)
						a.Reports()
					}
					runtime.KeepAlive(held)
				}
				b.ReportMetric(float64(peak), "peak-live-B")
			})
		}
	}
}

// A conversation whose model changes on every exchange keeps MaxChangePoints of its
// changes: its first and its latest. A compaction among the latest is booked as the
// whole ledger's join books it; one before every exchange to the first exchange's
// model; one among the changes no longer kept to the first's too (the in-memory join
// booked it to the exchange just before it).
func TestChangePointsAreBounded(t *testing.T) {
	base := at("2026-03-01T00:00:00Z")
	var es []*schemas.LedgerEntry
	const n = 3 * MaxChangePoints
	for i := range n {
		s := sent(fmt.Sprintf("x%05d-aaaaaaaaaaaaaaaa", i), "c1", schemas.LedgerRewrite, fmt.Sprintf("m%d", i%2), "codex",
			base.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), 100, 0, 50, 0, false)
		es = append(es, s, done(s, base.Add(time.Duration(i)*time.Minute+time.Second).Format(time.RFC3339), 200, &schemas.LedgerUsage{Input: 50}))
	}
	compaction := func(minute int) Compaction {
		return Compaction{Conversation: "c1", Generation: uint64(minute + 2), At: base.Add(time.Duration(minute)*time.Minute + 30*time.Second)}
	}
	for _, tt := range []struct {
		name   string
		minute int
		want   string
	}{
		{"among the latest", n - 4, "m0"},
		{"among the latest", n - 3, "m1"},
		{"before every exchange", -2, "m0"},
		{"among the changes no longer kept", 11, "m0"},
	} {
		data := []TenantData{{Entries: es, Compactions: []Compaction{compaction(tt.minute)}}}
		rep := Aggregate(data, nil, []string{ByModel}, Period{})
		var got []string
		for _, r := range rep.Rows {
			if r.Summarizer.Compactions > 0 {
				got = append(got, r.Model)
			}
		}
		if len(got) != 1 || got[0] != tt.want {
			t.Errorf("a compaction %s (after minute %d): booked to %v; want %s", tt.name, tt.minute, got, tt.want)
		}
		if tt.name == "among the latest" || tt.name == "before every exchange" {
			if d := sameReport(rep, oracleAggregate(data, nil, []string{ByModel}, Period{})); d != "" {
				t.Errorf("a compaction %s: %s", tt.name, d)
			}
		}
	}
}

// What joining as the entries come changes at the edges, as the Aggregator's doc says:
// a done entry written again once its exchange is settled is dropped; a sent entry
// written again after its done entry opens an unsettled exchange; a done entry before
// its sent entry is dropped, the exchange unsettled.
func TestAggregatorEdges(t *testing.T) {
	s := sent("e1-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-01T10:00:00Z", 100, 0, 50, 0, false)
	d := done(s, "2026-03-01T10:00:05Z", 200, &schemas.LedgerUsage{Input: 50})
	for _, tt := range []struct {
		name                          string
		entries                       []*schemas.LedgerEntry
		exchanges, unsettled, dropped int64
	}{
		{"settled", []*schemas.LedgerEntry{s, d}, 1, 0, 0},
		{"sent twice while open", []*schemas.LedgerEntry{s, s, d}, 1, 0, 0},
		{"done again once settled", []*schemas.LedgerEntry{s, d, d}, 1, 0, 1},
		{"sent again once settled", []*schemas.LedgerEntry{s, d, s}, 2, 1, 0},
		{"done before sent", []*schemas.LedgerEntry{d, s}, 1, 1, 1},
	} {
		rep := Aggregate([]TenantData{{Entries: tt.entries}}, nil, nil, Period{})
		if rep.Total.Exchanges != tt.exchanges || rep.Total.Unsettled != tt.unsettled || int64(rep.Dropped) != tt.dropped {
			t.Errorf("%s: %d exchanges, %d unsettled, %d dropped; want %d, %d, %d", tt.name,
				rep.Total.Exchanges, rep.Total.Unsettled, rep.Dropped, tt.exchanges, tt.unsettled, tt.dropped)
		}
	}
}
