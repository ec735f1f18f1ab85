package view

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/jetstream"
)

// The savings page's period: ?days=N (the last N UTC days, today included) or
// ?since=..&until=.. (an RFC 3339 time or a date, its midnight UTC), at most
// MaxSavingsDays days.
const (
	DefaultSavingsDays = 30
	MaxSavingsDays     = 366
)

// DefaultMaxLedgerEntries is the ledger entries one savings page reads at most
// (Config.MaxLedgerEntries 0): about 40 MB read.
const DefaultMaxLedgerEntries = 100000

// SavingsSource is one ledger a savings page reads: a tenant's store ("" for a
// deployment without tenants).
type SavingsSource struct {
	Tenant string
	Store  *jetstream.Store
}

// SavingsQuery is what a savings page asks of the ledgers: their figures over
// [Since, Until), reading at most Limit entries in all; by tenant too when ByTenant.
type SavingsQuery struct {
	Sources      []SavingsSource
	Since, Until time.Time
	Limit        int
	ByTenant     bool
}

// SavingsReports is what a SavingsReader answers: the reports of compactor savings
// (each as `compactor savings --json` prints one: rows, a total, the counts of invalid,
// unsettled and dropped entries; docs/savings.md defines every figure), which the page
// renders by their fields, and the chart's points.
type SavingsReports struct {
	// Priced says a price table was given: the rows have dollars.
	Priced bool `json:"priced"`
	// ByDay's total is the period's; its counts of entries are the whole read's.
	ByDay        any `json:"by_day"`
	ByDayAndMode any `json:"by_day_and_mode"`
	ByMode       any `json:"by_mode"`
	// ByModelAndClient holds its first rows; AgentRowsLeftOut counts the others (they
	// are in the totals).
	ByModelAndClient any `json:"by_model_and_client"`
	AgentRowsLeftOut int `json:"model_client_rows_left_out,omitempty"`
	// ByTenant is set when the query asked for it (nil: none).
	ByTenant any `json:"by_tenant,omitempty"`
	// Unread names the sources whose ledger was not read, or not whole, within the
	// limit.
	Unread []string `json:"unread,omitempty"`
	// Points are the figures per day and mode, oldest day first: the chart's.
	Points []SavingsPoint `json:"-"`
}

// SavingsPoint is one day's figures in one mode (docs/savings.md): the input tokens
// without Compactor, with it, the summarizer's, and the net saved.
type SavingsPoint struct {
	Day, Mode                        string
	Without, With, Summarizer, Saved int64
}

// SavingsReader reads and reports the savings ledger for the savings pages. The
// view does not compute a figure itself: internal/node gives it the reader of
// compactor savings (internal/savings/savingsview).
type SavingsReader func(ctx context.Context, q SavingsQuery) (*SavingsReports, error)

// Savings is the savings page and its JSON twin /api/savings: the savings ledger over
// a period, as compactor savings reports it, per UTC day, per day and mode, per mode,
// per model and client, and, on the operator's page of a process serving tenants, per
// tenant.
type Savings struct {
	// Since and Until bound the period: Since included, Until excluded.
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Days is the UTC days the period covers, in part or whole.
	Days int `json:"days"`
	// Tenants names the tenants read ("" for a deployment without tenants).
	Tenants []string `json:"tenants"`
	*SavingsReports
	// LedgerLimit is the ledger entries the page reads at most.
	LedgerLimit int `json:"ledger_limit"`
	// Chart is the per-day chart drawn from the points.
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

// parseBound parses a bound of the period: an RFC 3339 time, or a date (its midnight,
// UTC).
func parseBound(name, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest("%s %q: want an RFC 3339 time (2026-01-31T00:00:00Z) or a date (2026-01-31, UTC)", name, s)
}

// savingsPeriod parses the page's period: since, until, and the days it covers. now
// is the time of the request.
func savingsPeriod(r *http.Request, now time.Time) (time.Time, time.Time, int, error) {
	q := r.URL.Query()
	since, until := q.Get("since"), q.Get("until")
	midnight := func(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }
	tomorrow := midnight(now).AddDate(0, 0, 1)
	if since == "" && until == "" {
		days, err := uintParam(r, "days", DefaultSavingsDays, 1, MaxSavingsDays)
		if err != nil {
			return time.Time{}, time.Time{}, 0, err
		}
		return tomorrow.AddDate(0, 0, -int(days)), tomorrow, int(days), nil
	}
	if q.Has("days") {
		return time.Time{}, time.Time{}, 0, badRequest("give days, or since and until, not both")
	}
	var err error
	from, to := time.Time{}, tomorrow
	if until != "" {
		if to, err = parseBound("until", until); err != nil {
			return time.Time{}, time.Time{}, 0, err
		}
	}
	if since == "" {
		from = midnight(to.Add(-time.Nanosecond)).AddDate(0, 0, 1-DefaultSavingsDays)
	} else if from, err = parseBound("since", since); err != nil {
		return time.Time{}, time.Time{}, 0, err
	}
	if !from.Before(to) {
		return time.Time{}, time.Time{}, 0, badRequest("since (%s) must be before until (%s)", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	days := int(midnight(to.Add(-time.Nanosecond)).Sub(midnight(from))/(24*time.Hour)) + 1
	if days > MaxSavingsDays {
		return time.Time{}, time.Time{}, 0, badRequest("the period covers %d days; at most %d", days, MaxSavingsDays)
	}
	return from, to, days, nil
}

// savingsPage asks read for the sources' figures over the request's period, at most
// limit entries in all.
func savingsPage(ctx context.Context, r *http.Request, read SavingsReader, sources []SavingsSource, limit int, byTenant bool) (*Savings, error) {
	if read == nil {
		return nil, &httpError{http.StatusNotFound, "this process does not read the savings ledger"}
	}
	since, until, days, err := savingsPeriod(r, time.Now())
	if err != nil {
		return nil, err
	}
	out := &Savings{Since: since.UTC(), Until: until.UTC(), Days: days, LedgerLimit: limit, Tenants: []string{}}
	q := url.Values{}
	for _, k := range []string{"days", "since", "until"} {
		if s := r.URL.Query().Get(k); s != "" {
			q.Set(k, s)
		}
	}
	if len(q) > 0 {
		out.Query = "?" + q.Encode()
	}
	for _, src := range sources {
		out.Tenants = append(out.Tenants, src.Tenant)
	}
	if out.SavingsReports, err = read(ctx, SavingsQuery{Sources: sources, Since: since, Until: until, Limit: limit, ByTenant: byTenant}); err != nil {
		return nil, err
	}
	out.Chart = newChart(out.Points, out.Since, days)
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

// newChart draws points (by day and mode, oldest day first) over the days from since.
func newChart(points []SavingsPoint, since time.Time, days int) Chart {
	first := since.UTC().Truncate(24 * time.Hour)
	c := Chart{Width: float64(days) * slotW, Height: chartH, First: first.Format(time.DateOnly),
		Last: first.AddDate(0, 0, days-1).Format(time.DateOnly)}
	for _, pt := range points {
		c.Max = max(c.Max, pt.Without, pt.With+pt.Summarizer)
	}
	y := func(v int64) float64 {
		if c.Max == 0 || v <= 0 {
			return 0
		}
		return chartH * float64(v) / float64(c.Max)
	}
	n := func(v int64) string { return thousands(strconv.FormatInt(v, 10)) }
	for i := 0; i < len(points); {
		day := points[i].Day
		j := i
		for j < len(points) && points[j].Day == day {
			j++
		}
		group := points[i:j]
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
		for _, pt := range group {
			hw, hs, hx := y(pt.Without), y(pt.With), y(pt.Summarizer)
			// A bar of no height is left out: nothing to draw.
			for _, b := range []ChartBar{{Kind: "without", Mode: pt.Mode, X: x, Y: chartH - hw, W: w, H: hw},
				{Kind: "with", Mode: pt.Mode, X: x + w, Y: chartH - hs, W: w, H: hs},
				{Kind: "summarizer", Mode: pt.Mode, X: x + w, Y: chartH - hs - hx, W: w, H: hx}} {
				if b.H > 0 {
					cd.Bars = append(cd.Bars, b)
				}
			}
			x += 2 * w
			titles = append(titles, pt.Mode+": "+n(pt.Without)+" tokens without Compactor, "+n(pt.With)+" with it, "+
				n(pt.Summarizer)+" the summarizer's, "+n(pt.Saved)+" saved")
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
	return savingsPage(ctx, r, v.cfg.Savings, []SavingsSource{{Tenant: v.cfg.Tenant, Store: v.store}}, v.cfg.MaxLedgerEntries, false)
}
