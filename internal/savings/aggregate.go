package savings

import (
	"cmp"
	"slices"
	"time"

	"github.com/compactor/compactor/schemas"
)

// MaxChangePoints bounds the points a conversation's compactions are booked by: the
// exchanges of the period where its model, client or mode changes. Past it, the
// conversation keeps its first point and its latest ones; a compaction older than the
// latest kept (other than the first) is booked to the first one's model, client and
// mode.
const MaxChangePoints = 256

// Aggregator sums the ledger into reports while it is read: each tenant's entries in
// the ledger's order, then its compactions, one at a time, into one report per
// grouping, in one pass. It holds the exchanges still waiting for their done entry,
// each conversation's change points (at most MaxChangePoints), and the rows of the
// reports; not the ledger.
//
// The join is Aggregate's, made as the entries come: the ledger is in append order, and
// the proxy appends an exchange's sent entry (and waits for the server's ack) before
// the request goes upstream, so before its done entry. A sent entry opens its exchange
// (once: the same entry again while it is open is the same exchange); a done entry
// settles the open exchange of its conversation and id, which is then booked and
// forgotten, or, with none open, is dropped when it is in the period; the exchanges
// still open at the end of the tenant's read are booked unsettled. What this changes at
// the edges, against a join of the whole ledger held in memory: a done entry written
// again once its exchange was settled (past the stream's duplicate window, two
// minutes by default) is dropped, not ignored; a sent entry written again after its
// done entry opens a new, unsettled exchange; and a done entry stored before its sent
// entry (which the proxy never writes) is dropped, its exchange unsettled.
type Aggregator struct {
	prices    *Prices
	period    Period
	groupings [][]string
	groups    []map[rowKey]*Row
	invalid   int
	dropped   int
	truncated []string
	// peakPending is the most exchanges a tenant had open at once.
	peakPending int
}

// NewAggregator returns an aggregator of the ledger over period p, pricing with prices
// (nil: tokens only), that makes one report per grouping (each a list of dimensions,
// as ParseBy returns; none: a single report of the total).
func NewAggregator(prices *Prices, p Period, groupings ...[]string) *Aggregator {
	if len(groupings) == 0 {
		groupings = [][]string{nil}
	}
	a := &Aggregator{prices: prices, period: p, groupings: groupings}
	for range groupings {
		a.groups = append(a.groups, map[rowKey]*Row{})
	}
	return a
}

// TenantFeed is one tenant's ledger being fed to an Aggregator: Entry for each of its
// entries, in the ledger's order, then Compaction for each of its compactions, then
// Close. A feed never closed (its read failed) adds nothing to the reports.
type TenantFeed struct {
	a      *Aggregator
	tenant string
	// pending is the open exchanges, by conversation and id; seq numbers them in the
	// order they were opened, the order the unsettled ones are booked in.
	pending map[exchangeID]pendingExchange
	seq     uint64
	peak    int
	// points is each conversation's change points, for its compactions.
	points  map[string][]changePoint
	groups  []map[rowKey]*Row
	dropped int
	// delta is the figures of one exchange or compaction, before they are added to
	// the row of each grouping.
	delta Row
}

type exchangeID struct{ conv, id string }

type pendingExchange struct {
	seq  uint64
	sent *schemas.LedgerEntry
}

// changePoint is where a conversation's exchanges (in the period, in the ledger's
// order) take a model, client and mode other than the previous one's: a run of its
// exchanges, by the earliest time of any of them.
type changePoint struct {
	earliest            time.Time
	model, client, mode string
}

// Tenant starts feeding tenant's ledger ("": a deployment without tenants).
func (a *Aggregator) Tenant(tenant string) *TenantFeed {
	f := &TenantFeed{a: a, tenant: tenant, pending: map[exchangeID]pendingExchange{}, points: map[string][]changePoint{}}
	for range a.groupings {
		f.groups = append(f.groups, map[rowKey]*Row{})
	}
	return f
}

// Entry feeds the tenant's next ledger entry.
func (f *TenantFeed) Entry(e *schemas.LedgerEntry) {
	k := exchangeID{e.Conversation, e.ID}
	if e.Phase == schemas.LedgerDone {
		x, ok := f.pending[k]
		if !ok {
			if f.a.period.holds(e.At) {
				f.dropped++
			}
			return
		}
		delete(f.pending, k)
		f.book(x.sent, e)
		return
	}
	if _, ok := f.pending[k]; ok {
		return
	}
	f.seq++
	f.pending[k] = pendingExchange{seq: f.seq, sent: e}
	f.peak = max(f.peak, len(f.pending))
	if f.a.period.holds(e.At) {
		f.mark(e)
	}
}

// mark notes an exchange of the period opened by sent among its conversation's change
// points.
func (f *TenantFeed) mark(sent *schemas.LedgerEntry) {
	ps := f.points[sent.Conversation]
	if n := len(ps); n > 0 {
		last := &ps[n-1]
		if last.model == sent.Model && last.client == sent.Client && last.mode == sent.Mode {
			if sent.At.Before(last.earliest) {
				last.earliest = sent.At
			}
			return
		}
	}
	if len(ps) == MaxChangePoints {
		// The first point stays: a compaction before every exchange is booked to it.
		ps = slices.Delete(ps, 1, 2)
	}
	f.points[sent.Conversation] = append(ps, changePoint{earliest: sent.At, model: sent.Model, client: sent.Client, mode: sent.Mode})
}

// book adds an exchange to the reports when its sent entry is in the period; done is
// nil for one unsettled.
func (f *TenantFeed) book(sent, done *schemas.LedgerEntry) {
	if !f.a.period.holds(sent.At) {
		return
	}
	prices := f.a.prices
	price := prices.For(sent.Model)
	d := f.reset()
	without, with := exchange{tenant: f.tenant, sent: sent, done: done}.figures(price, d)
	d.Without.add(without)
	d.With.add(with)
	if sent.Swap {
		d.SwapCacheWrite += with.CacheWrite
	}
	if price != nil {
		d.priced = true
		d.money().Without += without.cost(price)
		d.money().With += with.cost(price)
	} else if prices != nil {
		d.unpriced(sent.Model)
	}
	f.add(rowKey{Tenant: f.tenant, Conversation: sent.Conversation, Model: sent.Model, Client: sent.Client,
		Day: sent.At.UTC().Format(time.DateOnly), Mode: sent.Mode})
}

// Compaction feeds one of the tenant's compactions, once every entry is fed: one in
// the period is booked to its tenant, conversation and day, and to the model, client
// and mode of the conversation's latest exchange at or before it in the period (in the
// ledger's order; else its first one; none: "").
func (f *TenantFeed) Compaction(c Compaction) {
	if !f.a.period.holds(c.At) {
		return
	}
	k := rowKey{Tenant: f.tenant, Conversation: c.Conversation, Day: c.At.UTC().Format(time.DateOnly)}
	if ps := f.points[c.Conversation]; len(ps) > 0 {
		pt := ps[0]
		for i := len(ps) - 1; i >= 0; i-- {
			if !ps[i].earliest.After(c.At) {
				pt = ps[i]
				break
			}
		}
		k.Model, k.Client, k.Mode = pt.model, pt.client, pt.mode
	}
	d := f.reset()
	d.Summarizer.Compactions++
	switch {
	case c.Lost:
		d.Summarizer.Unknown++
	case c.Usage != nil:
		u := c.Usage
		d.Summarizer.Input += int64(u.PromptTokens)
		d.Summarizer.CachedInput += int64(min(u.CachedTokens, u.PromptTokens))
		d.Summarizer.Output += int64(u.CompletionTokens)
		if price := f.a.prices.For(c.Model); price != nil {
			d.priced = true
			cached := min(u.CachedTokens, u.PromptTokens)
			d.money().Summarizer += (float64(u.PromptTokens-cached)*price.Input + float64(cached)*price.CachedInput +
				float64(u.CompletionTokens)*price.Output) / 1e6
		} else if f.a.prices != nil {
			d.unpriced("summarizer " + cmp.Or(c.Model, "(no model)"))
		}
	}
	f.add(k)
}

// reset returns f.delta emptied, its set of unpriced models kept for reuse.
func (f *TenantFeed) reset() *Row {
	set := f.delta.unpricedSet
	clear(set)
	f.delta = Row{unpricedSet: set}
	return &f.delta
}

// add adds f.delta to the row of k's group in each grouping.
func (f *TenantFeed) add(k rowKey) {
	for i, by := range f.a.groupings {
		group(f.groups[i], by, k).sum(&f.delta)
	}
}

// Close books the exchanges still open as unsettled, in the order they were opened,
// and adds the tenant to the reports, with the ledger entries its read left out as
// invalid and whether the read stopped at its limit (more). It ends the feed.
func (f *TenantFeed) Close(invalid int, more bool) {
	open := make([]pendingExchange, 0, len(f.pending))
	for _, x := range f.pending {
		open = append(open, x)
	}
	slices.SortFunc(open, func(a, b pendingExchange) int { return cmp.Compare(a.seq, b.seq) })
	for _, x := range open {
		f.book(x.sent, nil)
	}
	f.pending = nil
	a := f.a
	a.invalid += invalid
	a.dropped += f.dropped
	if more {
		a.truncated = append(a.truncated, f.tenant)
	}
	a.peakPending = max(a.peakPending, f.peak)
	for i, by := range a.groupings {
		for k, r := range f.groups[i] {
			group(a.groups[i], by, k).sum(r)
		}
	}
}

// group returns the row of k's group of the dimensions by in groups, made when new.
func group(groups map[rowKey]*Row, by []string, k rowKey) *Row {
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

// Reports returns one report per grouping, in NewAggregator's order, of the tenants
// closed so far. Call it once, when every tenant is fed.
func (a *Aggregator) Reports() []*Report {
	out := make([]*Report, len(a.groupings))
	for i, by := range a.groupings {
		rep := &Report{By: by, Priced: a.prices != nil, Rows: []Row{}, Invalid: a.invalid, Dropped: a.dropped,
			Truncated: slices.Clone(a.truncated)}
		if rep.By == nil {
			rep.By = []string{}
		}
		if !a.period.Since.IsZero() {
			rep.Since = &a.period.Since
		}
		if !a.period.Until.IsZero() {
			rep.Until = &a.period.Until
		}
		for _, r := range a.groups[i] {
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
		for j := range rep.Rows {
			rep.Rows[j].finish(a.prices != nil)
			rep.Total.sum(&rep.Rows[j])
		}
		rep.Total.finish(a.prices != nil)
		rep.Unsettled = rep.Total.Unsettled
		out[i] = rep
	}
	return out
}
