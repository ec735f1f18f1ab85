package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

func ledgerEntry(conv, id, phase string) *schemas.LedgerEntry {
	e := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: id, Phase: phase, At: time.Now().UTC(), Conversation: conv,
		Mode: schemas.LedgerRewrite, API: "openai", Model: "m", Client: "claude-cli"}
	if phase == schemas.LedgerSent {
		e.ClientTokens, e.CompactedTokens = 9000, 3000
	} else {
		e.Status, e.Usage = 200, &schemas.LedgerUsage{Input: 3100, CacheRead: 2000, Output: 50}
	}
	return e
}

// The ledger keeps what the proxy appends, once per phase of an exchange however
// often it is appended (a retry after a lost ack); a read returns a conversation's
// entries, leaves out entries that do not validate or are booked to another
// conversation than their subject's, and a forget takes them.
func TestLedgerAppendsOnceReadsValidAndIsForgotten(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := st.Ledger()
	for _, e := range []*schemas.LedgerEntry{
		ledgerEntry("c1", "0123456789abcdef", schemas.LedgerSent),
		ledgerEntry("c1", "0123456789abcdef", schemas.LedgerSent), // the same again: stored once
		ledgerEntry("c1", "0123456789abcdef", schemas.LedgerDone),
		ledgerEntry("c2", "fedcba9876543210", schemas.LedgerSent),
	} {
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	bad := ledgerEntry("c1", "0123456789abcdee", schemas.LedgerSent)
	bad.ClientPrefixTokens = bad.ClientTokens + 1
	if err := l.Append(ctx, bad); err == nil {
		t.Fatal("an entry whose prefix is longer than its request was appended")
	}
	// Hostile writers, straight to the subjects: junk, and c2's exchange booked on c1.
	for _, raw := range []string{`not json`, `{"v":1}`} {
		if _, err := nc.Request("ledger.c1", []byte(raw), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Request("ledger.c1", []byte(`{"v":1,"id":"aaaaaaaaaaaaaaaa","phase":"sent","at":"2026-01-01T00:00:00Z","conversation":"c2","mode":"rewrite","api":"openai"}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var got []*schemas.LedgerEntry
	stats, err := l.Read(ctx, jetstream.LedgerRead{Conversation: "c1"}, func(e *schemas.LedgerEntry) error { got = append(got, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Phase != schemas.LedgerSent || got[1].Phase != schemas.LedgerDone || stats.Invalid != 3 {
		t.Fatalf("read c1: %d entries, stats %+v; want its sent and done, 3 invalid left out", len(got), stats)
	}
	out, err := st.Forget(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if out.Deleted.LedgerEntries != 5 {
		t.Errorf("forget deleted %d ledger entries; want c1's 5 (2 valid, 3 invalid)", out.Deleted.LedgerEntries)
	}
	got = nil
	if _, err := l.Read(ctx, jetstream.LedgerRead{}, func(e *schemas.LedgerEntry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Conversation != "c2" {
		t.Fatalf("after the forget the ledger holds %d entries; want c2's one", len(got))
	}
}

// status lists the savings ledger beside the other streams: its entries once the proxy
// books some, and a note, not an error, when it is not there (it is optional: a
// deployment whose provisioner may not create it runs without savings).
func TestStatusListsTheLedger(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Ledger().Append(ctx, ledgerEntry("c1", "0123456789abcdef", schemas.LedgerSent)); err != nil {
		t.Fatal(err)
	}
	ledger := func() jetstream.StreamStatus {
		t.Helper()
		for _, s := range st.Status(ctx).Streams {
			if s.Name == "LEDGER" {
				return s
			}
		}
		t.Fatal("status does not list LEDGER")
		return jetstream.StreamStatus{}
	}
	if s := ledger(); s.Messages != 1 || s.Subjects != 1 || s.Error != "" || s.Note != "" {
		t.Fatalf("LEDGER with one entry: %+v", s)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "LEDGER"); err != nil {
		t.Fatal(err)
	}
	if s := ledger(); s.Error != "" || !strings.Contains(s.Note, "optional") {
		t.Fatalf("LEDGER not there: %+v; want a note that it is optional, no error", s)
	}
}
