package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

const savingsTestPrices = `{
  "models": {
    "gpt-test": {"input": 2, "cached_input": 0.5, "cache_write": 0, "output": 8},
    "claude-test*": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15},
    "sum-mini": {"input": 1, "cached_input": 0.25, "cache_write": 0, "output": 4}
  }
}`

// savingsLedger is the entries of a hand-built ledger whose figures the tests work out
// by hand, at times from base on.
type savingsLedger struct {
	base time.Time
}

func (l savingsLedger) sent(n int, id, conv, mode, model, client string, clientTok, clientPre, compTok, compPre int64, swap bool) *schemas.LedgerEntry {
	return &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: id + "-0123456789abcdef", Phase: schemas.LedgerSent,
		At: l.base.Add(time.Duration(n) * time.Minute), Conversation: conv, Mode: mode, API: "openai", Model: model, Client: client,
		ClientTokens: clientTok, ClientPrefixTokens: clientPre, CompactedTokens: compTok, CompactedPrefixTokens: compPre, Swap: swap}
}

func ledgerDone(s *schemas.LedgerEntry, u *schemas.LedgerUsage) *schemas.LedgerEntry {
	d := *s
	d.Phase, d.At, d.Status, d.Usage = schemas.LedgerDone, s.At.Add(5*time.Second), 200, u
	return &d
}

func appendLedger(t *testing.T, st *jetstream.Store, entries ...*schemas.LedgerEntry) {
	t.Helper()
	for _, e := range entries {
		if err := st.Ledger().Append(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
}

// E1 rewrite gpt-test codex c1: client 10000 (prefix 8000), compacted 4000 (3000);
// reported input 4200, 3000 read, output 100.
func (l savingsLedger) e1() []*schemas.LedgerEntry {
	s := l.sent(0, "e1", "c1", schemas.LedgerRewrite, "gpt-test", "codex", 10000, 8000, 4000, 3000, false)
	return []*schemas.LedgerEntry{s, ledgerDone(s, &schemas.LedgerUsage{Input: 4200, CacheRead: 3000, Output: 100})}
}

// E2 shadow claude-test-1 claude-cli c2, a swap: client 20000 (18000), compacted 6000
// (0); reported input 21000, 18000 read, 2500 written, output 300.
func (l savingsLedger) e2() []*schemas.LedgerEntry {
	s := l.sent(1, "e2", "c2", schemas.LedgerShadow, "claude-test-1", "claude-cli", 20000, 18000, 6000, 0, true)
	return []*schemas.LedgerEntry{s, ledgerDone(s, &schemas.LedgerUsage{Input: 21000, CacheRead: 18000, CacheWrite: 2500, Output: 300})}
}

// E3 rewrite gpt-test codex c1, unsettled: client 5000, compacted 2000 (1000).
func (l savingsLedger) e3() []*schemas.LedgerEntry {
	return []*schemas.LedgerEntry{l.sent(3, "e3", "c1", schemas.LedgerRewrite, "gpt-test", "codex", 5000, 0, 2000, 1000, false)}
}

// E4 rewrite mystery (no price), no client, c3: 3000 and 3000; reported 2900, output 50.
func (l savingsLedger) e4() []*schemas.LedgerEntry {
	s := l.sent(4, "e4", "c3", schemas.LedgerRewrite, "mystery", "", 3000, 0, 3000, 0, false)
	return []*schemas.LedgerEntry{s, ledgerDone(s, &schemas.LedgerUsage{Input: 2900, Output: 50})}
}

// orphan is a done on c1 whose sent is not in the ledger.
func (l savingsLedger) orphan() *schemas.LedgerEntry {
	return ledgerDone(l.sent(5, "e0", "c1", schemas.LedgerRewrite, "gpt-test", "codex", 1, 0, 1, 0, false), &schemas.LedgerUsage{Input: 1})
}

// compactions writes c1's generation 1 by sum-mini (prompt 6000, 1000 cached,
// completion 500) at base+90s, a completed event of c2's generation 7 at base+100s
// whose value is no longer kept, and c2's generation 8 at base+110s, an extractive
// fallback (no LLM call: no usage).
func (l savingsLedger) compactions(t *testing.T, st *jetstream.Store) {
	t.Helper()
	r := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1, Summary: "s", TailStartSeq: 1, FirstSeq: 1,
		CreatedAt: l.base.Add(90 * time.Second), Model: "sum-mini",
		Usage: &schemas.Usage{PromptTokens: 6000, CachedTokens: 1000, CompletionTokens: 500}}
	if _, err := st.Results().Put(t.Context(), r, 0); err != nil {
		t.Fatal(err)
	}
	r8 := &schemas.Result{SchemaVersion: 1, Conversation: "c2", Generation: 8, Summary: "s", TailStartSeq: 1, FirstSeq: 1,
		CreatedAt: l.base.Add(110 * time.Second), Fallback: true}
	if _, err := st.Results().Put(t.Context(), r8, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Events().Publish(t.Context(), schemas.Event{Type: schemas.EventCompleted, Conversation: "c2", RequestID: "r7",
		Generation: 7, At: l.base.Add(100 * time.Second)}); err != nil {
		t.Fatal(err)
	}
}

func savingsReport(t *testing.T, args ...string) *savings.Report {
	t.Helper()
	out, errOut, err := cli(t, "", append([]string{"savings", "--json"}, args...)...)
	if err != nil {
		t.Fatalf("savings --json %v: %v\n%s", args, err, errOut)
	}
	var rep savings.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("savings --json printed %s: %v", out, err)
	}
	return &rep
}

func nearUSD(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// compactor savings over a real ledger: the hand-worked figures in JSON, the same in
// CSV and in the table, the counts of what was left out, and the period's bounds.
func TestSavingsCommand(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	// The proxy writes an entry as it happens: the stream's time and the entry's are
	// close (a read's bounds are the stream's times, widened by savings.Grace).
	l := savingsLedger{base: time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)}
	appendLedger(t, st, l.e1()...)
	appendLedger(t, st, l.e2()...)
	appendLedger(t, st, l.e3()...)
	appendLedger(t, st, l.e4()...)
	appendLedger(t, st, l.orphan())
	if _, err := nc.Request("ledger.c1", []byte("not json"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	l.compactions(t, st)
	prices := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(prices, []byte(savingsTestPrices), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_PRICES", prices)

	rep := savingsReport(t, "--by", "model")
	tot := rep.Total
	// The modelled side of a reported exchange is scaled by the reported side's
	// reported ÷ estimated (E1 and E2 1.05, E4 29/30). Without 10500 + 21000 + 5000 +
	// 2900; with 4200 + 6300 (modelled, all written: claude-test* charges writes) + 2000
	// + 2900; summarizer 6000 + 500.
	if tot.Without.Input != 39400 || tot.With.Input != 15400 || tot.Summarizer.Tokens() != 6500 || tot.SavedTokens != 17500 {
		t.Errorf("tokens: without %d, with %d, summarizer %d, saved %d; want 39400, 15400, 6500, 17500",
			tot.Without.Input, tot.With.Input, tot.Summarizer.Tokens(), tot.SavedTokens)
	}
	if tot.Without.CacheRead != 26400 || tot.Without.CacheWrite != 2500 || tot.With.CacheRead != 4000 || tot.With.CacheWrite != 6300 || tot.SwapCacheWrite != 6300 {
		t.Errorf("cache: without %+v, with %+v, swap writes %d", tot.Without, tot.With, tot.SwapCacheWrite)
	}
	// c2's generations 1 to 6, which neither a value nor an event names any more, are
	// unknown too: the period (all time) reaches past the events' week.
	if tot.Exchanges != 4 || rep.Unsettled != 1 || rep.Dropped != 1 || rep.Invalid != 1 || tot.Summarizer.Unknown != 7 || tot.Summarizer.Compactions != 9 {
		t.Errorf("counts: %d exchanges, %d unsettled, %d dropped, %d invalid, %d of %d compactions unknown; want 4, 1, 1, 1, 7 of 9",
			tot.Exchanges, rep.Unsettled, rep.Dropped, rep.Invalid, tot.Summarizer.Unknown, tot.Summarizer.Compactions)
	}
	// Dollars: without 9200 + 20775 + 10000, with 4700 + 28125 + 2500, summarizer 7250,
	// per million tokens; mystery unpriced.
	if m := tot.USD; m == nil || !nearUSD(m.Without, 0.039975) || !nearUSD(m.With, 0.035325) || !nearUSD(m.Summarizer, 0.00725) ||
		!nearUSD(m.Saved, -0.0026) || !m.Partial || tot.Unpriced != 1 {
		t.Errorf("dollars: %+v, unpriced %d; want 0.039975, 0.035325, 0.00725, -0.0026, partial, 1", tot.USD, tot.Unpriced)
	}
	if len(rep.Rows) != 3 || rep.Rows[2].Model != "mystery" || rep.Rows[2].USD != nil || rep.Rows[2].SavedTokens != 0 {
		t.Fatalf("rows by model: %+v", rep.Rows)
	}

	// CSV: the same figures, row by row and in its total row.
	out, errOut, err := cli(t, "", "savings", "--by", "model", "--csv")
	if err != nil {
		t.Fatalf("savings --csv: %v\n%s", err, errOut)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("savings --csv printed %s: %v", out, err)
	}
	if len(recs) != 5 || recs[0][0] != "row" || recs[0][1] != "model" || recs[4][0] != "total" {
		t.Fatalf("CSV: %q", recs)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for i, r := range append(append([]savings.Row{}, rep.Rows...), tot) {
		rec := recs[i+1]
		if i < 3 && rec[1] != r.Model {
			t.Errorf("CSV row %d: model %q; want %q", i, rec[1], r.Model)
		}
		for name, want := range map[string]int64{"without_input": r.Without.Input, "with_input": r.With.Input,
			"saved_tokens": r.SavedTokens, "with_cache_write": r.With.CacheWrite, "summarizer_input": r.Summarizer.Input,
			"exchanges": r.Exchanges, "unpriced": r.Unpriced} {
			if got, _ := strconv.ParseInt(rec[col[name]], 10, 64); got != want {
				t.Errorf("CSV row %d %s: %q; want %d", i, name, rec[col[name]], want)
			}
		}
		if r.USD == nil {
			if rec[col["usd_saved"]] != "" {
				t.Errorf("CSV row %d: usd_saved %q for an unpriced row", i, rec[col["usd_saved"]])
			}
		} else if got, _ := strconv.ParseFloat(rec[col["usd_saved"]], 64); !nearUSD(got, r.USD.Saved) {
			t.Errorf("CSV row %d usd_saved: %q; want %v", i, rec[col["usd_saved"]], r.USD.Saved)
		}
	}
	if !strings.Contains(errOut, "1 invalid") || !strings.Contains(errOut, "1 dropped") {
		t.Errorf("savings --csv: stderr %q; want the counts of what was left out", errOut)
	}

	// The table: one line per model and a total, with the JSON's figures, and the
	// counts of what was left out.
	out, errOut, err = cli(t, "", "savings", "--by", "model")
	if err != nil {
		t.Fatalf("savings: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := func(prefix string) []string {
		for _, ln := range lines {
			if f := strings.Fields(ln); len(f) > 0 && f[0] == prefix {
				return f
			}
		}
		t.Fatalf("no line for %s in\n%s", prefix, out)
		return nil
	}
	head := strings.Fields(lines[0])
	cell := func(f []string, name string) string {
		i := slices.Index(head, name)
		if i < 0 || len(f) != len(head) {
			t.Fatalf("no column %s in %q, or a line %q of another width", name, head, f)
		}
		return strings.ReplaceAll(f[i], ",", "")
	}
	for _, r := range append(append([]savings.Row{}, rep.Rows...), tot) {
		name := cmp.Or(r.Model, "TOTAL")
		f := fields(name)
		for col, want := range map[string]int64{"SAVED": r.SavedTokens, "WITHOUT": r.Without.Input, "WITH": r.With.Input,
			"CACHE-WRITES": r.With.CacheWrite, "SWAP-WRITES": r.SwapCacheWrite, "SUMMARIZER": r.Summarizer.Tokens(), "EXCHANGES": r.Exchanges} {
			if got := cell(f, col); got != strconv.FormatInt(want, 10) {
				t.Errorf("table line %s: %s %q; want %d", name, col, got, want)
			}
		}
		wantUSD := "-"
		if r.USD != nil {
			wantUSD = strconv.FormatFloat(r.USD.Saved, 'f', 4, 64)
			if r.USD.Partial {
				wantUSD += "*"
			}
		}
		if got := cell(f, "USD-SAVED"); got != wantUSD {
			t.Errorf("table line %s: USD-SAVED %q; want %q", name, got, wantUSD)
		}
	}
	if got := cell(fields("TOTAL"), "USD-SAVED"); got != "-0.0026*" {
		t.Errorf("table total: USD-SAVED %q; want -0.0026* (partial)", got)
	}
	for _, want := range []string{"1 invalid", "1 unsettled", "1 dropped", "partial: 1 exchanges or compactions of models without a price", "mystery",
		"7 of 9 compactions no longer kept", "reported 28,100 input tokens where the proxy estimated 27,000 (1.04×)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}

	// The period: from base+150s, E3 and E4 only (5000-2000 + 2900-2900), the orphan
	// done at base+5m dropped; up to base+150s, E1 and E2 and the three compactions
	// (6300 + 14700 - 6500), the orphan outside.
	mid := l.base.Add(150 * time.Second).Format(time.RFC3339)
	late := savingsReport(t, "--since", mid)
	if late.Total.Exchanges != 2 || late.Total.SavedTokens != 3000 || late.Dropped != 1 || late.Total.Summarizer.Compactions != 0 {
		t.Errorf("--since %s: %d exchanges, saved %d, dropped %d, %d compactions; want 2, 3000, 1, 0",
			mid, late.Total.Exchanges, late.Total.SavedTokens, late.Dropped, late.Total.Summarizer.Compactions)
	}
	early := savingsReport(t, "--until", mid)
	if early.Total.Exchanges != 2 || early.Total.SavedTokens != 14500 || early.Dropped != 0 || early.Total.Summarizer.Compactions != 9 {
		t.Errorf("--until %s: %d exchanges, saved %d, dropped %d, %d compactions; want 2, 14500, 0, 9 (c2's first 6 generations, unknown, came before its 8th)",
			mid, early.Total.Exchanges, early.Total.SavedTokens, early.Dropped, early.Total.Summarizer.Compactions)
	}
	if r := savingsReport(t, "--since", "7d"); r.Total.Exchanges != 4 {
		t.Errorf("--since 7d: %d exchanges; want 4", r.Total.Exchanges)
	}
	if r := savingsReport(t, "--since", "2m"); r.Total.Exchanges != 0 || r.Dropped != 0 || r.Total.Summarizer.Compactions != 0 {
		t.Errorf("--since 2m (the newest entry is 5m old): %+v", r.Total)
	}
	// One conversation: c1's E1 and E3, and its compaction.
	if r := savingsReport(t, "--conversation", "c1"); r.Total.Exchanges != 2 || r.Total.SavedTokens != 10500+5000-4200-2000-6500 || r.Dropped != 1 {
		t.Errorf("--conversation c1: %d exchanges, saved %d, dropped %d; want 2, 2800, 1", r.Total.Exchanges, r.Total.SavedTokens, r.Dropped)
	}
	// Without a price table: tokens only, said so; the modelled side writes nothing.
	t.Setenv("COMPACTOR_PRICES", "")
	out, _, err = cli(t, "", "savings")
	if err != nil || !strings.Contains(out, "no price table") || strings.Contains(out, "$") {
		t.Errorf("savings without prices: %v\n%s", err, out)
	}
	if r := savingsReport(t); r.Priced || r.Total.USD != nil || r.Total.With.CacheWrite != 0 || r.Total.SavedTokens != 17500 {
		t.Errorf("savings --json without prices: %+v", r.Total)
	}
}

// The command line's mistakes are usage errors (exit 2) naming the flag; a price table
// that does not validate is a configuration error naming the field.
func TestSavingsCommandErrors(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	jstest.Provision(t, jstest.Conn(t, srv))
	bad := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(bad, []byte(`{"models": {"m": {"input": -1, "cached_input": 0, "cache_write": 0, "output": 1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	unknown := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(unknown, []byte(`{"models": {"m": {"input": 1, "cached": 0, "cache_write": 0, "output": 1}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--json", "--csv"}, "choose one"},
		{[]string{"--by", "agent"}, `--by: unknown dimension "agent"`},
		{[]string{"--since", "yesterday"}, `--since "yesterday"`},
		{[]string{"--since", "1h", "--until", "2h"}, "is before --since"},
		{[]string{"--conversation", "a.b"}, "--conversation"},
		{[]string{"extra"}, "takes no arguments"},
		{[]string{"--prices", bad}, "input: -1"},
		{[]string{"--prices", unknown}, `unknown field "cached"`},
		{[]string{"--prices", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{[]string{"--tenants", filepath.Join(t.TempDir(), "none.json")}, "--tenants"},
	} {
		_, _, err := cli(t, "", append([]string{"savings"}, tt.args...)...)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("savings %v: %v (exit %d); want exit 2 saying %q", tt.args, err, exitCode(err), tt.want)
		}
	}
}

// --tenants reads every tenant's ledger: by tenant, each its own exchanges; a tenant
// not provisioned is named, the others still printed, exit 1.
func TestSavingsCommandTenants(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	file := filepath.Join(t.TempDir(), "tenants.json")
	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {}, "globex": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TENANTS_FILE", file)
	if _, errOut, err := cli(t, "", "provision"); err != nil {
		t.Fatalf("provision: %v\n%s", err, errOut)
	}
	t.Setenv("COMPACTOR_TENANTS_FILE", "")
	nc := jstest.Conn(t, srv)
	l := savingsLedger{base: time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)}
	for tenant, entries := range map[string][]*schemas.LedgerEntry{"acme": l.e1(), "globex": append(l.e2(), l.e4()...)} {
		cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := jetstream.Open(ctx, nc, cfg)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		appendLedger(t, st, entries...)
	}
	rep := savingsReport(t, "--tenants", file, "--by", "tenant,mode")
	// acme: E1, 10500 - 4200; globex: E2 shadow 21000 - 6300, E4 rewrite 2900 - 2900
	// (each modelled side scaled by its exchange's reported ÷ estimated).
	type key struct{ tenant, mode string }
	got := map[key]int64{}
	for _, r := range rep.Rows {
		got[key{r.Tenant, r.Mode}] = r.SavedTokens
	}
	want := map[key]int64{{"acme", "rewrite"}: 6300, {"globex", "shadow"}: 14700, {"globex", "rewrite"}: 0}
	if len(got) != len(want) || rep.Total.SavedTokens != 21000 {
		t.Fatalf("by tenant and mode: %v, total %d; want %v, 21000", got, rep.Total.SavedTokens, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%v: saved %d; want %d", k, got[k], v)
		}
	}
	// The deployment's own ledger holds none of it.
	jstest.Provision(t, nc)
	if r := savingsReport(t); r.Total.Exchanges != 0 {
		t.Errorf("the deployment's own ledger: %d exchanges; want 0", r.Total.Exchanges)
	}

	if err := os.WriteFile(file, []byte(`{"tenants": {"acme": {}, "globex": {}, "initech": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o, errOut, err := cli(t, "", "savings", "--tenants", file, "--by", "tenant")
	out.WriteString(o)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "initech: not provisioned") {
		t.Errorf("a tenant not provisioned: %v (exit %d)\n%s", err, exitCode(err), errOut)
	}
	if !strings.Contains(out.String(), "acme") || !strings.Contains(out.String(), "globex") || !strings.Contains(out.String(), "21,000") {
		t.Errorf("the tenants that could be read are not printed:\n%s", out.String())
	}
}

// A model or client name comes from a client: in the CSV one that starts like a
// spreadsheet formula is made text; numbers and ordinary names are left alone.
func TestCSVSafe(t *testing.T) {
	for give, want := range map[string]string{"gpt-4.1": "gpt-4.1", "=HYPERLINK(\"x\")": "'=HYPERLINK(\"x\")", "+1+1": "'+1+1",
		"@sum": "'@sum", "-12": "-12", "-x": "'-x", "\tx": "'\tx", "": ""} {
		if got := csvSafe(give); got != want {
			t.Errorf("csvSafe(%q) = %q; want %q", give, got, want)
		}
	}
}

// --by given more than once groups by every dimension named, as the comma form does
// (the last one alone was kept, silently); a dimension named twice across them is
// refused.
func TestSavingsCommandByRepeated(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	st := jstest.Provision(t, jstest.Conn(t, srv))
	l := savingsLedger{base: time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)}
	appendLedger(t, st, l.e1()...)
	appendLedger(t, st, l.e2()...)
	rep := savingsReport(t, "--by", "client", "--by", "model")
	if !slices.Equal(rep.By, []string{savings.ByModel, savings.ByClient}) || len(rep.Rows) != 2 {
		t.Fatalf("--by client --by model: by %v, %d rows; want [model client], 2 rows", rep.By, len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Model == "" || r.Client == "" {
			t.Errorf("row %q/%q: want both the model and the client", r.Model, r.Client)
		}
	}
	_, _, err := cli(t, "", "savings", "--by", "model,client", "--by", "model")
	if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), `"model" named twice`) {
		t.Errorf("--by model,client --by model: %v; want exit 2 saying model is named twice", err)
	}
}
