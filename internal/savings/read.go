package savings

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Grace widens a read of the ledger on both sides of its period: an exchange's done
// entry is written after its sent entry, by up to a reply's time, so one whose sent
// entry is in the period is settled by a done entry read past its end, and a done entry
// in the period is matched with a sent entry from before its start (and then left out
// with it) rather than counted as dropped.
const Grace = time.Hour

// Read reads into a what a report of tenant needs of one store (a tenant's, or a
// deployment's own), one entry at a time: the ledger's entries of the aggregator's
// period (widened by Grace), of conversation conv only when it is set, then the
// compactions of every conversation those entries name: each generation of the results
// bucket's kept revisions, and each completed event in the period whose generation is
// no longer kept (Compaction.Lost). It reads at most limit ledger entries (0:
// jetstream.MaxLedgerRead): past it, the report's Truncated names the tenant. A read
// that fails adds nothing of the tenant to the reports.
func (a *Aggregator) Read(ctx context.Context, st *jetstream.Store, tenant, conv string, limit int) (jetstream.LedgerStats, error) {
	f := a.Tenant(tenant)
	stats, err := read(ctx, st, conv, a.period, limit, f.Entry, f.Compaction)
	if err != nil {
		return stats, err
	}
	f.Close(stats.Invalid, stats.More)
	return stats, nil
}

// Read is what Aggregator.Read reads, held whole in a TenantData: every entry of the
// period is kept in memory, so it is for tests and small ledgers; a report reads with
// an Aggregator.
func Read(ctx context.Context, st *jetstream.Store, tenant, conv string, p Period) (TenantData, error) {
	td := TenantData{Tenant: tenant}
	stats, err := read(ctx, st, conv, p, 0, func(e *schemas.LedgerEntry) { td.Entries = append(td.Entries, e) },
		func(c Compaction) { td.Compactions = append(td.Compactions, c) })
	td.Invalid, td.More = stats.Invalid, stats.More
	return td, err
}

// read calls entry with each ledger entry Aggregator.Read reads, in the ledger's
// order, then compaction with each compaction of the conversations they name.
func read(ctx context.Context, st *jetstream.Store, conv string, p Period, limit int, entry func(*schemas.LedgerEntry), compaction func(Compaction)) (jetstream.LedgerStats, error) {
	r := jetstream.LedgerRead{Conversation: conv, Limit: limit}
	if !p.Since.IsZero() {
		r.Since = p.Since.Add(-Grace)
	}
	if !p.Until.IsZero() {
		r.Until = p.Until.Add(Grace)
	}
	convs := map[string]bool{}
	stats, err := st.Ledger().Read(ctx, r, func(e *schemas.LedgerEntry) error {
		entry(e)
		convs[e.Conversation] = true
		return nil
	})
	if err != nil {
		return stats, err
	}
	names := make([]string, 0, len(convs))
	for c := range convs {
		names = append(names, c)
	}
	slices.Sort(names)
	for _, c := range names {
		cs, err := readCompactions(ctx, st, c, p)
		if err != nil {
			return stats, err
		}
		for _, cp := range cs {
			compaction(cp)
		}
	}
	return stats, nil
}

// readCompactions returns conv's generations written in p: those whose value is kept,
// with the summarizer's usage, and those only a completed event still names.
func readCompactions(ctx context.Context, st *jetstream.Store, conv string, p Period) ([]Compaction, error) {
	revs, _, err := st.Results().History(ctx, conv)
	if err != nil {
		return nil, err
	}
	var out []Compaction
	kept := map[uint64]bool{}
	// The events are read only when a generation of the period may be missing from the
	// kept revisions: none is when the oldest kept value is the first generation, or
	// was written before the period.
	var oldest *jetstream.Revision
	for i := range revs {
		if revs[i].Value != nil {
			oldest = &revs[i]
			break
		}
	}
	if oldest == nil {
		// No value kept: never compacted (a forget deletes the events with it).
		return nil, nil
	}
	complete := oldest.Value.Generation <= 1 || (!p.Since.IsZero() && oldest.Time.Before(p.Since))
	for _, rev := range revs {
		v := rev.Value
		if v == nil || kept[v.Generation] || v.Generation == 0 {
			continue
		}
		kept[v.Generation] = true
		at := writtenAt(rev)
		if !p.holds(at) {
			continue
		}
		out = append(out, Compaction{Conversation: conv, Generation: v.Generation, At: at, Model: v.Model, Usage: v.Usage})
	}
	if complete {
		return out, nil
	}
	evs, _, err := st.Events().History(ctx, conv, p.Since, jetstream.MaxEvents)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		if ev.Type != schemas.EventCompleted || kept[ev.Generation] || ev.Generation == 0 || !p.holds(ev.At) {
			continue
		}
		kept[ev.Generation] = true
		out = append(out, Compaction{Conversation: conv, Generation: ev.Generation, At: ev.At, Lost: true})
	}
	// Generations are numbered one after another: those below the oldest kept value
	// that no event names either were written before it. When the period reaches
	// further back than the events stream keeps events (EventsMaxAge, a week), they may
	// be in the period: they are counted as unknown, at the oldest kept value's time,
	// rather than left out unmarked (the report's unknown count is then an upper bound,
	// and its summarizer tokens a lower one). Within the events' reach, a generation of
	// the period no event names was written before it.
	if !p.Since.IsZero() && !p.Since.Before(time.Now().Add(-st.Config().EventsMaxAge)) {
		return out, nil
	}
	at := writtenAt(*oldest)
	if !p.holds(at) {
		return out, nil
	}
	for g := uint64(1); g < oldest.Value.Generation && len(out) < maxGenerations; g++ {
		if !kept[g] {
			kept[g] = true
			out = append(out, Compaction{Conversation: conv, Generation: g, At: at, Lost: true})
		}
	}
	return out, nil
}

// writtenAt is when a kept value was written: its created_at, else the stream's time.
func writtenAt(rev jetstream.Revision) time.Time {
	if at := rev.Value.CreatedAt; !at.IsZero() {
		return at
	}
	return rev.Time
}

// maxGenerations bounds the generations one conversation's read reports: a value's
// generation is a producer-independent counter, but bounded all the same.
const maxGenerations = 1 << 16

// ParseTime parses a bound of a period: an RFC 3339 time, a date (its midnight, UTC),
// or a duration back from now (a Go duration such as 90m or 24h, or whole days: 7d).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100000 {
			return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-01-31T00:00:00Z), a date (2026-01-31, UTC) or a duration back from now (24h, 7d)", s)
		}
		return now.Add(-time.Duration(n) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-01-31T00:00:00Z), a date (2026-01-31, UTC) or a duration back from now (24h, 7d)", s)
	}
	return now.Add(-d), nil
}
