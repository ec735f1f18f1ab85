package view_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/internal/savings/savingsview"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
)

const testPrices = `{"models": {"gpt-4.1": {"input": 2.00, "cached_input": 0.50, "cache_write": 0, "output": 8.00}}}`

// hostileModel and hostileClient are names a client chose (its model field, its
// User-Agent): the page must show them as text.
const (
	hostileModel  = `<img src=x onerror=alert(1)>`
	hostileClient = `"><script>alert("client")</script>`
)

// exchange appends one exchange's two entries to st's ledger: sent at at, done with
// usage (nil: left unsettled, no done entry).
func appendExchange(t *testing.T, st *jetstream.Store, id, conv, mode, model, client string, at time.Time, clientTok, compactedTok int64, usage *schemas.LedgerUsage) {
	t.Helper()
	sent := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: id, Phase: schemas.LedgerSent, At: at, Conversation: conv, Mode: mode,
		API: "openai", Model: model, Client: client, ClientTokens: clientTok, CompactedTokens: compactedTok}
	if err := st.Ledger().Append(ctxT(t), sent); err != nil {
		t.Fatal(err)
	}
	if usage == nil {
		return
	}
	done := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: id, Phase: schemas.LedgerDone, At: at.Add(time.Second), Conversation: conv,
		Mode: mode, API: "openai", Model: model, Client: client, Status: 200, Usage: usage}
	if err := st.Ledger().Append(ctxT(t), done); err != nil {
		t.Fatal(err)
	}
}

// seedLedger books exchanges on three UTC days (today, yesterday, three days ago) in
// both modes, one of a hostile model and client, one unsettled; it returns the days.
func seedLedger(t *testing.T, st *jetstream.Store, prefix string) []string {
	t.Helper()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	d0, d1, d3 := today.Add(time.Hour), today.AddDate(0, 0, -1).Add(5*time.Hour), today.AddDate(0, 0, -3).Add(20*time.Hour)
	appendExchange(t, st, prefix+"-exchange-00001", "c1", schemas.LedgerRewrite, "gpt-4.1", "claude-code", d3, 12000, 4000,
		&schemas.LedgerUsage{Input: 4100, CacheRead: 2000, Output: 300})
	appendExchange(t, st, prefix+"-exchange-00002", "c1", schemas.LedgerRewrite, "gpt-4.1", "claude-code", d1, 20000, 5000,
		&schemas.LedgerUsage{Input: 5000, CacheRead: 4000, Output: 250})
	appendExchange(t, st, prefix+"-exchange-00003", "c2", schemas.LedgerShadow, "gpt-4.1", "aider", d1, 30000, 9000,
		&schemas.LedgerUsage{Input: 30000, CacheRead: 10000, Output: 500})
	appendExchange(t, st, prefix+"-exchange-00004", "c3", schemas.LedgerShadow, hostileModel, hostileClient, d0, 8000, 3000,
		&schemas.LedgerUsage{Input: 8000, Output: 100})
	appendExchange(t, st, prefix+"-exchange-00005", "c2", schemas.LedgerShadow, "gpt-4.1", "aider", d0, 31000, 9500, nil)
	// c2's compaction, between its exchanges of yesterday and today: the summarizer's
	// tokens are booked on today.
	c := &schemas.Result{SchemaVersion: 1, Conversation: "c2", Generation: 1, Summary: "summary", TailStartSeq: 5, CoveredThroughSeq: 4,
		Strategy: "keep-last-n", Trigger: schemas.TriggerBudget, RequestID: "req-1", Model: "gpt-4.1", TokensBefore: 30000, TokensAfter: 9000,
		MessagesBefore: 40, MessagesAfter: 8, CreatedAt: today.Add(30 * time.Minute),
		Usage: &schemas.Usage{PromptTokens: 6000, CompletionTokens: 700, CachedTokens: 1000}}
	if _, err := st.Results().Put(ctxT(t), c, 0); err != nil {
		t.Fatal(err)
	}
	return []string{d3.Format(time.DateOnly), d1.Format(time.DateOnly), d0.Format(time.DateOnly)}
}

func pricesT(t *testing.T) *savings.Prices {
	t.Helper()
	p, err := savings.ParsePrices([]byte(testPrices))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// savingsJSON is the JSON twin of the savings page, its reports decoded as
// compactor savings encodes them.
type savingsJSON struct {
	Since            time.Time       `json:"since"`
	Until            time.Time       `json:"until"`
	Days             int             `json:"days"`
	Tenants          []string        `json:"tenants"`
	Priced           bool            `json:"priced"`
	ByDay            *savings.Report `json:"by_day"`
	ByDayAndMode     *savings.Report `json:"by_day_and_mode"`
	ByMode           *savings.Report `json:"by_mode"`
	ByModelAndClient *savings.Report `json:"by_model_and_client"`
	ByTenant         *savings.Report `json:"by_tenant"`
	Unread           []string        `json:"unread"`
	LedgerLimit      int             `json:"ledger_limit"`
}

// expected is what compactor savings reports of st's ledger over got's period.
func expected(t *testing.T, st *jetstream.Store, tenant string, got *savingsJSON, prices *savings.Prices, by ...string) *savings.Report {
	t.Helper()
	p := savings.Period{Since: got.Since, Until: got.Until}
	td, err := savings.Read(ctxT(t), st, tenant, "", p)
	if err != nil {
		t.Fatal(err)
	}
	return savings.Aggregate([]savings.TenantData{td}, prices, by, p)
}

// sameReport fails unless a and b encode alike.
func sameReport(t *testing.T, what string, got, want *savings.Report) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got  %s\n want %s", what, g, w)
	}
}

// The savings page shows, per UTC day, the figures compactor savings reports
// (savings.Aggregate by day, and by day and mode), in dollars with a price table; a
// chart with one group of bars per day with exchanges, a pair of bars per mode; and
// names from clients as text.
func TestSavingsPageMatchesTheLedger(t *testing.T) {
	prices := pricesT(t)
	cfg := tokenConfig()
	cfg.Savings = savingsview.Reader(prices)
	f := newFixture(t, cfg)
	days := seedLedger(t, f.st, "v")

	var got savingsJSON
	f.getJSON(t, "/api/savings?days=7", &got)
	if got.Days != 7 || !got.Until.Equal(time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)) || got.Until.Sub(got.Since) != 7*24*time.Hour {
		t.Errorf("period %s to %s (%d days); want the last 7 UTC days, today included", got.Since, got.Until, got.Days)
	}
	sameReport(t, "by day", got.ByDay, expected(t, f.st, "", &got, prices, savings.ByDay))
	sameReport(t, "by day and mode", got.ByDayAndMode, expected(t, f.st, "", &got, prices, savings.ByDay, savings.ByMode))
	sameReport(t, "by mode", got.ByMode, expected(t, f.st, "", &got, prices, savings.ByMode))
	if len(got.ByDay.Rows) != 3 || got.ByDay.Total.Exchanges != 5 || got.ByDay.Unsettled != 1 || got.ByDay.Total.USD == nil ||
		got.ByDay.Rows[2].Summarizer.Tokens() != 6700 {
		t.Fatalf("by day: %d rows, %d exchanges, %d unsettled, usd %v, summarizer %+v; want 3 days, 5 exchanges, 1 unsettled, dollars, 6,700 summarizer tokens today",
			len(got.ByDay.Rows), got.ByDay.Total.Exchanges, got.ByDay.Unsettled, got.ByDay.Total.USD, got.ByDay.Total.Summarizer)
	}
	for i, r := range got.ByDay.Rows {
		if r.Day != days[i] {
			t.Errorf("day row %d is %s; want %s", i, r.Day, days[i])
		}
	}
	if !got.ByDay.Total.USD.Partial || len(got.ByDay.Total.UnpricedModels) != 1 || got.ByDay.Total.UnpricedModels[0] != hostileModel {
		t.Errorf("unpriced models %q (partial %v); want the hostile model's", got.ByDay.Total.UnpricedModels, got.ByDay.Total.USD.Partial)
	}

	code, _, body := f.get(t, "/savings?days=7")
	if code != http.StatusOK {
		t.Fatalf("GET /savings: %d\n%s", code, body)
	}
	// The chart: a group per day with exchanges; in it a pair of bars (and the
	// summarizer's on top) per mode of the day.
	groups := regexp.MustCompile(`<g class="day" data-day="([0-9-]+)">`).FindAllStringSubmatch(body, -1)
	if len(groups) != len(days) {
		t.Fatalf("the chart has %d day groups; want %d:\n%s", len(groups), len(days), body)
	}
	for i, g := range groups {
		if g[1] != days[i] {
			t.Errorf("chart group %d is %s; want %s", i, g[1], days[i])
		}
	}
	for _, want := range []string{`class="bar without mode-rewrite"`, `class="bar with mode-shadow"`, `class="bar summarizer mode-shadow"`,
		`<title id="chart-title">`, `role="img"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the chart lacks %s", want)
		}
	}
	// The tables: each day's figures, as the report has them.
	for _, r := range got.ByDay.Rows {
		row := regexp.MustCompile(`(?s)<tr data-day="` + r.Day + `"><td class="day">` + r.Day + `</td>(.*?)</tr>`).FindStringSubmatch(body[strings.Index(body, `id="daytotals"`):])
		if row == nil {
			t.Fatalf("no day total row for %s", r.Day)
		}
		for _, n := range []int64{r.Exchanges, r.Without.Input, r.With.Input, r.SavedTokens} {
			if !strings.Contains(row[1], ">"+num(int(n))+"<") {
				t.Errorf("day %s: %s not in its row %s", r.Day, num(int(n)), row[1])
			}
		}
		if want := fmt.Sprintf("$%.4f", r.USD.Saved); !strings.Contains(row[1], want) {
			t.Errorf("day %s: %s not in its row %s", r.Day, want, row[1])
		}
	}
	if !strings.Contains(body, `0 invalid (left out) · 1 unsettled`) {
		t.Errorf("the counts of invalid, unsettled and dropped entries are missing:\n%s", body)
	}
	// Names from clients are text.
	for _, raw := range []string{hostileModel, hostileClient, "<script>"} {
		if strings.Contains(body, raw) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	for _, esc := range []string{html.EscapeString(hostileModel), "&lt;script&gt;alert(&#34;client&#34;)&lt;/script&gt;"} {
		if !strings.Contains(body, esc) {
			t.Errorf("the page lacks %q, escaped", esc)
		}
	}
	// The navigation links the page.
	if _, _, list := f.get(t, "/"); !strings.Contains(list, `href="/savings"`) {
		t.Errorf("the list does not link the savings page")
	}
}

// Without a price table the page is in tokens only, and says so.
func TestSavingsPageWithoutPrices(t *testing.T) {
	f := newFixture(t, tokenConfig())
	seedLedger(t, f.st, "n")
	var got savingsJSON
	f.getJSON(t, "/api/savings", &got)
	if got.Days != view.DefaultSavingsDays || got.Priced || got.ByDay.Total.USD != nil {
		t.Errorf("days %d, priced %v, usd %v; want %d days, tokens only", got.Days, got.Priced, got.ByDay.Total.USD, view.DefaultSavingsDays)
	}
	sameReport(t, "by day", got.ByDay, expected(t, f.st, "", &got, nil, savings.ByDay))
	_, _, body := f.get(t, "/savings")
	if !strings.Contains(body, "No price table (COMPACTOR_PRICES): tokens only.") || strings.Contains(body, "$ saved") {
		t.Errorf("the page does not say it is in tokens only:\n%s", body)
	}
	// A view given no reader has no savings page.
	cfg := tokenConfig()
	cfg.Savings = nil
	g := newFixtureOn(t, f.nc, f.st, cfg, testSettings(t))
	if code, _, body := g.get(t, "/api/savings"); code != http.StatusNotFound {
		t.Errorf("without a reader: %d %s; want 404", code, body)
	}
}

// The read of the ledger is bounded: past the bound the page says its figures are cut.
func TestSavingsPageSaysWhenCut(t *testing.T) {
	cfg := tokenConfig()
	cfg.MaxLedgerEntries = 4
	f := newFixture(t, cfg)
	seedLedger(t, f.st, "c")
	var got savingsJSON
	f.getJSON(t, "/api/savings", &got)
	if len(got.Unread) != 1 || got.Unread[0] != "" || got.ByDay.Total.Exchanges > 4 {
		t.Errorf("unread %q, %d exchanges; want this deployment's ledger cut at 4 entries", got.Unread, got.ByDay.Total.Exchanges)
	}
	_, _, body := f.get(t, "/savings")
	if !strings.Contains(body, `id="cut"`) || !strings.Contains(body, "this deployment held more entries than one page reads (4)") {
		t.Errorf("the page does not say it is cut:\n%s", body)
	}
}

// A period that is not one is refused before anything is read.
func TestSavingsPeriods(t *testing.T) {
	f := newFixture(t, tokenConfig())
	for _, q := range []string{"days=0", "days=367", "days=x", "days=7&since=2026-01-01", "since=2026-02-01&until=2026-01-01",
		"since=2020-01-01&until=2026-01-01", "since=yesterday", "since=7d"} {
		if code, _, body := f.get(t, "/api/savings?"+q); code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s; want 400", q, code, body)
		}
	}
	var got savingsJSON
	f.getJSON(t, "/api/savings?since=2026-01-01&until=2026-01-03", &got)
	if got.Days != 2 || got.Since.Format(time.RFC3339) != "2026-01-01T00:00:00Z" || got.Until.Format(time.RFC3339) != "2026-01-03T00:00:00Z" {
		t.Errorf("since/until: %s to %s, %d days; want 2026-01-01 to 2026-01-03, 2 days", got.Since, got.Until, got.Days)
	}
}

// A tenant's token shows its tenant's ledger only; the operator's shows each
// tenant's, and every tenant's together at /savings.
func TestSavingsPageTenantScoping(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	acmeDays := seedLedger(t, f.stores["acme"], "a")
	old := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -10).Add(3 * time.Hour)
	appendExchange(t, f.stores["globex"], "g-exchange-00001", "c1", schemas.LedgerRewrite, "gpt-4.1", "globex-agent", old, 50000, 7000,
		&schemas.LedgerUsage{Input: 7000, Output: 10})
	globexDay := old.Format(time.DateOnly)

	decode := func(a answer) *savingsJSON {
		t.Helper()
		if a.code != http.StatusOK {
			t.Fatalf("%d %s", a.code, a.body)
		}
		var s savingsJSON
		if err := json.Unmarshal([]byte(a.body), &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	dayset := func(s *savingsJSON) string {
		var ds []string
		for _, r := range s.ByDay.Rows {
			ds = append(ds, r.Day)
		}
		return strings.Join(ds, ",")
	}

	acme := decode(f.get(t, "/t/acme/api/savings", acmeToken))
	if got, want := dayset(acme), strings.Join(acmeDays, ","); got != want || acme.ByDay.Total.Exchanges != 5 {
		t.Errorf("acme's own page: days %s, %d exchanges; want %s, 5", got, acme.ByDay.Total.Exchanges, want)
	}
	sameReport(t, "acme by day", acme.ByDay, expected(t, f.stores["acme"], "acme", acme, nil, savings.ByDay))
	page := f.get(t, "/t/acme/savings", acmeToken)
	if page.code != http.StatusOK || strings.Contains(page.body, globexDay) || strings.Contains(page.body, "globex-agent") {
		t.Errorf("acme's page shows globex's ledger (%d):\n%s", page.code, page.body)
	}
	if !strings.Contains(page.body, `href="/t/acme/savings"`) || !strings.Contains(page.body, `href="/t/acme/api/savings"`) {
		t.Errorf("acme's page does not link under its prefix:\n%s", page.body)
	}
	for _, path := range []string{"/t/globex/savings", "/t/globex/api/savings", "/savings", "/api/savings"} {
		if a := f.get(t, path, acmeToken); a.code != http.StatusUnauthorized || strings.Contains(a.body, globexDay) {
			t.Errorf("acme's token on %s: %d; want 401\n%s", path, a.code, a.body)
		}
	}

	globex := decode(f.get(t, "/t/globex/api/savings", operatorToken))
	if got := dayset(globex); got != globexDay || globex.ByDay.Total.SavedTokens != 50000-7000 {
		t.Errorf("globex's page for the operator: days %s, saved %d; want %s, %d", got, globex.ByDay.Total.SavedTokens, globexDay, 50000-7000)
	}
	all := decode(f.get(t, "/api/savings", operatorToken))
	if all.ByDay.Total.Exchanges != 6 || len(all.ByTenant.Rows) != 2 || all.ByTenant.Rows[0].Tenant != "acme" || all.ByTenant.Rows[1].Tenant != "globex" {
		t.Errorf("the operator's page: %d exchanges, by tenant %+v; want 6, acme and globex", all.ByDay.Total.Exchanges, all.ByTenant.Rows)
	}
	if got := dayset(all); !strings.Contains(got, globexDay) || !strings.Contains(got, acmeDays[0]) {
		t.Errorf("the operator's page: days %s; want acme's and globex's", got)
	}
	if page := f.get(t, "/savings", operatorToken); page.code != http.StatusOK || !strings.Contains(page.body, `href="/t/globex/savings"`) {
		t.Errorf("the operator's page does not link each tenant's (%d):\n%s", page.code, page.body)
	}
}
