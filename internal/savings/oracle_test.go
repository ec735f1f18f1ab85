package savings

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// oracleAggregate is Aggregate as it was when it joined a tenant's whole ledger held
// in memory (every entry read first, then joined by conversation and id): kept, frozen,
// as the oracle the streaming aggregator's figures are checked against.
func oracleAggregate(data []TenantData, prices *Prices, by []string, p Period) *Report {
	rep := &Report{By: by, Priced: prices != nil, Rows: []Row{}}
	if rep.By == nil {
		rep.By = []string{}
	}
	if !p.Since.IsZero() {
		rep.Since = &p.Since
	}
	if !p.Until.IsZero() {
		rep.Until = &p.Until
	}
	groups := map[rowKey]*Row{}
	group := func(k rowKey) *Row {
		var key rowKey
		for _, d := range by {
			switch d {
			case ByTenant:
				key.Tenant = k.Tenant
			case ByConversation:
				key.Conversation = k.Conversation
			case ByModel:
				key.Model = k.Model
			case ByClient:
				key.Client = k.Client
			case ByDay:
				key.Day = k.Day
			case ByMode:
				key.Mode = k.Mode
			}
		}
		r := groups[key]
		if r == nil {
			r = &Row{Tenant: key.Tenant, Conversation: key.Conversation, Model: key.Model, Client: key.Client,
				Day: key.Day, Mode: key.Mode}
			groups[key] = r
		}
		return r
	}
	for _, td := range data {
		rep.Invalid += td.Invalid
		if td.More {
			rep.Truncated = append(rep.Truncated, td.Tenant)
		}
		type id struct{ conv, id string }
		byID := map[id]*exchange{}
		var order []*exchange
		var dones []*schemas.LedgerEntry
		for _, e := range td.Entries {
			if e.Phase == schemas.LedgerDone {
				dones = append(dones, e)
				continue
			}
			k := id{e.Conversation, e.ID}
			if byID[k] == nil {
				x := &exchange{tenant: td.Tenant, sent: e}
				byID[k] = x
				order = append(order, x)
			}
		}
		for _, e := range dones {
			x := byID[id{e.Conversation, e.ID}]
			switch {
			case x == nil && p.holds(e.At):
				rep.Dropped++
			case x != nil && x.done == nil:
				x.done = e
			}
		}
		// Each conversation's exchanges in the period, oldest first, for the
		// compactions to be booked beside.
		convs := map[string][]*exchange{}
		for _, x := range order {
			if !p.holds(x.sent.At) {
				continue
			}
			s := x.sent
			price := prices.For(s.Model)
			r := group(rowKey{Tenant: td.Tenant, Conversation: s.Conversation, Model: s.Model, Client: s.Client,
				Day: s.At.UTC().Format(time.DateOnly), Mode: s.Mode})
			without, with := x.figures(price, r)
			r.Without.add(without)
			r.With.add(with)
			if s.Swap {
				r.SwapCacheWrite += with.CacheWrite
			}
			if price != nil {
				r.priced = true
				r.money().Without += without.cost(price)
				r.money().With += with.cost(price)
			} else if prices != nil {
				r.unpriced(s.Model)
			}
			convs[s.Conversation] = append(convs[s.Conversation], x)
		}
		for _, c := range td.Compactions {
			if !p.holds(c.At) {
				continue
			}
			// A compaction is booked to its tenant, conversation and day, and to the
			// model, client and mode of the conversation's latest exchange at or before
			// it in the period (else its first one after; none: "").
			k := rowKey{Tenant: td.Tenant, Conversation: c.Conversation, Day: c.At.UTC().Format(time.DateOnly)}
			if xs := convs[c.Conversation]; len(xs) > 0 {
				x := xs[0]
				for _, y := range xs {
					if !y.sent.At.After(c.At) {
						x = y
					}
				}
				k.Model, k.Client, k.Mode = x.sent.Model, x.sent.Client, x.sent.Mode
			}
			r := group(k)
			r.Summarizer.Compactions++
			if c.Lost {
				r.Summarizer.Unknown++
				continue
			}
			if c.Usage == nil {
				continue
			}
			u := c.Usage
			r.Summarizer.Input += int64(u.PromptTokens)
			r.Summarizer.CachedInput += int64(min(u.CachedTokens, u.PromptTokens))
			r.Summarizer.Output += int64(u.CompletionTokens)
			if price := prices.For(c.Model); price != nil {
				r.priced = true
				cached := min(u.CachedTokens, u.PromptTokens)
				r.money().Summarizer += (float64(u.PromptTokens-cached)*price.Input + float64(cached)*price.CachedInput +
					float64(u.CompletionTokens)*price.Output) / 1e6
			} else if prices != nil {
				r.unpriced("summarizer " + cmp.Or(c.Model, "(no model)"))
			}
		}
	}
	for _, r := range groups {
		rep.Rows = append(rep.Rows, *r)
	}
	slices.SortFunc(rep.Rows, func(a, b Row) int {
		for _, d := range by {
			if c := cmp.Compare(a.Key(d), b.Key(d)); c != 0 {
				return c
			}
		}
		return 0
	})
	for i := range rep.Rows {
		rep.Rows[i].finish(prices != nil)
		rep.Total.sum(&rep.Rows[i])
	}
	rep.Total.finish(prices != nil)
	rep.Unsettled = rep.Total.Unsettled
	return rep
}

// mixedLedger is a ledger of two tenants in append order, generated from seed: exchanges
// settled with usage, without usage, refused, answered, would-answer in shadow mode,
// swaps, left unsettled, sent entries whose time is a little out of the stream's order,
// a sent entry appended twice while its exchange is open, done entries whose sent entry
// is not in the ledger, conversations whose model, client and mode change, and
// compactions with usage, without, lost, and of conversations with no exchange.
func mixedLedger(seed uint64) []TenantData {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	base := at("2026-03-01T00:00:00Z")
	models := []string{"gpt-test", "claude-test-1", "mystery"}
	clients := []string{"codex", "claude-cli", ""}
	var out []TenantData
	for _, tenant := range []string{"acme", "globex"} {
		td := TenantData{Tenant: tenant, Invalid: rng.IntN(3), More: rng.IntN(2) == 0}
		now := base
		var open []*schemas.LedgerEntry
		var atExchange []Compaction
		n := 0
		for step := 0; step < 400; step++ {
			now = now.Add(time.Duration(rng.IntN(20)) * time.Minute)
			conv := fmt.Sprintf("c%d", rng.IntN(7))
			switch r := rng.IntN(10); {
			case r < 5 || len(open) == 0:
				n++
				mode := schemas.LedgerRewrite
				if rng.IntN(3) == 0 {
					mode = schemas.LedgerShadow
				}
				// A conversation keeps its model and client most of the time.
				mi, ci := int(conv[1]-'0')%3, int(conv[1]-'0')%3
				if rng.IntN(5) == 0 {
					mi = rng.IntN(3)
				}
				if rng.IntN(7) == 0 {
					ci = rng.IntN(3)
				}
				client := int64(1000 + rng.IntN(20000))
				comp := client / int64(1+rng.IntN(4))
				when := now.Add(-time.Duration(rng.IntN(30)) * time.Minute).Format(time.RFC3339)
				s := sent(fmt.Sprintf("x%04d-aaaaaaaaaaaaaaaa", n), conv, mode, models[mi], clients[ci], when,
					client, client/int64(1+rng.IntN(3)), comp, comp/int64(1+rng.IntN(3)), rng.IntN(6) == 0)
				s.WouldAnswer = mode == schemas.LedgerShadow && rng.IntN(8) == 0
				td.Entries = append(td.Entries, s)
				open = append(open, s)
				// A compaction at the time of an exchange, or just before or after it:
				// where which exchange it is booked to is decided.
				if rng.IntN(4) == 0 {
					cp := Compaction{Conversation: conv, Generation: uint64(100 + n), At: s.At.Add(time.Duration(rng.IntN(3)-1) * time.Minute)}
					atExchange = append(atExchange, cp)
				}
			case r < 8:
				i := rng.IntN(len(open))
				s := open[i]
				open = slices.Delete(open, i, i+1)
				when := now.Format(time.RFC3339)
				var d *schemas.LedgerEntry
				switch k := rng.IntN(10); {
				case k < 6:
					in := s.CompactedTokens
					if s.Mode == schemas.LedgerShadow {
						in = s.ClientTokens
					}
					in = in * int64(90+rng.IntN(20)) / 100
					read := in / int64(1+rng.IntN(4))
					var write int64
					if rng.IntN(3) == 0 {
						write = (in - read) / 2
					}
					d = done(s, when, 200, &schemas.LedgerUsage{Input: in, CacheRead: read, CacheWrite: write, Output: int64(rng.IntN(900))})
				case k < 7:
					d = done(s, when, 200, nil)
				case k < 8:
					d = done(s, when, 400+rng.IntN(130), nil)
				default:
					d = done(s, when, 200, nil)
					d.Answered = s.Mode == schemas.LedgerRewrite
				}
				td.Entries = append(td.Entries, d)
			case r < 9:
				// The same sent entry again, its exchange still open: one exchange.
				td.Entries = append(td.Entries, open[rng.IntN(len(open))])
			default:
				n++
				s := sent(fmt.Sprintf("x%04d-aaaaaaaaaaaaaaaa", n), conv, schemas.LedgerRewrite, "gpt-test", "codex", now.Format(time.RFC3339), 10, 0, 5, 0, false)
				td.Entries = append(td.Entries, done(s, now.Format(time.RFC3339), 200, &schemas.LedgerUsage{Input: 5}))
			}
		}
		for c := range 8 {
			for g := range uint64(1 + rng.IntN(6)) {
				cp := Compaction{Conversation: fmt.Sprintf("c%d", c), Generation: g + 1,
					At: base.Add(time.Duration(rng.IntN(int(now.Sub(base)/time.Minute)+60)) * time.Minute)}
				switch k := rng.IntN(6); {
				case k == 0:
					cp.Lost = true
				case k == 1:
				default:
					cp.Model = []string{"sum-mini", "sum-unpriced"}[rng.IntN(2)]
					p := rng.IntN(9000)
					cp.Usage = &schemas.Usage{PromptTokens: p, CachedTokens: rng.IntN(p + 1), CompletionTokens: rng.IntN(900)}
				}
				td.Compactions = append(td.Compactions, cp)
			}
		}
		td.Compactions = append(td.Compactions, atExchange...)
		out = append(out, td)
	}
	return out
}

// oraclePeriods are the periods the reports are checked over: all time, and bounds
// that cut exchanges from their done entries and compactions from their exchanges.
func oraclePeriods() []Period {
	d2, d3 := at("2026-03-02T00:00:00Z"), at("2026-03-03T00:00:00Z")
	return []Period{{}, {Since: d2}, {Until: d2}, {Since: d2, Until: d3}, {Since: at("2026-03-01T13:17:00Z"), Until: at("2026-03-02T07:41:00Z")}}
}

// oracleGroupings are the groupings the reports are checked by: each dimension, the
// view's, and all of them.
func oracleGroupings() [][]string {
	gs := [][]string{nil, {ByDay, ByMode}, {ByModel, ByClient}, Dimensions}
	for _, d := range Dimensions {
		gs = append(gs, []string{d})
	}
	return gs
}

// sameReport says how got differs from want, "" when it does not: every count and
// token the same, every dollar figure within a billionth of its size (dollars are sums
// of floats, and the order of the sums may change).
func sameReport(got, want *Report) string {
	type flat struct {
		Report
		Rows []Row
	}
	strip := func(r *Report) (flat, []*Money) {
		f := flat{Report: *r}
		f.Report.Rows, f.Report.Total = nil, Row{}
		var ms []*Money
		for _, row := range append(slices.Clone(r.Rows), r.Total) {
			ms = append(ms, row.USD)
			row.USD = nil
			f.Rows = append(f.Rows, row)
		}
		return f, ms
	}
	g, gm := strip(got)
	w, wm := strip(want)
	if !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("got %+v\nwant %+v", g, w)
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1e-9) }
	for i := range gm {
		a, b := gm[i], wm[i]
		switch {
		case (a == nil) != (b == nil):
			return fmt.Sprintf("row %d: dollars %+v; want %+v", i, a, b)
		case a == nil:
		case a.Partial != b.Partial || !close(a.Without, b.Without) || !close(a.With, b.With) ||
			!close(a.Summarizer, b.Summarizer) || !close(a.Saved, b.Saved):
			return fmt.Sprintf("row %d: dollars %+v; want %+v", i, *a, *b)
		}
	}
	return ""
}

// Aggregate's figures, and an Aggregator's of every grouping in one pass, are the
// in-memory join's, on mixed ledgers, by every grouping, over periods that cut
// exchanges and compactions, with and without prices.
func TestAggregateMatchesOracle(t *testing.T) {
	prices := mustPrices(t)
	for seed := range uint64(6) {
		data := mixedLedger(seed)
		for _, p := range oraclePeriods() {
			// Every grouping at once, in one pass of each tenant's entries.
			a := NewAggregator(prices, p, oracleGroupings()...)
			for _, td := range data {
				f := a.Tenant(td.Tenant)
				for _, e := range td.Entries {
					f.Entry(e)
				}
				for _, c := range td.Compactions {
					f.Compaction(c)
				}
				f.Close(td.Invalid, td.More)
			}
			for i, rep := range a.Reports() {
				by := oracleGroupings()[i]
				if d := sameReport(rep, oracleAggregate(data, prices, by, p)); d != "" {
					t.Fatalf("seed %d, period %+v, by %v in one pass: %s", seed, p, by, d)
				}
			}
			for _, by := range oracleGroupings() {
				for _, pr := range []*Prices{nil, prices} {
					want := oracleAggregate(data, pr, by, p)
					if want.Total.Exchanges == 0 {
						t.Fatalf("seed %d, period %+v: an empty report", seed, p)
					}
					if d := sameReport(Aggregate(data, pr, by, p), want); d != "" {
						t.Fatalf("seed %d, period %+v, by %v, priced %v: %s", seed, p, by, pr != nil, d)
					}
				}
			}
		}
	}
}
