package savings

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/compactor/compactor/schemas"
)

// Dimensions a report groups by.
const (
	ByTenant       = "tenant"
	ByConversation = "conversation"
	ByModel        = "model"
	ByClient       = "client"
	ByDay          = "day"
	ByMode         = "mode"
)

// Dimensions lists every dimension, in the order a row's key is printed.
var Dimensions = []string{ByTenant, ByConversation, ByModel, ByClient, ByDay, ByMode}

// ErrDimension is matched by the error of ParseBy for a dimension it does not know.
var ErrDimension = errors.New("unknown dimension")

// ParseBy parses a comma-separated list of dimensions ("" groups nothing: one row, the
// total). Each may be named once; the result keeps the order of Dimensions.
func ParseBy(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(Dimensions, d) {
			return nil, fmt.Errorf("%w %q: want %s", ErrDimension, d, strings.Join(Dimensions, ", "))
		}
		if seen[d] {
			return nil, fmt.Errorf("dimension %q named twice", d)
		}
		seen[d] = true
	}
	var out []string
	for _, d := range Dimensions {
		if seen[d] {
			out = append(out, d)
		}
	}
	return out, nil
}

// Compaction is one compaction generation of a conversation, as the summarizer left it.
type Compaction struct {
	Conversation string
	Generation   uint64
	// At is when the generation was written.
	At time.Time
	// Model is the summarizer's model ("" when it called none).
	Model string
	// Usage is what the summarizer's LLM calls reported; nil when it called none (an
	// extractive fallback, a strategy without an LLM).
	Usage *schemas.Usage
	// Lost says the generation's completed event was read but its value is no longer
	// kept (the results bucket keeps a few revisions a conversation): its tokens are not
	// known, and it is counted in Summarizer.Unknown.
	Lost bool
}

// TenantData is what Read found of one tenant (or of a deployment without tenants:
// Tenant "").
type TenantData struct {
	Tenant  string
	Entries []*schemas.LedgerEntry
	// Invalid counts the ledger entries left out as invalid (jetstream.LedgerStats).
	Invalid int
	// More says the ledger read stopped at its limit: the period holds more entries.
	More        bool
	Compactions []Compaction
}

// Period bounds a report by the time of each exchange's sent entry and of each
// compaction (zero: unbounded): from Since, included, to Until, excluded, so that
// periods that meet (a month, the next month) share nothing.
type Period struct{ Since, Until time.Time }

func (p Period) holds(t time.Time) bool {
	return (p.Since.IsZero() || !t.Before(p.Since)) && (p.Until.IsZero() || t.Before(p.Until))
}

// Side is one way of sending an exchange's requests: without Compactor (the client's
// request) or with it (the compacted one). Its input tokens split in three: read from
// the prompt cache, written to it, and neither.
//
// For the request that went upstream (the compacted one in rewrite mode, the client's in
// shadow mode), the figures are the upstream's usage when the done entry reports it:
// Input = usage.input, CacheRead = usage.cache_read, CacheWrite = usage.cache_write,
// Output = usage.output. Otherwise (unsettled, or a reply without usage), and always for
// the other request, they are modelled from the sent entry's estimates: Input = the
// request's tokens (client_tokens or compacted_tokens), CacheRead = its prefix tokens
// (client_prefix_tokens or compacted_prefix_tokens), CacheWrite = Input - CacheRead when
// the model's price charges cache writes (Price.CacheWrite > 0), else 0. When the
// upstream reported the input of the request that went, the other request's Input and
// CacheRead are scaled by how far that report is from its own estimate (reported input
// ÷ estimated, kept within ¼ to 4): both estimates err alike, and an exchange with
// nothing compacted books the same on both sides instead of the estimator's error. A
// modelled request's Output is the upstream's usage.output (the same answer is
// assumed), 0 when none was reported.
type Side struct {
	// Input is every input token, cached ones included.
	Input int64 `json:"input"`
	// CacheRead is the part of Input read from the prompt cache.
	CacheRead int64 `json:"cache_read"`
	// CacheWrite is the part of Input written to the prompt cache.
	CacheWrite int64 `json:"cache_write"`
	// Uncached is Input - CacheRead - CacheWrite.
	Uncached int64 `json:"uncached"`
	// Output is the answer's tokens.
	Output int64 `json:"output"`
}

func (s *Side) add(o Side) {
	s.Input += o.Input
	s.CacheRead += o.CacheRead
	s.CacheWrite += o.CacheWrite
	s.Uncached += o.Uncached
	s.Output += o.Output
}

// cost is the side's dollars at p: Uncached at Input, CacheRead at CachedInput,
// CacheWrite at CacheWrite, Output at Output, each per million tokens.
func (s Side) cost(p *Price) float64 {
	return (float64(s.Uncached)*p.Input + float64(s.CacheRead)*p.CachedInput +
		float64(s.CacheWrite)*p.CacheWrite + float64(s.Output)*p.Output) / 1e6
}

// Summarizer is what the summarizer spent on the compactions of a period.
type Summarizer struct {
	// Compactions counts the generations written in the period.
	Compactions int64 `json:"compactions"`
	// Unknown counts those of them whose value is no longer kept: their tokens are not
	// in Input and Output.
	Unknown int64 `json:"unknown"`
	// Input is the summarizer's prompt tokens (usage.prompt_tokens), of which
	// CachedInput were read from its endpoint's prompt cache (usage.cached_tokens);
	// Output its completion tokens.
	Input       int64 `json:"input"`
	CachedInput int64 `json:"cached_input"`
	Output      int64 `json:"output"`
}

// Tokens is the summarizer's tokens, input and output.
func (s Summarizer) Tokens() int64 { return s.Input + s.Output }

// EstimateCheck is the input tokens upstreams reported and the proxy's estimates of the
// same requests (client_tokens in shadow mode, compacted_tokens in rewrite mode).
type EstimateCheck struct {
	Reported  int64 `json:"reported"`
	Estimated int64 `json:"estimated"`
}

// Money is a row's dollars, summed over the exchanges and compactions whose model has a
// price (Row.Unpriced counts the others: when it is not 0 these sums are partial).
type Money struct {
	// Without is what the exchanges cost without Compactor (Row.Without at its model's
	// price); With what they cost with it (Row.With).
	Without float64 `json:"without"`
	With    float64 `json:"with"`
	// Summarizer is the summarizer's tokens at its model's price: its prompt tokens
	// less the cached ones at Input, the cached ones at CachedInput, its completion
	// tokens at Output.
	Summarizer float64 `json:"summarizer"`
	// Saved is Without - With - Summarizer: negative when Compactor cost more.
	Saved float64 `json:"saved"`
	// Partial says some of the row's exchanges or compactions are unpriced.
	Partial bool `json:"partial"`
}

// Row is the figures of one group of exchanges (one value of each dimension grouped
// by; the dimensions not grouped by are "").
type Row struct {
	Tenant       string `json:"tenant,omitempty"`
	Conversation string `json:"conversation,omitempty"`
	Model        string `json:"model,omitempty"`
	Client       string `json:"client,omitempty"`
	Day          string `json:"day,omitempty"`
	Mode         string `json:"mode,omitempty"`

	// Exchanges counts the exchanges (a sent entry in the period) of the group.
	Exchanges int64 `json:"exchanges"`
	// Unsettled counts those without a done entry (the proxy stopped, or the reply is
	// still streaming): the request that went upstream is modelled from its estimates.
	Unsettled int64 `json:"unsettled"`
	// Estimated counts those whose upstream request is modelled, not reported:
	// Unsettled, and replies that reported no usage.
	Estimated int64 `json:"estimated"`
	// Failed counts those the upstream refused (status 400 or more, no usage): a
	// refused request is not billed, so they add no tokens to Without or With.
	Failed int64 `json:"failed"`
	// Answered counts those Compactor answered itself, calling no model: With is 0
	// for them; Without is the client's request, modelled.
	Answered int64 `json:"answered"`
	// Swaps counts those whose compacted prefix changed since the conversation's
	// previous request (a compaction swapped in).
	Swaps int64 `json:"swaps"`

	// Without is the tokens the model was (shadow) or would have been (rewrite) sent
	// without Compactor; With the tokens it was (rewrite) or would have been (shadow)
	// sent with it. See Side.
	Without Side `json:"without"`
	With    Side `json:"with"`
	// SwapCacheWrite is the cache writes compactions caused: With.CacheWrite of the
	// exchanges with a swap (reported in rewrite mode, modelled in shadow mode).
	SwapCacheWrite int64 `json:"swap_cache_write"`
	// Summarizer is the summarizer's tokens for the group's compactions.
	Summarizer Summarizer `json:"summarizer"`
	// Check compares, over the exchanges whose upstream reported usage, the input the
	// upstream reported with the proxy's estimate of the same request: how far off the
	// modelled side's estimates are likely to be.
	Check EstimateCheck `json:"estimate_check"`
	// SavedTokens is Without.Input - With.Input - Summarizer.Tokens(): the input tokens
	// Compactor saved, net of its summarizer's. The outputs are the same on both sides.
	SavedTokens int64 `json:"saved_tokens"`

	// USD is the row's dollars; nil without a price table, or when nothing of the row
	// has a price.
	USD *Money `json:"usd,omitempty"`
	// Unpriced counts the exchanges and compactions whose model has no price; their
	// tokens are counted, their dollars are not. UnpricedModels names the models.
	Unpriced       int64    `json:"unpriced"`
	UnpricedModels []string `json:"unpriced_models,omitempty"`
	// UnpricedModelsOmitted counts the unpriced models past the first MaxNamedModels
	// (a client may name a new model on every request).
	UnpricedModelsOmitted int `json:"unpriced_models_omitted,omitempty"`
	unpricedSet           map[string]struct{}

	priced bool
}

// Key returns the row's value of dimension d.
func (r *Row) Key(d string) string {
	switch d {
	case ByTenant:
		return r.Tenant
	case ByConversation:
		return r.Conversation
	case ByModel:
		return r.Model
	case ByClient:
		return r.Client
	case ByDay:
		return r.Day
	case ByMode:
		return r.Mode
	}
	return ""
}

// Report is the ledger over a period, grouped.
type Report struct {
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	By    []string   `json:"by"`
	// Priced says a price table was given.
	Priced bool  `json:"priced"`
	Rows   []Row `json:"rows"`
	Total  Row   `json:"total"`
	// Invalid counts the ledger entries left out as invalid; Unsettled the exchanges
	// without a done entry (Total.Unsettled); Dropped the done entries in the period
	// without their sent entry (their conversation was forgotten between the two, or
	// the sent entry aged out of the ledger): they are not counted anywhere else.
	Invalid   int   `json:"invalid_entries"`
	Unsettled int64 `json:"unsettled"`
	Dropped   int   `json:"dropped"`
	// Truncated names the tenants whose ledger held more entries than one read takes.
	Truncated []string `json:"truncated,omitempty"`
}

// rowKey is a row's value of each dimension.
type rowKey struct{ Tenant, Conversation, Model, Client, Day, Mode string }

// exchange is one exchange: its sent entry and, once settled, its done entry.
type exchange struct {
	tenant     string
	sent, done *schemas.LedgerEntry
}

// figures returns an exchange's two sides as Side defines them, and what it counted.
func (x exchange) figures(price *Price, row *Row) (without, with Side) {
	s, d := x.sent, x.done
	row.Exchanges++
	if s.Swap {
		row.Swaps++
	}
	if d == nil {
		row.Unsettled++
	}
	if d != nil && d.Usage == nil && d.Status >= 400 {
		row.Failed++
		return Side{}, Side{}
	}
	modelled := func(tokens, prefix, output int64) Side {
		sd := Side{Input: tokens, CacheRead: prefix, Output: output}
		if price != nil && price.CacheWrite > 0 {
			sd.CacheWrite = tokens - prefix
		}
		sd.Uncached = sd.Input - sd.CacheRead - sd.CacheWrite
		return sd
	}
	if d != nil && d.Answered {
		row.Answered++
		return modelled(s.ClientTokens, s.ClientPrefixTokens, 0), Side{}
	}
	var output int64
	var reported *Side
	if d != nil && d.Usage != nil {
		u := d.Usage
		output = u.Output
		reported = &Side{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite,
			Uncached: u.Input - u.CacheRead - u.CacheWrite, Output: u.Output}
	} else {
		row.Estimated++
	}
	if s.WouldAnswer && s.Mode == schemas.LedgerShadow {
		// Rewrite mode would have answered it from the summary, calling no model: the
		// client's request without Compactor, nothing with it.
		row.Answered++
		if reported != nil {
			row.Check.Reported += reported.Input
			row.Check.Estimated += s.ClientTokens
			return *reported, Side{}
		}
		return modelled(s.ClientTokens, s.ClientPrefixTokens, output), Side{}
	}
	without = modelled(s.ClientTokens, s.ClientPrefixTokens, output)
	with = modelled(s.CompactedTokens, s.CompactedPrefixTokens, output)
	if reported != nil {
		row.Check.Reported += reported.Input
		if s.Mode == schemas.LedgerShadow {
			f := calibration(reported.Input, s.ClientTokens)
			without = *reported
			with = modelled(scale(s.CompactedTokens, f), min(scale(s.CompactedPrefixTokens, f), scale(s.CompactedTokens, f)), output)
			row.Check.Estimated += s.ClientTokens
		} else {
			f := calibration(reported.Input, s.CompactedTokens)
			with = *reported
			without = modelled(scale(s.ClientTokens, f), min(scale(s.ClientPrefixTokens, f), scale(s.ClientTokens, f)), output)
			row.Check.Estimated += s.CompactedTokens
		}
	}
	return without, with
}

// calibration is how far an upstream's reported input is from the proxy's estimate of
// the same request, kept within ¼ to 4 (1 without an estimate): what the other
// request's estimate is scaled by.
func calibration(reported, estimated int64) float64 {
	if reported <= 0 || estimated <= 0 {
		return 1
	}
	return min(max(float64(reported)/float64(estimated), 0.25), 4)
}

// scale is n scaled by f, rounded.
func scale(n int64, f float64) int64 { return int64(math.Round(float64(n) * f)) }

// Aggregate sums the exchanges of data whose sent entry is in period p, and the
// compactions in p, into one row per group of the dimensions by (none: a single row),
// as an Aggregator fed each tenant's entries in their order does (its doc says how
// they are joined). prices may be nil.
func Aggregate(data []TenantData, prices *Prices, by []string, p Period) *Report {
	a := NewAggregator(prices, p, by)
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
	return a.Reports()[0]
}

func (r *Row) money() *Money {
	if r.USD == nil {
		r.USD = new(Money)
	}
	return r.USD
}

func (r *Row) unpriced(model string) {
	r.Unpriced++
	if model == "" {
		model = "(no model)"
	}
	if r.unpricedSet == nil {
		r.unpricedSet = map[string]struct{}{}
	}
	r.unpricedSet[model] = struct{}{}
}

// MaxNamedModels bounds the unpriced models a row names.
const MaxNamedModels = 50

// finish computes the row's derived figures once its sums are in.
func (r *Row) finish(priced bool) {
	r.SavedTokens = r.Without.Input - r.With.Input - r.Summarizer.Tokens()
	r.UnpricedModels = r.UnpricedModels[:0]
	for m := range r.unpricedSet {
		r.UnpricedModels = append(r.UnpricedModels, m)
	}
	slices.Sort(r.UnpricedModels)
	if n := len(r.UnpricedModels); n > MaxNamedModels {
		r.UnpricedModels, r.UnpricedModelsOmitted = r.UnpricedModels[:MaxNamedModels], n-MaxNamedModels
	}
	if len(r.UnpricedModels) == 0 {
		r.UnpricedModels = nil
	}
	if !priced || !r.priced {
		r.USD = nil
		return
	}
	m := r.money()
	m.Saved = m.Without - m.With - m.Summarizer
	m.Partial = r.Unpriced > 0
}

// sum adds o's sums to the total r.
func (r *Row) sum(o *Row) {
	r.Exchanges += o.Exchanges
	r.Unsettled += o.Unsettled
	r.Estimated += o.Estimated
	r.Failed += o.Failed
	r.Answered += o.Answered
	r.Swaps += o.Swaps
	r.Without.add(o.Without)
	r.With.add(o.With)
	r.SwapCacheWrite += o.SwapCacheWrite
	r.Check.Reported += o.Check.Reported
	r.Check.Estimated += o.Check.Estimated
	r.Summarizer.Compactions += o.Summarizer.Compactions
	r.Summarizer.Unknown += o.Summarizer.Unknown
	r.Summarizer.Input += o.Summarizer.Input
	r.Summarizer.CachedInput += o.Summarizer.CachedInput
	r.Summarizer.Output += o.Summarizer.Output
	r.Unpriced += o.Unpriced
	for m := range o.unpricedSet {
		if r.unpricedSet == nil {
			r.unpricedSet = map[string]struct{}{}
		}
		r.unpricedSet[m] = struct{}{}
	}
	if o.USD != nil {
		r.priced = true
		m := r.money()
		m.Without += o.USD.Without
		m.With += o.USD.With
		m.Summarizer += o.USD.Summarizer
	}
}
