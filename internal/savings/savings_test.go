package savings

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func sent(id, conv, mode, model, client, when string, clientTok, clientPre, compTok, compPre int64, swap bool) *schemas.LedgerEntry {
	return &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: id, Phase: schemas.LedgerSent, At: at(when), Conversation: conv,
		Mode: mode, API: "openai", Model: model, Client: client, ClientTokens: clientTok, ClientPrefixTokens: clientPre,
		CompactedTokens: compTok, CompactedPrefixTokens: compPre, Swap: swap}
}

func done(s *schemas.LedgerEntry, when string, status int, u *schemas.LedgerUsage) *schemas.LedgerEntry {
	d := *s
	d.Phase, d.At, d.Status, d.Usage = schemas.LedgerDone, at(when), status, u
	return &d
}

const testPrices = `{
  "models": {
    "gpt-test": {"input": 2, "cached_input": 0.5, "cache_write": 0, "output": 8},
    "claude-test*": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15},
    "sum-mini": {"input": 1, "cached_input": 0.25, "cache_write": 0, "output": 4}
  }
}`

// fixture is a hand-built ledger whose every figure is worked out by hand in the tests:
//
//	E1 rewrite gpt-test codex c1: client 10000 (prefix 8000), compacted 4000 (3000);
//	   reported input 4200, cache read 3000, output 100.
//	E2 shadow claude-test-1 claude-cli c2, a swap: client 20000 (18000), compacted 6000 (0);
//	   reported input 21000, cache read 18000, cache write 2500, output 300.
//	E3 rewrite gpt-test codex c1, unsettled: client 5000 (0), compacted 2000 (1000).
//	E4 rewrite mystery (unpriced, no client) c3: 3000 and 3000; reported input 2900, output 50.
//	E5 rewrite gpt-test codex c1: client 1000, compacted 800; refused, 429, no usage.
//	E6 rewrite gpt-test codex c1, sent just before midnight, done just after: 100 and
//	   100; reported input 100.
//	a done on c1 whose sent is not in the ledger (dropped).
//	compaction c1 gen 1 by sum-mini: prompt 6000 (1000 cached), completion 500.
//	compaction c2 gen 1, its value no longer kept (lost).
func fixture() []TenantData {
	e1 := sent("e1-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-01T10:00:00Z", 10000, 8000, 4000, 3000, false)
	e2 := sent("e2-aaaaaaaaaaaaaaaa", "c2", schemas.LedgerShadow, "claude-test-1", "claude-cli", "2026-03-01T11:00:00Z", 20000, 18000, 6000, 0, true)
	e3 := sent("e3-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-02T09:00:00Z", 5000, 0, 2000, 1000, false)
	e4 := sent("e4-aaaaaaaaaaaaaaaa", "c3", schemas.LedgerRewrite, "mystery", "", "2026-03-01T12:00:00Z", 3000, 0, 3000, 0, false)
	e5 := sent("e5-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-02T10:00:00Z", 1000, 0, 800, 0, false)
	e6 := sent("e6-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-01T23:59:30Z", 100, 0, 100, 0, false)
	orphan := done(sent("e0-aaaaaaaaaaaaaaaa", "c1", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-01T13:00:00Z", 1, 0, 1, 0, false),
		"2026-03-01T13:00:00Z", 200, &schemas.LedgerUsage{Input: 1})
	return []TenantData{{
		Entries: []*schemas.LedgerEntry{
			e1, done(e1, "2026-03-01T10:00:05Z", 200, &schemas.LedgerUsage{Input: 4200, CacheRead: 3000, Output: 100}),
			e2, done(e2, "2026-03-01T11:00:05Z", 200, &schemas.LedgerUsage{Input: 21000, CacheRead: 18000, CacheWrite: 2500, Output: 300}),
			e4, done(e4, "2026-03-01T12:00:05Z", 200, &schemas.LedgerUsage{Input: 2900, Output: 50}),
			orphan,
			e6, done(e6, "2026-03-02T00:00:10Z", 200, &schemas.LedgerUsage{Input: 100}),
			e3,
			e5, done(e5, "2026-03-02T10:00:01Z", 429, nil),
		},
		Invalid: 2,
		Compactions: []Compaction{
			{Conversation: "c1", Generation: 1, At: at("2026-03-01T10:30:00Z"), Model: "sum-mini",
				Usage: &schemas.Usage{PromptTokens: 6000, CachedTokens: 1000, CompletionTokens: 500}},
			{Conversation: "c2", Generation: 1, At: at("2026-03-01T11:30:00Z"), Lost: true},
		},
	}}
}

func mustPrices(t *testing.T) *Prices {
	t.Helper()
	p, err := ParsePrices([]byte(testPrices))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// The totals of the hand-built ledger, each against the figure worked out by hand.
func TestAggregateTotals(t *testing.T) {
	rep := Aggregate(fixture(), mustPrices(t), nil, Period{})
	tot := rep.Total
	// The modelled side of a reported exchange is scaled by reported ÷ estimated of the
	// side that went: E1 4200/4000 = 1.05, E2 21000/20000 = 1.05, E4 2900/3000, E6 1.
	// Without: E1 modelled 10000×1.05 = 10500 (8400 read, 2100 uncached; gpt-test
	// charges no writes), E2 reported 21000 (18000 read, 2500 written, 500 uncached), E3
	// modelled 5000 uncached (unsettled: not scaled), E4 modelled 3000×29/30 = 2900
	// uncached, E5 refused (nothing), E6 100 uncached.
	wantWithout := Side{Input: 39500, CacheRead: 26400, CacheWrite: 2500, Uncached: 10600, Output: 450}
	// With: E1 reported 4200 (3000 read, 1200 uncached), E2 modelled 6000×1.05 = 6300 all
	// written (claude-test* charges writes, no prefix), E3 modelled 2000 (1000 read, 1000
	// uncached), E4 reported 2900 uncached, E6 reported 100.
	wantWith := Side{Input: 15500, CacheRead: 4000, CacheWrite: 6300, Uncached: 5200, Output: 450}
	if tot.Without != wantWithout {
		t.Errorf("without: got %+v; want %+v", tot.Without, wantWithout)
	}
	if tot.With != wantWith {
		t.Errorf("with: got %+v; want %+v", tot.With, wantWith)
	}
	if tot.Exchanges != 6 || tot.Unsettled != 1 || tot.Estimated != 1 || tot.Failed != 1 || tot.Swaps != 1 || tot.Answered != 0 {
		t.Errorf("counts: got %d exchanges, %d unsettled, %d estimated, %d failed, %d swaps; want 6, 1, 1, 1, 1",
			tot.Exchanges, tot.Unsettled, tot.Estimated, tot.Failed, tot.Swaps)
	}
	// Reported 4200 + 21000 + 2900 + 100 where the proxy estimated 4000 + 20000 + 3000 + 100.
	if tot.Check != (EstimateCheck{Reported: 28200, Estimated: 27100}) {
		t.Errorf("estimate check: got %+v; want 28200 reported, 27100 estimated", tot.Check)
	}
	if tot.SwapCacheWrite != 6300 {
		t.Errorf("swap cache writes: got %d; want 6300 (E2's modelled write)", tot.SwapCacheWrite)
	}
	wantSum := Summarizer{Compactions: 2, Unknown: 1, Input: 6000, CachedInput: 1000, Output: 500}
	if tot.Summarizer != wantSum {
		t.Errorf("summarizer: got %+v; want %+v", tot.Summarizer, wantSum)
	}
	// 39500 - 15500 - 6500.
	if tot.SavedTokens != 17500 {
		t.Errorf("saved tokens: got %d; want 17500", tot.SavedTokens)
	}
	if rep.Dropped != 1 || rep.Invalid != 2 || rep.Unsettled != 1 {
		t.Errorf("dropped %d, invalid %d, unsettled %d; want 1, 2, 1", rep.Dropped, rep.Invalid, rep.Unsettled)
	}
	// Dollars, per million tokens:
	// without E1 2100*2 + 8400*0.5 + 100*8 = 9200; E2 500*3 + 18000*0.3 + 2500*3.75 +
	// 300*15 = 20775; E3 5000*2 = 10000; E6 100*2 = 200: 40175.
	// with E1 1200*2 + 3000*0.5 + 800 = 4700; E2 6300*3.75 + 4500 = 28125; E3 1000*2 +
	// 1000*0.5 = 2500; E6 200: 35525.
	// summarizer 5000*1 + 1000*0.25 + 500*4 = 7250.
	m := tot.USD
	if m == nil {
		t.Fatal("no dollars in the total")
	}
	if !near(m.Without, 0.040175) || !near(m.With, 0.035525) || !near(m.Summarizer, 0.00725) || !near(m.Saved, -0.0026) {
		t.Errorf("dollars: got %+v; want without 0.040175, with 0.035525, summarizer 0.00725, saved -0.0026", *m)
	}
	if !m.Partial || tot.Unpriced != 1 || !slices.Equal(tot.UnpricedModels, []string{"mystery"}) {
		t.Errorf("unpriced: partial %v, %d, %v; want partial, 1, [mystery]", m.Partial, tot.Unpriced, tot.UnpricedModels)
	}
}

// Grouped by model, each model's row holds its own exchanges; the compactions go to
// their conversation's model (c2's lost one to claude-test-1); the unpriced model has
// tokens and no dollars.
func TestAggregateByModel(t *testing.T) {
	rep := Aggregate(fixture(), mustPrices(t), []string{ByModel}, Period{})
	if len(rep.Rows) != 3 {
		t.Fatalf("got %d rows; want 3", len(rep.Rows))
	}
	claude, gpt, mystery := rep.Rows[0], rep.Rows[1], rep.Rows[2]
	if claude.Model != "claude-test-1" || gpt.Model != "gpt-test" || mystery.Model != "mystery" {
		t.Fatalf("rows %q %q %q", claude.Model, gpt.Model, mystery.Model)
	}
	// claude: 21000 - 6300, its lost compaction adding nothing known.
	if claude.SavedTokens != 14700 || claude.Summarizer.Unknown != 1 || claude.USD == nil || !near(claude.USD.Saved, 0.020775-0.028125) {
		t.Errorf("claude row: saved %d, summarizer %+v, usd %+v; want 14700, 1 unknown, -0.00735", claude.SavedTokens, claude.Summarizer, claude.USD)
	}
	// gpt: (10500+5000+100) - (4200+2000+100) - 6500.
	if gpt.SavedTokens != 2800 || gpt.Exchanges != 4 || !near(gpt.USD.Saved, 0.0194-0.0074-0.00725) || gpt.USD.Partial {
		t.Errorf("gpt row: saved %d, exchanges %d, usd %+v; want 2800, 4, 0.00475 not partial", gpt.SavedTokens, gpt.Exchanges, gpt.USD)
	}
	// mystery: nothing compacted (3000 and 3000 estimated): the reported 2900 on both
	// sides, not the estimator's error of 100 booked as saved.
	if mystery.SavedTokens != 0 || mystery.USD != nil || mystery.Unpriced != 1 {
		t.Errorf("mystery row: saved %d, usd %+v, unpriced %d; want 0, no dollars, 1", mystery.SavedTokens, mystery.USD, mystery.Unpriced)
	}
}

// Grouped by day and mode, and bounded by a period: an exchange belongs to the day of
// its sent entry; one sent before the period and settled in it is neither counted nor
// dropped; one sent in it and settled after it is settled.
func TestAggregatePeriod(t *testing.T) {
	prices := mustPrices(t)
	rep := Aggregate(fixture(), prices, []string{ByDay, ByMode}, Period{})
	var keys []string
	for _, r := range rep.Rows {
		keys = append(keys, r.Day+"/"+r.Mode)
	}
	if want := []string{"2026-03-01/rewrite", "2026-03-01/shadow", "2026-03-02/rewrite"}; !slices.Equal(keys, want) {
		t.Fatalf("rows %v; want %v", keys, want)
	}
	day2 := Aggregate(fixture(), prices, nil, Period{Since: at("2026-03-02T00:00:00Z")})
	// E3 and E5 only: 5000 - 2000; E6's done is in the period, its sent is not.
	if tot := day2.Total; tot.Exchanges != 2 || tot.SavedTokens != 3000 || day2.Dropped != 0 || tot.Summarizer.Compactions != 0 {
		t.Errorf("since day 2: %d exchanges, saved %d, dropped %d, %d compactions; want 2, 3000, 0, 0",
			tot.Exchanges, tot.SavedTokens, day2.Dropped, tot.Summarizer.Compactions)
	}
	day1 := Aggregate(fixture(), prices, nil, Period{Until: at("2026-03-02T00:00:00Z")})
	// E1, E2, E4, E6 (settled after the end): 10500+21000+2900+100 - (4200+6300+2900+100) - 6500.
	if tot := day1.Total; tot.Exchanges != 4 || tot.Unsettled != 0 || tot.SavedTokens != 14500 || day1.Dropped != 1 {
		t.Errorf("until day 1: %d exchanges, %d unsettled, saved %d, dropped %d; want 4, 0, 14500, 1",
			tot.Exchanges, tot.Unsettled, tot.SavedTokens, day1.Dropped)
	}
	// The bounds: since is included, until is not (E3 is at 09:00 on day 2).
	if n := Aggregate(fixture(), prices, nil, Period{Since: at("2026-03-02T09:00:00Z"), Until: at("2026-03-02T10:00:00Z")}).Total.Exchanges; n != 1 {
		t.Errorf("[09:00, 10:00) on day 2: %d exchanges; want E3 alone", n)
	}
}

// Without a price table the tokens are the same and no row has dollars; without a
// write price the modelled side writes nothing to the cache.
func TestAggregateWithoutPrices(t *testing.T) {
	rep := Aggregate(fixture(), nil, nil, Period{})
	if rep.Priced || rep.Total.USD != nil {
		t.Fatalf("dollars without a price table: %+v", rep.Total.USD)
	}
	// E2's compacted request is modelled with no cache write: 6300 uncached.
	if rep.Total.With.CacheWrite != 0 || rep.Total.With.Uncached != 11500 || rep.Total.SavedTokens != 17500 {
		t.Errorf("with %+v, saved %d; want no cache write, 11500 uncached, 17500 saved", rep.Total.With, rep.Total.SavedTokens)
	}
	if rep.Total.Unpriced != 0 {
		t.Errorf("unpriced %d without a price table; want 0 (nothing is priced)", rep.Total.Unpriced)
	}
}

// An exchange Compactor answered itself: the client's request without, nothing with.
func TestAggregateAnswered(t *testing.T) {
	s := sent("a1-aaaaaaaaaaaaaaaa", "c9", schemas.LedgerRewrite, "gpt-test", "codex", "2026-03-01T10:00:00Z", 7000, 1000, 2000, 0, false)
	d := done(s, "2026-03-01T10:00:01Z", 200, nil)
	d.Answered = true
	rep := Aggregate([]TenantData{{Entries: []*schemas.LedgerEntry{s, d}}}, mustPrices(t), nil, Period{})
	tot := rep.Total
	if tot.Answered != 1 || tot.Without.Input != 7000 || tot.With.Input != 0 || tot.SavedTokens != 7000 || tot.Estimated != 0 {
		t.Errorf("answered: %+v", tot)
	}
	// 6000*2 + 1000*0.5.
	if !near(tot.USD.Without, 0.0125) || tot.USD.With != 0 {
		t.Errorf("answered dollars: %+v; want 0.0125 without, 0 with", *tot.USD)
	}
}

func TestPrices(t *testing.T) {
	p, err := ParsePrices([]byte(`{"models": {"gpt-4.1": {"input": 2, "cached_input": 0.5, "cache_write": 0, "output": 8},
		"gpt-4*": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1},
		"gpt-*": {"input": 9, "cached_input": 9, "cache_write": 0, "output": 9}},
		"default": {"input": 5, "cached_input": 5, "cache_write": 5, "output": 5}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model string
		want  float64
	}{{"gpt-4.1", 2}, {"gpt-4.1-mini", 1}, {"gpt-4o", 1}, {"gpt-5", 9}, {"claude", 5}, {"", 5}} {
		if got := p.For(tt.model); got == nil || got.Input != tt.want {
			t.Errorf("For(%q): got %+v; want input %v", tt.model, got, tt.want)
		}
	}
	noDefault, err := ParsePrices([]byte(`{"models": {"a": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := noDefault.For("b"); got != nil {
		t.Errorf("an unlisted model without a default priced %+v; want unpriced", got)
	}
	var none *Prices
	if none.For("a") != nil {
		t.Error("a nil table priced a model")
	}
	for _, tt := range []struct{ name, give, want string }{
		{"unknown field", `{"models": {"a": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1, "extra": 1}}}`, "unknown field"},
		{"unknown top field", `{"modles": {}}`, "unknown field"},
		{"negative", `{"models": {"a": {"input": -1, "cached_input": 1, "cache_write": 0, "output": 1}}}`, "input: -1"},
		{"missing", `{"models": {"a": {"input": 1, "cache_write": 0, "output": 1}}}`, "cached_input: missing"},
		{"star inside", `{"models": {"a*b": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1}}}`, "may only end"},
		{"empty name", `{"models": {"": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1}}}`, "model name"},
		{"bad default", `{"default": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1e9}}`, "default: output"},
		{"nothing", `{}`, "prices nothing"},
		{"two documents", `{"default": {"input": 1, "cached_input": 1, "cache_write": 0, "output": 1}} {}`, "more than one"},
		{"a string", `{"models": {"a": {"input": "1", "cached_input": 1, "cache_write": 0, "output": 1}}}`, "cannot unmarshal"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePrices([]byte(tt.give))
			if !errors.Is(err, ErrPrices) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v; want an ErrPrices saying %q", err, tt.want)
			}
		})
	}
}

func TestParseBy(t *testing.T) {
	got, err := ParseBy("mode, tenant,day")
	if err != nil || !slices.Equal(got, []string{ByTenant, ByDay, ByMode}) {
		t.Errorf("got %v, %v; want [tenant day mode]", got, err)
	}
	if _, err := ParseBy("tenant,agent"); !errors.Is(err, ErrDimension) {
		t.Errorf("an unknown dimension: %v", err)
	}
	if _, err := ParseBy("day,day"); err == nil {
		t.Error("a dimension named twice was accepted")
	}
}

func TestParseTime(t *testing.T) {
	now := at("2026-03-10T12:00:00Z")
	for _, tt := range []struct {
		give string
		want time.Time
	}{{"24h", at("2026-03-09T12:00:00Z")}, {"7d", at("2026-03-03T12:00:00Z")}, {"90m", at("2026-03-10T10:30:00Z")},
		{"2026-03-01T00:00:00+01:00", at("2026-02-28T23:00:00Z")}, {"2026-03-01", at("2026-03-01T00:00:00Z")}} {
		got, err := ParseTime(tt.give, now)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("ParseTime(%q): got %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "1.5d", "2026-03-01T00:00"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
}

// The shipped example table validates, and prices what it says it prices.
func TestExamplePrices(t *testing.T) {
	p, err := ReadPrices("../../examples/prices.json")
	if err != nil {
		t.Fatal(err)
	}
	if pr := p.For("claude-sonnet-4-5"); pr == nil || pr.CacheWrite != 3.75 {
		t.Errorf("claude-sonnet-4-5: %+v; want the claude-sonnet-4* entry", pr)
	}
	if pr := p.For("gpt-4.1-mini-2025"); pr == nil || pr.Input != 0.40 {
		t.Errorf("gpt-4.1-mini-2025: %+v; want the gpt-4.1-mini* entry", pr)
	}
	if pr := p.For("llama-3"); pr != nil {
		t.Errorf("llama-3 priced %+v; the example has no default", pr)
	}
}

// A client may name a new model on every request: a report names the first
// MaxNamedModels unpriced models and counts the rest, and keeps them in a set (a
// list it searched made a report of many names quadratic).
func TestUnpricedModelsAreBounded(t *testing.T) {
	var es []*schemas.LedgerEntry
	for i := range MaxNamedModels + 30 {
		s := sent(fmt.Sprintf("u%d-aaaaaaaaaaaaaaaa", i), "c1", schemas.LedgerRewrite, fmt.Sprintf("model-%03d", i), "x", "2026-03-01T10:00:00Z", 10, 0, 5, 0, false)
		es = append(es, s, done(s, "2026-03-01T10:00:01Z", 200, &schemas.LedgerUsage{Input: 5}))
	}
	rep := Aggregate([]TenantData{{Entries: es}}, mustPrices(t), nil, Period{})
	if tot := rep.Total; tot.Unpriced != MaxNamedModels+30 || len(tot.UnpricedModels) != MaxNamedModels || tot.UnpricedModelsOmitted != 30 {
		t.Errorf("unpriced %d, named %d, omitted %d; want %d, %d, 30", tot.Unpriced, len(tot.UnpricedModels), tot.UnpricedModelsOmitted, MaxNamedModels+30, MaxNamedModels)
	}
}

// In shadow mode, a request rewrite mode would have answered from the summary (an
// agent's compaction request) went to the model: its reported usage is the side
// without Compactor, and nothing is the side with it.
func TestAggregateShadowWouldAnswer(t *testing.T) {
	s := sent("w1-aaaaaaaaaaaaaaaa", "c9", schemas.LedgerShadow, "gpt-test", "claude-cli", "2026-03-01T10:00:00Z", 7000, 1000, 2000, 0, false)
	s.WouldAnswer = true
	d := done(s, "2026-03-01T10:00:01Z", 200, &schemas.LedgerUsage{Input: 7100, CacheRead: 1000, Output: 400})
	rep := Aggregate([]TenantData{{Entries: []*schemas.LedgerEntry{s, d}}}, mustPrices(t), nil, Period{})
	tot := rep.Total
	if tot.Answered != 1 || tot.Without.Input != 7100 || tot.With != (Side{}) || tot.SavedTokens != 7100 {
		t.Errorf("answered %d, without %+v, with %+v, saved %d; want 1, the reported 7100, nothing, 7100", tot.Answered, tot.Without, tot.With, tot.SavedTokens)
	}
}
