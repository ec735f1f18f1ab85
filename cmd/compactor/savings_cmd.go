package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/internal/tenants"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// savingsReadTimeout bounds the reads of one store's ledger and compactions.
const savingsReadTimeout = 2 * time.Minute

var savingsCommand = &command{
	name: "savings", conn: fullConn, interruptible: true,
	summary: "what Compactor saved (or cost) on the proxy's traffic: tokens and dollars with and without it, cache effects and the summarizer included",
	about: `Reads the savings ledger the proxy writes (one entry as each request goes upstream,
one once its reply is whole) and prints, per group, the input tokens the model was sent
without Compactor and with it (reported by the upstream for the request that went, modelled
from the proxy's estimates for the other: rewrite and shadow mode alike), their prompt-cache
split, the cache writes compactions caused, the summarizer's tokens and the net saved,
in tokens and, with a price table (--prices or COMPACTOR_PRICES), in US dollars. A model
without a price is counted in tokens and named, never priced at 0. docs/savings.md defines
every figure.

--by groups by tenant, conversation, model, client, day (UTC) and mode, several
comma-separated or --by repeated (--by model --by client is --by model,client); none:
the total alone. --since and --until bound the period by each
exchange's time (RFC 3339, a date in UTC, or a duration back from now: 24h, 7d). --tenants FILE reads
every tenant's ledger of that tenants file (run in Compactor's own account); without it,
the deployment's own (or COMPACTOR_TENANT's). A last line counts the entries left out as
invalid, the exchanges without a reply yet (unsettled: counted from their estimates) and
the replies whose request was not found (dropped). --json prints one object, --csv one row
per group and a total row. Exit 1 when a tenant's ledger could not be read.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		var by listValue
		fs.add(&by, "by", "", "DIMS", "group by these, comma-separated or repeated: tenant, conversation, model, client, day, mode", "")
		since := fs.String("since", "", "TIME", "only exchanges from this time: RFC 3339, a date (UTC), or a duration back from now (24h, 7d)")
		until := fs.String("until", "", "TIME", "only exchanges up to this time: RFC 3339, a date (UTC), or a duration back from now")
		conv := fs.String("conversation", "", "ID", "only this conversation's exchanges")
		tenantsFile := fs.String("tenants", "", "FILE", "read every tenant's ledger of this tenants file (docs/tenants.md)")
		pricesFile := fs.String("prices", "", "FILE", "the price table (default COMPACTOR_PRICES; docs/savings.md)")
		asCSV := fs.Bool("csv", "", "print CSV: a header, one row per group, a total row")
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("savings takes no arguments, got %s", strings.Join(quoteAll(c.args), " "))
			}
			if *asJSON && *asCSV {
				return usagef("--json and --csv: choose one")
			}
			// --by model --by client is --by model,client.
			dims, err := savings.ParseBy(strings.Join(by, ","))
			if err != nil {
				return usagef("--by: %v", err)
			}
			var p savings.Period
			now := time.Now()
			if *since != "" {
				if p.Since, err = savings.ParseTime(*since, now); err != nil {
					return usagef("--since %v", err)
				}
			}
			if *until != "" {
				if p.Until, err = savings.ParseTime(*until, now); err != nil {
					return usagef("--until %v", err)
				}
			}
			if !p.Since.IsZero() && !p.Until.IsZero() && p.Until.Before(p.Since) {
				return usagef("--until %s is before --since %s", p.Until.Format(time.RFC3339), p.Since.Format(time.RFC3339))
			}
			if *conv != "" {
				if err := schemas.ValidateConversationID(*conv); err != nil {
					return usagef("--conversation: %v", err)
				}
			}
			env, err := c.loadEnv()
			if err != nil {
				return err
			}
			var prices *savings.Prices
			if path := cmp.Or(*pricesFile, env.Prices); path != "" {
				if prices, err = savings.ReadPrices(path); err != nil {
					return newError(errConfig, err, "price table: %v", err)
				}
			}
			var file *tenants.File
			if *tenantsFile != "" {
				if file, err = tenants.Read(*tenantsFile); err != nil {
					return newError(errConfig, err, "--tenants: %v", err)
				}
			}
			nc, conn, err := c.dial(env)
			if err != nil {
				return err
			}
			defer nc.Close()
			c.watchRefusals(nc)
			if c.conn != nil && c.conn.verbose != nil && *c.conn.verbose {
				fmt.Fprintf(c.std.err, "note: reading the ledger of the server at %s\n", nc.ConnectedUrlRedacted())
			}
			// Each ledger is read once, its figures summed as its entries come.
			a := savings.NewAggregator(prices, p, dims)
			var failed []string
			if file == nil {
				st, err := jetstream.Open(ctx, nc, env.jetstream())
				if err != nil {
					return openError(conn, env, err)
				}
				if err := readSavings(ctx, a, st, env.Tenant, *conv); err != nil {
					return err
				}
			} else {
				base := env.settings().JetStream()
				for _, name := range file.Names() {
					err := readTenantSavings(ctx, a, nc, base, name, file.Tenants[name], *conv)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if err != nil {
						failed = append(failed, fmt.Sprintf("%s: %v", name, err))
					}
				}
			}
			rep := a.Reports()[0]
			if *conv != "" && rep.Total.Exchanges == 0 && rep.Total.Summarizer.Compactions == 0 {
				fmt.Fprintf(c.std.err, "note: the ledger holds no exchange of %s in the period (a conversation never sent through the proxy, forgotten, or another server's: -v names the server read)\n", *conv)
			}
			switch {
			case *asJSON:
				err = writeJSON(c.std.out, rep)
			case *asCSV:
				if err = writeSavingsCSV(c.std.out, rep); err == nil {
					err = writeSavingsNotes(c.std.err, rep)
				}
			default:
				if err = writeSavingsTable(c.std.out, rep); err == nil {
					err = writeSavingsNotes(c.std.out, rep)
				}
			}
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				return fmt.Errorf("the ledger of %d tenants could not be read (left out above): %s", len(failed), strings.Join(failed, "; "))
			}
			return nil
		}
	},
}

// readSavings reads one store's ledger and compactions into a, bounded by
// savingsReadTimeout; a read that fails adds nothing to a.
func readSavings(ctx context.Context, a *savings.Aggregator, st *jetstream.Store, tenant, conv string) error {
	ctx, cancel := context.WithTimeout(ctx, savingsReadTimeout)
	defer cancel()
	if _, err := a.Read(ctx, st, tenant, conv, 0); err != nil {
		return fmt.Errorf("read the savings ledger: %w", err)
	}
	return nil
}

func readTenantSavings(ctx context.Context, a *savings.Aggregator, nc *nats.Conn, base jetstream.Config, name string, t tenants.Tenant, conv string) error {
	cfg, err := t.JetStream(base, name)
	if err != nil {
		return err
	}
	st, err := jetstream.Open(ctx, nc, cfg)
	if errors.Is(err, natsjs.ErrStreamNotFound) || errors.Is(err, natsjs.ErrBucketNotFound) {
		return fmt.Errorf("not provisioned (run compactor provision as admin): %w", err)
	}
	if err != nil {
		return err
	}
	return readSavings(ctx, a, st, name, conv)
}

// dimHeader is a dimension's column heading.
func dimHeader(d string) string { return strings.ToUpper(d) }

// dimCell is a row's value of a dimension as printed: "-" for none.
func dimCell(r *savings.Row, d string) string {
	if v := r.Key(d); v != "" {
		return v
	}
	return "-"
}

// usd prints a row's dollar figure: "-" when nothing of the row is priced, a "*" when
// only part of it is.
func usd(r *savings.Row, v func(*savings.Money) float64) string {
	if r.USD == nil {
		return "-"
	}
	s := strconv.FormatFloat(v(r.USD), 'f', 4, 64)
	if r.USD.Partial {
		s += "*"
	}
	return s
}

// percent is part of whole, as a percentage ("-" of nothing).
func percent(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(whole), 'f', 1, 64) + "%"
}

// writeSavingsTable prints one line per group and a total line.
func writeSavingsTable(w io.Writer, rep *savings.Report) error {
	head := []string{}
	for _, d := range rep.By {
		head = append(head, dimHeader(d))
	}
	head = append(head, "EXCHANGES", "WITHOUT", "W/O-CACHED", "WITH", "CACHED", "CACHE-WRITES", "SWAP-WRITES", "SUMMARIZER", "SAVED", "SAVED%")
	if rep.Priced {
		head = append(head, "USD-WITHOUT", "USD-WITH", "USD-SUMMARIZER", "USD-SAVED")
	}
	table := [][]string{head}
	line := func(r *savings.Row, dims []string) []string {
		row := dims
		row = append(row, thousands(r.Exchanges), thousands(r.Without.Input), thousands(r.Without.CacheRead),
			thousands(r.With.Input), thousands(r.With.CacheRead), thousands(r.With.CacheWrite), thousands(r.SwapCacheWrite),
			thousands(r.Summarizer.Tokens()), thousands(r.SavedTokens), percent(r.SavedTokens, r.Without.Input))
		if rep.Priced {
			row = append(row, usd(r, func(m *savings.Money) float64 { return m.Without }), usd(r, func(m *savings.Money) float64 { return m.With }),
				usd(r, func(m *savings.Money) float64 { return m.Summarizer }), usd(r, func(m *savings.Money) float64 { return m.Saved }))
		}
		return row
	}
	for i := range rep.Rows {
		r := &rep.Rows[i]
		var dims []string
		for _, d := range rep.By {
			dims = append(dims, dimCell(r, d))
		}
		table = append(table, line(r, dims))
	}
	if len(rep.By) > 0 {
		dims := make([]string, len(rep.By))
		dims[0] = "TOTAL"
		for i := 1; i < len(dims); i++ {
			dims[i] = " "
		}
		table = append(table, line(&rep.Total, dims))
	} else if len(rep.Rows) == 0 {
		table = append(table, line(&rep.Total, nil))
	}
	return writeTable(w, table)
}

// writeSavingsNotes prints what the figures leave out: the entries that were invalid,
// unsettled or dropped, the unpriced models, the compactions whose tokens are unknown.
func writeSavingsNotes(w io.Writer, rep *savings.Report) error {
	t := rep.Total
	fmt.Fprintf(w, "%s exchanges; ledger entries: %s invalid (left out), %s unsettled (no reply yet: counted from their estimates), %s dropped (a reply whose request was not found)\n",
		thousands(t.Exchanges), thousands(rep.Invalid), thousands(rep.Unsettled), thousands(rep.Dropped))
	if t.Failed > 0 || t.Answered > 0 {
		fmt.Fprintf(w, "%s refused by the upstream (no tokens counted), %s answered by Compactor itself (nothing sent)\n",
			thousands(t.Failed), thousands(t.Answered))
	}
	if t.Summarizer.Unknown > 0 {
		fmt.Fprintf(w, "%s of %s compactions no longer kept in the results bucket: their summarizer tokens are not counted\n",
			thousands(t.Summarizer.Unknown), thousands(t.Summarizer.Compactions))
	}
	if c := t.Check; c.Estimated > 0 {
		fmt.Fprintf(w, "estimates: the upstreams reported %s input tokens where the proxy estimated %s (%.2f×); each exchange's modelled side is scaled by its own such ratio\n",
			thousands(c.Reported), thousands(c.Estimated), float64(c.Reported)/float64(c.Estimated))
	}
	switch {
	case !rep.Priced:
		fmt.Fprintln(w, "no price table (--prices or COMPACTOR_PRICES): tokens only")
	case t.Unpriced > 0:
		names := strings.Join(t.UnpricedModels, ", ")
		if t.UnpricedModelsOmitted > 0 {
			names += fmt.Sprintf(" and %d more", t.UnpricedModelsOmitted)
		}
		fmt.Fprintf(w, "* partial: %s exchanges or compactions of models without a price are in the tokens, not the dollars: %s\n",
			thousands(t.Unpriced), names)
	}
	if len(rep.Truncated) > 0 {
		fmt.Fprintf(w, "the ledger of %s held more entries than one read takes (%s): narrow the period\n",
			strings.Join(tenantNames(rep.Truncated), ", "), thousands(jetstream.MaxLedgerRead))
	}
	return nil
}

func tenantNames(ts []string) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = cmp.Or(t, "(this deployment)")
	}
	return out
}

// savingsCSVHeader is the CSV's columns after "row" and the dimensions.
var savingsCSVHeader = []string{"exchanges", "unsettled", "estimated", "failed", "answered", "swaps", "reported_input", "estimated_input",
	"without_input", "without_cache_read", "without_cache_write", "without_uncached", "without_output",
	"with_input", "with_cache_read", "with_cache_write", "with_uncached", "with_output",
	"swap_cache_write", "summarizer_compactions", "summarizer_unknown", "summarizer_input", "summarizer_cached_input",
	"summarizer_output", "saved_tokens", "usd_without", "usd_with", "usd_summarizer", "usd_saved", "usd_partial", "unpriced"}

// writeSavingsCSV prints a header, one row per group ("group") and the total ("total").
func writeSavingsCSV(w io.Writer, rep *savings.Report) error {
	cw := csv.NewWriter(w)
	head := append([]string{"row"}, rep.By...)
	if err := cw.Write(append(head, savingsCSVHeader...)); err != nil {
		return err
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	record := func(kind string, r *savings.Row) []string {
		rec := []string{kind}
		for _, d := range rep.By {
			if kind == "total" {
				rec = append(rec, "")
			} else {
				rec = append(rec, csvSafe(r.Key(d)))
			}
		}
		rec = append(rec, n(r.Exchanges), n(r.Unsettled), n(r.Estimated), n(r.Failed), n(r.Answered), n(r.Swaps),
			n(r.Check.Reported), n(r.Check.Estimated), n(r.Without.Input), n(r.Without.CacheRead), n(r.Without.CacheWrite), n(r.Without.Uncached), n(r.Without.Output),
			n(r.With.Input), n(r.With.CacheRead), n(r.With.CacheWrite), n(r.With.Uncached), n(r.With.Output),
			n(r.SwapCacheWrite), n(r.Summarizer.Compactions), n(r.Summarizer.Unknown), n(r.Summarizer.Input),
			n(r.Summarizer.CachedInput), n(r.Summarizer.Output), n(r.SavedTokens))
		if r.USD == nil {
			rec = append(rec, "", "", "", "", "")
		} else {
			f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
			rec = append(rec, f(r.USD.Without), f(r.USD.With), f(r.USD.Summarizer), f(r.USD.Saved), strconv.FormatBool(r.USD.Partial))
		}
		return append(rec, n(r.Unpriced))
	}
	for i := range rep.Rows {
		if err := cw.Write(record("group", &rep.Rows[i])); err != nil {
			return err
		}
	}
	if err := cw.Write(record("total", &rep.Total)); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// csvSafe is a cell a spreadsheet reads as text: a model or client name comes from a
// client, and one that starts like a formula (=, +, -, @, a tab or a carriage return)
// gets a leading apostrophe. A number (-12) is left as it is.
func csvSafe(s string) string {
	if s == "" || !strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return s
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return s
	}
	return "'" + s
}
