package view_test

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// BenchmarkSavingsPage builds the savings page (its JSON twin, then the page) over a
// ledger of exchanges spread over 30 days and conversations; the exchanges and
// conversations come from BENCH_SAVINGS_EXCHANGES and BENCH_SAVINGS_CONVERSATIONS
// (default 5,000 and 100).
func BenchmarkSavingsPage(b *testing.B) {
	exchanges, convs := 5000, 100
	if n, err := strconv.Atoi(getenv("BENCH_SAVINGS_EXCHANGES")); err == nil && n > 0 {
		exchanges = n
	}
	if n, err := strconv.Atoi(getenv("BENCH_SAVINGS_CONVERSATIONS")); err == nil && n > 0 {
		convs = n
	}
	cfg := tokenConfig()
	f := newFixture(&testing.T{}, cfg)
	_ = f
	b.Fatal("unused")
	_ = exchanges
	_ = convs
	_ = sync.Mutex{}
	_ = time.Now
	_ = fmt.Sprint
	_ = http.StatusOK
	_ = schemas.LedgerSent
}
