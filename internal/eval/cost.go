package eval

import (
	"fmt"

	"github.com/compactor/compactor/internal/savings"
)

// Baselines are the published figures for LLM summaries printed beside the survival
// shares, as they are cited: not measured here.
const Baselines = "9.8% of paths, 0.2% of commands"

// Cost is an arm's tokens and, with a price table, dollars, with and without a prompt
// cache, each against the whole histories sent without compaction at the same turns.
type Cost struct {
	// TokenRatio is (contexts sent + summarizer in + out) ÷ whole histories, every
	// token counted: the bill without a prompt cache when all tokens cost the same.
	TokenRatio float64 `json:"token_ratio"`
	// UncachedRatio is the same counting only the tokens a prompt cache does not
	// serve: (sent − cache read + summarizer) ÷ (histories − their cache read).
	UncachedRatio float64 `json:"uncached_ratio"`
	// Priced says the dollars below are set (a price table prices the model).
	Priced bool `json:"priced"`
	// NoCache prices every input token sent at the input price; Cache prices the
	// cached prefixes at cached_input and the rest at cache_write (at input when the
	// table's cache_write is 0: the provider does not charge writes). Summarizer is
	// the summarizer's tokens at its model's input and output prices, in both.
	// BaselineNoCache and BaselineCache price the whole histories the same way.
	NoCache         float64 `json:"no_cache_usd"`
	Cache           float64 `json:"cache_usd"`
	Summarizer      float64 `json:"summarizer_usd"`
	BaselineNoCache float64 `json:"baseline_no_cache_usd"`
	BaselineCache   float64 `json:"baseline_cache_usd"`
	// RatioNoCache and RatioCache are NoCache ÷ BaselineNoCache and Cache ÷
	// BaselineCache, the summarizer included.
	RatioNoCache float64 `json:"ratio_no_cache"`
	RatioCache   float64 `json:"ratio_cache"`
}

// pricing is the prices of a run: the agent's model's and the summarizer's.
type pricing struct {
	agent, summarizer *savings.Price
	about             string
}

func newPricing(cfg *Config) pricing {
	if cfg.Prices == nil {
		return pricing{about: "none (no price table: tokens and ratios only)"}
	}
	p := pricing{agent: cfg.Prices.For(cfg.Model)}
	model := cfg.Model
	if model == "" {
		model = "the table's default"
	}
	sm := cfg.Resolver.Base().LLMModel
	p.summarizer = cfg.Prices.For(sm)
	p.about = fmt.Sprintf("the sent tokens at %s's prices", model)
	if p.summarizer != nil {
		p.about += fmt.Sprintf(", the summarizer's at %s's", sm)
	} else {
		p.about += fmt.Sprintf(", the summarizer's unpriced (the table prices no %s)", sm)
	}
	return p
}

// cost prices one arm.
func (p pricing) cost(s StrategyReport) Cost {
	sum := s.SummarizerIn + s.SummarizerOut
	c := Cost{
		TokenRatio:    fratio(float64(s.Cache.Sent+sum), float64(s.CacheWithout.Sent)),
		UncachedRatio: fratio(float64(s.Cache.Sent-s.Cache.CacheRead+sum), float64(s.CacheWithout.Sent-s.CacheWithout.CacheRead)),
	}
	if p.agent == nil {
		return c
	}
	c.Priced = true
	if p.summarizer != nil {
		c.Summarizer = (float64(s.SummarizerIn)*p.summarizer.Input + float64(s.SummarizerOut)*p.summarizer.Output) / 1e6
	}
	c.NoCache = float64(s.Cache.Sent)*p.agent.Input/1e6 + c.Summarizer
	c.Cache = p.cached(s.Cache) + c.Summarizer
	c.BaselineNoCache = float64(s.CacheWithout.Sent) * p.agent.Input / 1e6
	c.BaselineCache = p.cached(s.CacheWithout)
	c.RatioNoCache, c.RatioCache = fratio(c.NoCache, c.BaselineNoCache), fratio(c.Cache, c.BaselineCache)
	return c
}

// cached is t's input at the agent's prices with a prompt cache.
func (p pricing) cached(t CacheTally) float64 {
	write := p.agent.CacheWrite
	if write == 0 {
		write = p.agent.Input
	}
	return (float64(t.CacheRead)*p.agent.CachedInput + float64(t.CacheWrite)*write) / 1e6
}

// fratio is a ÷ b, 0 when b is 0.
func fratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
