// Package savingsview is the web view's reader of the savings ledger: the figures of
// compactor savings (internal/savings: ReadLimit, then Aggregate) in the form the view's
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
// tokens only). It reads each source's ledger in turn, sharing the query's limit of
// entries between them, and reports a source it could not read whole as unread.
func Reader(prices *savings.Prices) view.SavingsReader {
	return func(ctx context.Context, q view.SavingsQuery) (*view.SavingsReports, error) {
		p := savings.Period{Since: q.Since, Until: q.Until}
		var data []savings.TenantData
		var unread []string
		left := q.Limit
		for _, src := range q.Sources {
			if left <= 0 {
				unread = append(unread, src.Tenant)
				continue
			}
			td, err := savings.ReadLimit(ctx, src.Store, src.Tenant, "", p, left)
			if err != nil {
				return nil, err
			}
			left -= len(td.Entries) + td.Invalid
			data = append(data, td)
		}
		byDay := savings.Aggregate(data, prices, []string{savings.ByDay}, p)
		byDay.Truncated = append(byDay.Truncated, unread...)
		byDayMode := savings.Aggregate(data, prices, []string{savings.ByDay, savings.ByMode}, p)
		out := &view.SavingsReports{Priced: prices != nil, ByDay: byDay, ByDayAndMode: byDayMode,
			ByMode: savings.Aggregate(data, prices, []string{savings.ByMode}, p), Unread: byDay.Truncated}
		agents := savings.Aggregate(data, prices, []string{savings.ByModel, savings.ByClient}, p)
		if n := len(agents.Rows) - MaxModelClientRows; n > 0 {
			out.AgentRowsLeftOut = n
			agents.Rows = agents.Rows[:MaxModelClientRows]
		}
		out.ByModelAndClient = agents
		if q.ByTenant {
			out.ByTenant = savings.Aggregate(data, prices, []string{savings.ByTenant}, p)
		}
		for _, r := range byDayMode.Rows {
			out.Points = append(out.Points, view.SavingsPoint{Day: r.Day, Mode: r.Mode, Without: r.Without.Input,
				With: r.With.Input, Summarizer: r.Summarizer.Tokens(), Saved: r.SavedTokens})
		}
		return out, nil
	}
}
