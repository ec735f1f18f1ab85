// Package savingsview is the web view's reader of the savings ledger: the figures of
// compactor savings (internal/savings: an Aggregator, reading each ledger once) in the form the view's
// savings pages take (view.SavingsReader). The view computes no figure itself, and
// links nothing of internal/.
package savingsview

import (
	"context"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/pipeline/view"
)

// MaxModelClientRows bounds the rows of the page's table by model and client; the
// others are counted (view.SavingsReports.AgentRowsLeftOut) and in the totals.
const MaxModelClientRows = 100

// Reader returns the reader of the view's savings pages, pricing with prices (nil:
// tokens only). It reads each source's ledger in turn, once, into every report the
// page shows (summed as the entries come, not held), sharing the query's limit of
// entries between the sources, and reports a source it could not read whole as unread.
func Reader(prices *savings.Prices) view.SavingsReader {
	return func(ctx context.Context, q view.SavingsQuery) (*view.SavingsReports, error) {
		p := savings.Period{Since: q.Since, Until: q.Until}
		groupings := [][]string{{savings.ByDay}, {savings.ByDay, savings.ByMode}, {savings.ByMode},
			{savings.ByModel, savings.ByClient}}
		if q.ByTenant {
			groupings = append(groupings, []string{savings.ByTenant})
		}
		a := savings.NewAggregator(prices, p, groupings...)
		var unread []string
		left := q.Limit
		for _, src := range q.Sources {
			if left <= 0 {
				unread = append(unread, src.Tenant)
				continue
			}
			stats, err := a.Read(ctx, src.Store, src.Tenant, "", left)
			if err != nil {
				return nil, err
			}
			left -= stats.Read
		}
		reps := a.Reports()
		byDay, byDayMode, agents := reps[0], reps[1], reps[3]
		byDay.Truncated = append(byDay.Truncated, unread...)
		out := &view.SavingsReports{Priced: prices != nil, ByDay: byDay, ByDayAndMode: byDayMode,
			ByMode: reps[2], Unread: byDay.Truncated}
		if n := len(agents.Rows) - MaxModelClientRows; n > 0 {
			out.AgentRowsLeftOut = n
			agents.Rows = agents.Rows[:MaxModelClientRows]
		}
		out.ByModelAndClient = agents
		if q.ByTenant {
			out.ByTenant = reps[4]
		}
		for _, r := range byDayMode.Rows {
			out.Points = append(out.Points, view.SavingsPoint{Day: r.Day, Mode: r.Mode, Without: r.Without.Input,
				With: r.With.Input, Summarizer: r.Summarizer.Tokens(), Saved: r.SavedTokens})
		}
		return out, nil
	}
}
