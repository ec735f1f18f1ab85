package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// The savings ledger: each exchange of a rewritten path that reaches the upstream is
// booked twice (schemas.LedgerEntry). The sent entry is written, and acknowledged,
// before the request goes upstream: an exchange the upstream may bill is never missing
// from the ledger, whatever happens to the proxy after. The done entry follows the
// upstream's answer; a crash before it leaves the exchange unsettled (counted from its
// estimates), never uncounted, and an append retried within the stream's duplicate
// window is stored once.

// Modes of the proxy (COMPACTOR_PROXY_MODE).
const (
	// ModeRewrite sends the model the compacted context: the proxy's purpose.
	ModeRewrite = schemas.LedgerRewrite
	// ModeShadow sends every request upstream exactly as the client sent it, while the
	// conversation is stored and compacted as usual and the ledger books what rewrite
	// mode would have sent: a team measures before it changes anything.
	ModeShadow = schemas.LedgerShadow
)

// Ledger is where the proxy books its exchanges (jetstream.Ledger).
type Ledger interface {
	Append(ctx context.Context, e *schemas.LedgerEntry) error
}

// ClientHeader names the agent an exchange is booked to, when the client sends it;
// otherwise the product of its User-Agent.
const ClientHeader = "X-Compactor-Client"

// ledgerTimeout bounds one append: the sent entry holds the request back until it is
// acknowledged (or this passes; then the exchange goes on, unbooked, and is counted).
const ledgerTimeout = 2 * time.Second

// clientName is the agent of r: ClientHeader, else the first product token of its
// User-Agent ("claude-cli/1.0.83 (external, cli)" is claude-cli), kept to 64
// characters of [A-Za-z0-9._-]; "" when neither says.
func clientName(h http.Header) string {
	name := strings.TrimSpace(h.Get(ClientHeader))
	if name == "" {
		ua := strings.TrimSpace(h.Get("User-Agent"))
		if i := strings.IndexAny(ua, "/ ("); i >= 0 {
			ua = ua[:i]
		}
		name = ua
	}
	var b strings.Builder
	for _, c := range name {
		if b.Len() == 64 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// newExchangeID is a random id of 32 hex digits.
func newExchangeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// prefixMemo keeps, per conversation, the chains of its last client request and of its
// last compacted one, with their token counts: the part of the next request that is
// the same from the start, within the cache's life, is what a prompt cache could
// serve. Bounded in bytes (each conversation's id, digests and counts, and a fixed
// overhead); over the bound, conversations are dropped in the map's order.
type prefixMemo struct {
	mu    sync.Mutex
	convs map[string]*sentPair
	bytes int
	max   int
}

// sentPair is one conversation's last requests, as the ledger saw them.
type sentPair struct {
	client, compacted sentChain
	gen               uint64
	at                time.Time
}

// sentChain is a request's chain and the tokens up to each of its messages.
type sentChain struct {
	chain []Digest
	cum   []int64
}

// maxPrefixBytes bounds the memory the prefix memo keeps.
const maxPrefixBytes = 32 << 20

// memoOverhead is what an entry of the prefix memo costs besides its id and chains:
// the map's slot, the pair, the slice headers (measured: about 300 bytes).
const memoOverhead = 320

// cost is what conv's pair costs the memo, in bytes.
func (p *sentPair) cost(conv string) int {
	return len(conv) + memoOverhead + 24*(len(p.client.chain)+len(p.compacted.chain))
}

func newPrefixMemo(maxBytes int) *prefixMemo {
	return &prefixMemo{convs: map[string]*sentPair{}, max: maxBytes}
}

// chainOf is the sent chain of msgs, given their chain when known (nil: computed).
func chainOf(msgs []schemas.Message, chain []Digest, each []int) sentChain {
	if len(chain) != len(msgs) {
		chain = Chain(msgs)
	}
	sc := sentChain{chain: chain, cum: make([]int64, len(msgs))}
	var n int64
	for i := range msgs {
		if len(each) == len(msgs) {
			n += int64(each[i])
		} else {
			n += int64(tokens.Message(&msgs[i]))
		}
		sc.cum[i] = n
	}
	return sc
}

// common is the tokens of the messages next shares with prev from the start.
func (prev sentChain) common(next sentChain) int64 {
	i := 0
	for i < len(prev.chain) && i < len(next.chain) && prev.chain[i] == next.chain[i] {
		i++
	}
	if i == 0 {
		return 0
	}
	return next.cum[i-1]
}

// record returns the prefix each of conv's new requests shares with the
// conversation's previous one made within ttl of now (0 without one), and whether the
// compacted context's generation changed since that one (a compaction swapped in while
// the cache held the old prefix). remember puts the new requests in the memo: a side
// request (a title, a router's check) is compared, not remembered, so that the next
// turn compares with the turn before.
func (m *prefixMemo) record(conv string, client, compacted sentChain, gen uint64, now time.Time, ttl time.Duration, remember bool) (clientPrefix, compactedPrefix int64, swap bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.convs[conv]
	if prev != nil && now.Sub(prev.at) <= ttl {
		clientPrefix, compactedPrefix = prev.client.common(client), prev.compacted.common(compacted)
		swap = prev.gen != gen
	}
	if !remember {
		return clientPrefix, compactedPrefix, swap
	}
	if prev != nil {
		m.bytes -= prev.cost(conv)
		delete(m.convs, conv)
	}
	p := &sentPair{client: client, compacted: compacted, gen: gen, at: now}
	n := p.cost(conv)
	if n > m.max {
		return clientPrefix, compactedPrefix, swap
	}
	for c, q := range m.convs { // over the bound: any (the map's order)
		if m.bytes+n <= m.max {
			break
		}
		m.bytes -= q.cost(c)
		delete(m.convs, c)
	}
	m.convs[conv] = p
	m.bytes += n
	return clientPrefix, compactedPrefix, swap
}

// forget drops conv (its ledger entries were not booked: nothing to compare with).
func (m *prefixMemo) forget(conv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.convs[conv]; p != nil {
		m.bytes -= p.cost(conv)
		delete(m.convs, conv)
	}
}

// bookSent books the exchange's sent entry: what the client sent and what the
// compacted request holds, each with the prefix a prompt cache could serve. reserve is
// the request's tokens besides its messages (tools, a response format), in both.
func (x *exchange) bookSent(req *Request, turn *Turn, reserve int) {
	x.book(req, turn, reserve, false)
}

// bookSentAsSent books the sent entry of a request that goes upstream as the client
// sent it in either mode (the API's compaction endpoint): the compacted request is the
// client's.
func (x *exchange) bookSentAsSent(req *Request, turn *Turn, reserve int) {
	x.book(req, turn, reserve, true)
}

func (x *exchange) book(req *Request, turn *Turn, reserve int, asSent bool) {
	if x.s.opts.Ledger == nil || turn == nil || turn.Context == nil {
		return
	}
	var view clientView
	if ts, ok := turn.state.(*turnState); ok && len(ts.view.chain) == len(req.Messages) {
		view = ts.view
	}
	client := chainOf(req.Messages, view.chain, view.tokens)
	compacted, compactedTokens := client, last(client.cum)
	if !asSent {
		compacted, compactedTokens = chainOf(turn.Context.Messages, nil, nil), int64(turn.Context.Tokens)
	}
	r := int64(reserve)
	e := &schemas.LedgerEntry{V: schemas.LedgerVersion, ID: newExchangeID(), Phase: schemas.LedgerSent, At: time.Now().UTC(),
		Conversation: turn.Conv, Mode: x.s.cfg.Mode, API: x.wire.Name(), Model: boundedName(modelOf(req, x.r.URL.Path)), Client: clientName(x.r.Header),
		ClientTokens: r + last(client.cum), CompactedTokens: r + compactedTokens, Generation: turn.Context.Generation}
	cp, kp, swap := x.s.prefixes.record(turn.Conv, client, compacted, turn.Context.Generation, time.Now(), x.s.cfg.CacheTTL, !x.side)
	if cp > 0 {
		e.ClientPrefixTokens = min(r+cp, e.ClientTokens)
	}
	if kp > 0 {
		e.CompactedPrefixTokens = min(r+kp, e.CompactedTokens)
	}
	e.Swap, e.WouldAnswer = swap, x.wouldAnswer
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), ledgerTimeout)
	defer cancel()
	if err := x.s.opts.Ledger.Append(ctx, e); err != nil {
		if !x.side {
			x.s.prefixes.forget(turn.Conv)
		}
		x.ledgerFailed(err)
		return
	}
	x.booked, x.report.Booked = e, e
}

// bookDone books the exchange's done entry: the upstream's status and usage (nil when
// it reported none). It runs once the response is written (end), on a goroutine of its
// own: the ledger never holds a reply back. A proxy that stops before it is written
// leaves the exchange unsettled, counted from its estimates.
func (x *exchange) bookDone(status int, usage *Usage) {
	sent := x.booked
	if sent == nil {
		return
	}
	x.booked = nil
	e := *sent
	e.Phase, e.At, e.Status, e.Answered = schemas.LedgerDone, time.Now().UTC(), status, x.answered
	e.ClientTokens, e.CompactedTokens, e.ClientPrefixTokens, e.CompactedPrefixTokens, e.Generation, e.Swap, e.WouldAnswer = 0, 0, 0, 0, 0, false, false
	if usage != nil && !x.answered {
		u := schemas.LedgerUsage{Input: clampTokens(usage.Input), CacheRead: clampTokens(usage.CacheRead),
			CacheWrite: clampTokens(usage.CacheWrite), Output: clampTokens(usage.Output)}
		// What an upstream reports is a hint: cache figures over the input are cut to it.
		u.CacheRead = min(u.CacheRead, u.Input)
		u.CacheWrite = min(u.CacheWrite, u.Input-u.CacheRead)
		e.Usage = &u
	}
	s := x.s
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), ledgerTimeout)
		defer cancel()
		if err := s.opts.Ledger.Append(ctx, &e); err != nil {
			s.ledgerFailed(err)
		}
	}()
}

// waitLedger waits, at most ledgerTimeout, for the done entries still being booked.
func (s *Server) waitLedger() {
	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(ledgerTimeout):
	}
}

// ledgerFailed reports a sent entry the ledger did not take: the exchange went on (the
// ledger never holds a request back past ledgerTimeout), so its figures are missing.
func (x *exchange) ledgerFailed(err error) {
	x.report.LedgerFailures++
	x.s.ledgerFailed(err)
}

// ledgerFailed counts an entry the ledger did not take, and logs it at most once a
// minute (a ledger stream missing or unreachable fails every exchange).
func (s *Server) ledgerFailed(err error) {
	s.ledgerErrs.Add(1)
	now := time.Now().UnixNano()
	if last := s.ledgerLogged.Load(); now-last < int64(time.Minute) || !s.ledgerLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn().Err(err).Int64("failures", s.ledgerErrs.Load()).
		Msg("proxy: the savings ledger did not take an entry; the exchange went on (logged at most once a minute)")
}

func last(cum []int64) int64 {
	if len(cum) == 0 {
		return 0
	}
	return cum[len(cum)-1]
}

func clampTokens(n int) int64 {
	return min(max(int64(n), 0), schemas.MaxLedgerTokens)
}

// boundedName is s cut to the ledger's bound on a name (a rune cut in two dropped),
// without control characters: a model name comes from the client.
func boundedName(s string) string {
	if len(s) > schemas.MaxLedgerName {
		s = s[:schemas.MaxLedgerName]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
}

// bookAnswered books an exchange Compactor answered itself (an agent's request to
// summarize its conversation, answered from the summary): the request the client sent
// and the compacted context the answer came from, then, once answered, its done entry
// with no usage: no model was called.
func (x *exchange) bookAnswered(req *Request, turn *Turn) {
	x.bookSent(req, turn, reserve(req.Body))
	x.status, x.answered = http.StatusOK, true
}

// modelOf is the model a request asks for: its model field, else the model of a
// Gemini path (/v1beta/models/<model>:generateContent).
func modelOf(req *Request, path string) string {
	if req.Model != "" {
		return req.Model
	}
	_, rest, ok := strings.Cut(path, "/models/")
	if !ok {
		return ""
	}
	m, _, _ := strings.Cut(rest, ":")
	return m
}
