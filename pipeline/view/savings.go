package view

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream"
)

// The savings page's period: ?days=N (the last N UTC days, today included) or
// ?since=..&until=.. (savings.ParseTime: an RFC 3339 time, a date, or a duration back
// from now), at most MaxSavingsDays days.
const (
	DefaultSavingsDays = 30
	MaxSavingsDays     = 366
)

// DefaultMaxLedgerEntries is the ledger entries one savings page reads at most
// (Config.MaxLedgerEntries 0): about 40 MB read.
const DefaultMaxLedgerEntries = 100000

// maxAgentRows bounds the rows of the page's table by model and client.
const maxAgentRows = 100

// Savings is the savings page and its JSON twin /api/savings: the savings ledger over
// a period, as compactor savings reports it (internal/savings; docs/savings.md defines
// every figure), per UTC day, per day and mode, per mode, per model and client, and,
// on the operator's page of a process serving tenants, per tenant.
type Savings struct {
	// Since and Until bound the period: Since included, Until excluded.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Days is the UTC days the period covers, in part or whole.
	Days int `json:"days"`
	// Tenants names the tenants read ("" for a deployment without tenants).
	Tenants []string `json:"tenants"`
	// Priced says a price table (COMPACTOR_PRICES) was given: the rows have dollars.
	Priced bool `json:"priced"`
	// ByDay's total is the period's; its Invalid, Unsettled, Dropped and Truncated are
	// the whole read's.
	ByDay        *savings.Report `json:"by_day"`
	ByDayAndMode *savings.Report `json:"by_day_and_mode"`
	ByMode       *savings.Report `json:"by_mode"`
	// ByModelAndClient holds its first maxAgentRows rows; AgentRowsLeftOut counts the
	// others (they are in the totals).
	ByModelAndClient *savings.Report `json:"by_model_and_client"`
	AgentRowsLeftOut int             `json:"model_client_rows_left_out,omitempty"`
	// ByTenant is set on the operator's page of a process serving tenants.
	ByTenant *savings.Report `json:"by_tenant,omitempty"`
	// LedgerLimit is the ledger entries the page reads at most; Unread names the
	// tenants whose ledger was not read, or not whole, within it (also in
	// ByDay.Truncated).
	LedgerLimit int      `json:"ledger_limit"`
	Unread      []string `json:"unread,omitempty"`
	// Chart is the per-day chart drawn from ByDayAndMode.
	Chart Chart `json:"-"`
	// Query is the period's query string ("?days=30"), for the page's links.
	Query string `json:"-"`
}

// Chart is the savings page's chart: a slot per UTC day of the period, and in it, for
// each mode with exchanges that day, a bar of the input tokens without Compactor and a
// bar of those with it, topped by the summarizer's tokens. The gap between the two is
// the day's net saving in that mode (negative: the second bar is the taller).
type Chart struct {
	Width, Height float64
	// Max is the tallest bar's tokens (the chart's top).
	Max  int64
	Days []ChartDay
	// First and Last are the period's first and last UTC days.
	First, Last string
}

// ChartDay is one day of the chart with data: its bars, and its title (the figures a
// reader hovers over; the table holds the same).
type ChartDay struct {
	Day   string
	Title string
	Bars  []ChartBar
}

// ChartBar is one rectangle of the chart.
type ChartBar struct {
	// Kind is without, with or summarizer; Mode shadow or rewrite.
	Kind, Mode string
	X, Y, W, H float64
}

// savingsSource is one store whose ledger a savings page reads.
type savingsSource struct {
	tenant string
	store  *jetstream.Store
}

// savingsPeriod parses the page's period. now is the time of the request.
func savingsPeriod(r *http.Request, now time.Time) (savings.Period, int, error) {
	q := r.URL.Query()
	since, until := q.Get("since"), q.Get("until")
	midnight := func(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }
	tomorrow := midnight(now).AddDate(0, 0, 1)
	var p savings.Period
	if since == "" && until == "" {
		days, err := uintParam(r, "days", DefaultSavingsDays, 1, MaxSavingsDays)
		if err != nil {
			return p, 0, err
		}
		p = savings.Period{Since: tomorrow.AddDate(0, 0, -int(days)), Until: tomorrow}
		return p, int(days), nil
	}
	if q.Has("days") {
		return p, 0, badRequest("give days, or since and until, not both")
	}
	var err error
	p.Until = tomorrow
	if until != "" {
		if p.Until, err = savings.ParseTime(until, now); err != nil {
			return p, 0, badRequest("until: %v", err)
		}
	}
	if since == "" {
		p.Since = midnight(p.Until.Add(-time.Nanosecond)).AddDate(0, 0, 1-DefaultSavingsDays)
	} else if p.Since, err = savings.ParseTime(since, now); err != nil {
		return p, 0, badRequest("since: %v", err)
	}
	if !p.Since.Before(p.Until) {
		return p, 0, badRequest("since (%s) must be before until (%s)", p.Since.UTC().Format(time.RFC3339), p.Until.UTC().Format(time.RFC3339))
	}
	days := int(midnight(p.Until.Add(-time.Nanosecond)).Sub(midnight(p.Since))/(24*time.Hour)) + 1
	if days > MaxSavingsDays {
		return p, 0, badRequest("the period covers %d days; at most %d", days, MaxSavingsDays)
	}
	return p, days, nil
}

// savingsPage reads the sources' ledgers over the request's period, at most limit
// entries in all, and aggregates them with prices (nil: tokens only).
func savingsPage(ctx context.Context, r *http.Request, sources []savingsSource, prices *savings.Prices, limit int, byTenant bool) (*Savings, error) {
	p, days, err := savingsPeriod(r, time.Now())
	if err != nil {
		return nil, err
	}
	out := &Savings{Since: p.Since.UTC(), Until: p.Until.UTC(), Days: days, Priced: prices != nil, LedgerLimit: limit, Tenants: []string{}}
	q := url.Values{}
	for _, k := range []string{"days", "since", "until"} {
		if s := r.URL.Query().Get(k); s != "" {
			q.Set(k, s)
		}
	}
	if len(q) > 0 {
		out.Query = "?" + q.Encode()
	}
	var data []savings.TenantData
	left := limit
	for _, src := range sources {
		out.Tenants = append(out.Tenants, src.tenant)
		if left <= 0 {
			out.Unread = append(out.Unread, src.tenant)
			continue
		}
		td, err := savings.ReadLimit(ctx, src.store, src.tenant, "", p, left)
		if err != nil {
			return nil, err
		}
		left -= len(td.Entries) + td.Invalid
		data = append(data, td)
	}
	out.ByDay = savings.Aggregate(data, prices, []string{savings.ByDay}, p)
	out.ByDay.Truncated = append(out.ByDay.Truncated, out.Unread...)
	out.Unread = out.ByDay.Truncated
	out.ByDayAndMode = savings.Aggregate(data, prices, []string{savings.ByDay, savings.ByMode}, p)
	out.ByMode = savings.Aggregate(data, prices, []string{savings.ByMode}, p)
	out.ByModelAndClient = savings.Aggregate(data, prices, []string{savings.ByModel, savings.ByClient}, p)
	if n := len(out.ByModelAndClient.Rows) - maxAgentRows; n > 0 {
		out.AgentRowsLeftOut = n
		out.ByModelAndClient.Rows = out.ByModelAndClient.Rows[:maxAgentRows]
	}
	if byTenant {
		out.ByTenant = savings.Aggregate(data, prices, []string{savings.ByTenant}, p)
	}
	out.Chart = newChart(out.ByDayAndMode.Rows, p, days)
	return out, nil
}

// errSavingsBusy answers a savings page that found none of the slots free in time.
var errSavingsBusy = &httpError{http.StatusServiceUnavailable, "a savings page is being built; try again in a few seconds"}

// takeSlot takes a token of slot within wait, and returns its release.
func takeSlot(ctx context.Context, slot chan struct{}, wait time.Duration) (func(), error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case slot <- struct{}{}:
		return func() { <-slot }, nil
	case <-t.C:
		return nil, errSavingsBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// The chart's geometry, in the units of its viewBox: a slot of slotW per day, bars
// drawn in its middle 80%, up to chartH high.
const (
	slotW  = 24.0
	chartH = 200.0
)

// newChart draws rows (by day and mode) over the days of p.
func newChart(rows []savings.Row, p savings.Period, days int) Chart {
	first := p.Since.UTC().Truncate(24 * time.Hour)
	c := Chart{Width: float64(days) * slotW, Height: chartH, First: first.Format(time.DateOnly),
		Last: first.AddDate(0, 0, days-1).Format(time.DateOnly)}
	with := func(r *savings.Row) int64 { return r.With.Input + r.Summarizer.Tokens() }
	for i := range rows {
		c.Max = max(c.Max, rows[i].Without.Input, with(&rows[i]))
	}
	y := func(v int64) float64 {
		if c.Max == 0 {
			return 0
		}
		return chartH * float64(v) / float64(c.Max)
	}
	for i := 0; i < len(rows); {
		day := rows[i].Day
		j := i
		for j < len(rows) && rows[j].Day == day {
			j++
		}
		group := rows[i:j]
		i = j
		at, err := time.Parse(time.DateOnly, day)
		if err != nil {
			continue
		}
		slot := int(at.Sub(first) / (24 * time.Hour))
		if slot < 0 || slot >= days {
			continue
		}
		cd := ChartDay{Day: day}
		w := slotW * 0.8 / float64(2*len(group))
		x := float64(slot)*slotW + slotW*0.1
		var titles []string
		for k := range group {
			r := &group[k]
			mode := r.Mode
			hw, hs, hx := y(r.Without.Input), y(r.With.Input), y(r.Summarizer.Tokens())
			// A bar of no height is left out: nothing to draw.
			for _, b := range []ChartBar{{Kind: "without", Mode: mode, X: x, Y: chartH - hw, W: w, H: hw},
				{Kind: "with", Mode: mode, X: x + w, Y: chartH - hs, W: w, H: hs},
				{Kind: "summarizer", Mode: mode, X: x + w, Y: chartH - hs - hx, W: w, H: hx}} {
				if b.H > 0 {
					cd.Bars = append(cd.Bars, b)
				}
			}
			x += 2 * w
			titles = append(titles, mode+": "+thousands(strconv.FormatInt(r.Without.Input, 10))+" tokens without Compactor, "+
				thousands(strconv.FormatInt(r.With.Input, 10))+" with it, "+thousands(strconv.FormatInt(r.Summarizer.Tokens(), 10))+
				" the summarizer's, "+thousands(strconv.FormatInt(r.SavedTokens, 10))+" saved")
		}
		cd.Title = day + ": " + strings.Join(titles, "; ")
		c.Days = append(c.Days, cd)
	}
	return c
}

// savings builds the view's savings page: its store's ledger, its tenant's only. One
// is built at a time; another waits up to QueueWait, then is answered 503.
func (v *View) savings(ctx context.Context, r *http.Request) (any, error) {
	release, err := takeSlot(ctx, v.savingsSlot, v.cfg.QueueWait)
	if err != nil {
		return nil, err
	}
	defer release()
	return savingsPage(ctx, r, []savingsSource{{tenant: v.cfg.Tenant, store: v.store}}, v.cfg.Prices, v.cfg.MaxLedgerEntries, false)
}
