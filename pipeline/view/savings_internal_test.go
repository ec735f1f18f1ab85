package view

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas/policy"
)

type defaults struct{}

func (defaults) Settings(context.Context, string) (policy.Settings, error) {
	return policy.Settings{}, nil
}

// One savings page is built at a time (it holds up to MaxLedgerEntries entries): while
// one is, another waits QueueWait, then is answered 503; the conversation pages are not
// held up.
func TestOneSavingsPageAtATime(t *testing.T) {
	st := jstest.Provision(t, jstest.Conn(t, jstest.Server(t)))
	cfg := DefaultConfig()
	// The reader reports nothing: this test is of the slot, not of the figures.
	empty := func(context.Context, SavingsQuery) (*SavingsReports, error) { return &SavingsReports{}, nil }
	cfg.Token, cfg.QueueWait, cfg.Savings = "test-token-0123456789abcdef", 50*time.Millisecond, empty
	v, err := New(cfg, st, defaults{}, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
		rec := httptest.NewRecorder()
		v.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	if code := get("/api/savings"); code != http.StatusOK {
		t.Fatalf("a savings page alone: %d", code)
	}
	v.savingsSlot <- struct{}{} // a page being built
	if code := get("/api/savings"); code != http.StatusServiceUnavailable {
		t.Errorf("a second savings page: %d; want 503", code)
	}
	if code := get("/api/conversations"); code != http.StatusOK {
		t.Errorf("the list while a savings page is built: %d", code)
	}
	<-v.savingsSlot
	if code := get("/api/savings"); code != http.StatusOK {
		t.Errorf("a savings page once the other is done: %d", code)
	}

	ts, err := NewTenants("operator-token-0123456789", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ts.SetSavings(empty)
	ts.savingsSlot <- struct{}{}
	req := httptest.NewRequest(http.MethodGet, "/api/savings", nil)
	req.Header.Set("Authorization", "Bearer operator-token-0123456789")
	rec := httptest.NewRecorder()
	ts.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a second operator's savings page: %d, Retry-After %q; want 503 with it", rec.Code, rec.Header().Get("Retry-After"))
	}
}
