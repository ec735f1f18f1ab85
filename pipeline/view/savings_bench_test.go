package view_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
)

// BenchmarkSavingsPage builds the savings page over a ledger of exchanges spread over
// the last 30 days and over conversations: BENCH_SAVINGS_EXCHANGES (default 5,000) and
// BENCH_SAVINGS_CONVERSATIONS (default 100). It reports the entries read per page.
func BenchmarkSavingsPage(b *testing.B) {
	exchanges, convs := 5000, 100
	if n, err := strconv.Atoi(os.Getenv("BENCH_SAVINGS_EXCHANGES")); err == nil && n > 0 {
		exchanges = n
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_SAVINGS_CONVERSATIONS")); err == nil && n > 0 {
		convs = n
	}
	ns := jstest.Server(b)
	nc := jstest.Conn(b, ns)
	st := jstest.Provision(b, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	now := time.Now().UTC()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range exchanges {
		g.Go(func() error {
			at := now.Add(-time.Duration(i%30) * 24 * time.Hour)
			conv := fmt.Sprintf("bench-%d", i%convs)
			mode := schemas.LedgerRewrite
			if i%3 == 0 {
				mode = schemas.LedgerShadow
			}
			e := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: fmt.Sprintf("bench-exchange-%08d", i), Phase: schemas.LedgerSent, At: at,
				Conversation: conv, Mode: mode, API: "openai", Model: fmt.Sprintf("model-%d", i%5), Client: fmt.Sprintf("agent-%d", i%7),
				ClientTokens: 20000, CompactedTokens: 6000}
			if err := st.Ledger().Append(gctx, e); err != nil {
				return err
			}
			d := *e
			d.Phase, d.Status, d.Usage = schemas.LedgerDone, 200, &schemas.LedgerUsage{Input: 6100, CacheRead: 3000, Output: 200}
			return st.Ledger().Append(gctx, &d)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	cfg := tokenConfig()
	cfg.Timeout = 5 * time.Minute
	v, err := view.New(cfg, st, testSettings(b), nil, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(v.Handler())
	defer srv.Close()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/savings?days=30", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%d", resp.StatusCode)
		}
		b.ReportMetric(float64(n), "page-bytes")
	}
	b.ReportMetric(float64(2*exchanges), "entries")
}
