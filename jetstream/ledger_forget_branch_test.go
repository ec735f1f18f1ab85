package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A branch the proxy booked an exchange on but never stored a message in (a fresh
// branch whose turn the upstream refused, or whose CHAT messages aged out): forgetting
// the conversation leaves the branch's ledger entries.
func TestAForgetDeletesTheLedgerEntriesOfBranchesCHATNoLongerNames(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	branch := "c1--0123456789abcdef"
	for _, e := range []*schemas.LedgerEntry{ledgerEntry("c1", "0123456789abcdef", schemas.LedgerSent), ledgerEntry(branch, "1123456789abcdef", schemas.LedgerSent)} {
		if err := st.Ledger().Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Forget(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	var left []string
	if _, err := st.Ledger().Read(ctx, jetstream.LedgerRead{}, func(e *schemas.LedgerEntry) error { left = append(left, e.Conversation); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("after forgetting c1 the ledger still holds entries of %v", left)
	}
}
