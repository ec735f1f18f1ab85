package eval

import (
	"encoding/json"
	"time"

	"github.com/compactor/compactor/internal/proxy/swaprule"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// DefaultCacheTTL is how long a provider's prompt cache is taken to live when the
// config names none: the proxy's default (COMPACTOR_PROXY_CACHE_TTL).
const DefaultCacheTTL = 5 * time.Minute

// NoCache is the Config.CacheTTL of a provider that caches nothing (the proxy's
// COMPACTOR_PROXY_CACHE_TTL=0): every turn may swap, and no prefix is read from a cache.
const NoCache time.Duration = -1

// swapRule is the proxy's cache-aware rule (package swaprule, the proxy's own), as a
// turn of a replay applies it on a simulated clock: the replay reads through
// pipeline.Value as the proxy reads through its own cache of the conversation.
type swapRule struct {
	ttl, gap time.Duration
	stale    int
	// sticky is the value last sent (nil: none, generation 0, or a newer one landed
	// while it was read); now and at are the simulated clock and the last turn's time.
	sticky  *schemas.Result
	now, at time.Duration
	turns   int
}

// earlier advances the clock by one turn and returns the value to read with: the one
// last sent while the cache likely holds it, else nil (the newest).
func (r *swapRule) earlier() *schemas.Result {
	if r.turns > 0 {
		r.now += r.gap
	}
	r.turns++
	if r.sticky == nil || r.expired() {
		return nil
	}
	return r.sticky
}

// swap reports whether a context of tokens read with earlier, whose generation is gen,
// must be read again with the newest value (swaprule.Reread).
func (r *swapRule) swap(earlier *schemas.Result, gen uint64, tokens int) bool {
	return swaprule.Reread(tokens, r.stale, earlier, gen)
}

// keep remembers what the turn was sent with (swaprule.Keep).
func (r *swapRule) keep(gen uint64, earlier, live *schemas.Result) {
	r.at = r.now
	r.sticky = swaprule.Keep(gen, earlier, live)
}

// expired reports whether the provider's cache has likely expired since the last turn
// (after earlier advanced the clock).
func (r *swapRule) expired() bool { return !swaprule.Warm(r.now-r.at, r.ttl) }

// CacheTally is what a provider's prompt cache makes of the contexts sent turn after
// turn, at message granularity: a turn's cached prefix is the run of its first
// messages byte-identical to the previous turn's (while the cache lives); the rest is
// read at full price and written to the cache.
type CacheTally struct {
	// Turns are the model turns; Compared the turns with a turn before them.
	Turns    int `json:"turns"`
	Compared int `json:"compared"`
	// PrefixKept counts the compared turns whose context starts with the whole previous
	// context, byte for byte: the forwarded prefix stayed identical.
	PrefixKept int `json:"prefix_kept"`
	// Sent sums the contexts' tokens; CacheRead the cached prefixes'; CacheWrite the
	// rest (Sent − CacheRead), what a provider reads uncached and writes to its cache;
	// SwapWrite the part of CacheWrite on the compared turns whose prefix changed (the
	// cache writes a compaction swapped in caused).
	Sent       int64 `json:"sent"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
	SwapWrite  int64 `json:"swap_write"`
}

// prefixCache tallies the contexts of one replay.
type prefixCache struct {
	prev [][]byte
	t    CacheTally
}

// turn tallies a context sent: msgs and its tokens, expired when the cache has likely
// expired since the previous turn (nothing is read from it then).
func (p *prefixCache) turn(msgs []schemas.Message, total int, expired bool) error {
	enc := make([][]byte, len(msgs))
	for i := range msgs {
		data, err := json.Marshal(&msgs[i])
		if err != nil {
			return err
		}
		enc[i] = data
	}
	common := 0
	for common < len(p.prev) && common < len(enc) && string(p.prev[common]) == string(enc[common]) {
		common++
	}
	cached := 0
	if p.t.Turns > 0 && !expired {
		for i := range common {
			cached += tokens.Message(&msgs[i])
		}
	}
	cached = min(cached, total)
	p.t.Turns++
	p.t.Sent += int64(total)
	p.t.CacheRead += int64(cached)
	p.t.CacheWrite += int64(total - cached)
	if p.t.Turns > 1 {
		p.t.Compared++
		if common == len(p.prev) {
			p.t.PrefixKept++
		} else {
			p.t.SwapWrite += int64(total - cached)
		}
	}
	p.prev = enc
	return nil
}

func (t *CacheTally) add(o CacheTally) {
	t.Turns += o.Turns
	t.Compared += o.Compared
	t.PrefixKept += o.PrefixKept
	t.Sent += o.Sent
	t.CacheRead += o.CacheRead
	t.CacheWrite += o.CacheWrite
	t.SwapWrite += o.SwapWrite
}

// PrefixShare is PrefixKept ÷ Compared (0 when nothing was compared).
func (t CacheTally) PrefixShare() float64 { return ratio(t.PrefixKept, t.Compared) }
