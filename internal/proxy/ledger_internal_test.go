package proxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// memLedger keeps what the proxy books, in order; fail, when set, is every append's error.
type memLedger struct {
	mu      sync.Mutex
	entries []schemas.LedgerEntry
	fail    error
}

func (l *memLedger) Append(_ context.Context, e *schemas.LedgerEntry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.entries = append(l.entries, *e)
	return nil
}

func (l *memLedger) all() []schemas.LedgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]schemas.LedgerEntry(nil), l.entries...)
}

// waitEntries waits until the ledger holds n entries (the done entry is booked before
// the response ends, but a test reads the response first).
func (l *memLedger) waitEntries(t *testing.T, n int) []schemas.LedgerEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if es := l.all(); len(es) >= n {
			return es
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ledger holds %d entries; want %d", len(l.all()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// In shadow mode the upstream gets the client's request byte for byte, while the
// ledger books what rewrite mode would have sent; a rewrite proxy given the same turn
// books the same compacted request, and sends what it booked. The reply's usage, being
// the client's request's, is not stored to calibrate the conversation's estimate.
func TestShadowSendsTheClientsBytesAndBooksWhatRewriteSends(t *testing.T) {
	books := map[string]*memLedger{}
	sent := map[string][]byte{}
	for _, mode := range []string{ModeShadow, ModeRewrite} {
		up := newFakeUpstream(t, replyJSON("fine"))
		led := &memLedger{}
		p := newTestProxy(t, up, func(c *Config, o *Options) { c.Mode, o.Ledger = mode, led })
		resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "sh1", "User-Agent", "claude-cli/1.0.83 (external, cli)")
		if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != `{"reply":"fine","usage":{"in":5,"out":2}}` {
			t.Fatalf("%s: %d %s", mode, resp.StatusCode, got)
		}
		reqs := up.requests()
		if len(reqs) != 1 {
			t.Fatalf("%s: the upstream got %d requests", mode, len(reqs))
		}
		sent[mode] = reqs[0].body
		books[mode] = led
		es := led.waitEntries(t, 2)
		s, d := es[0], es[1]
		if s.Phase != schemas.LedgerSent || d.Phase != schemas.LedgerDone || s.ID != d.ID || s.Mode != mode || s.Client != "claude-cli" || s.Conversation != "sh1" {
			t.Fatalf("%s: booked %+v then %+v", mode, s, d)
		}
		if d.Status != 200 || d.Usage == nil || d.Usage.Input != 5 || d.Usage.Output != 2 {
			t.Fatalf("%s: done entry %+v, usage %+v; want 200 and the upstream's usage", mode, d, d.Usage)
		}
		_, fin := p.convs.calls()
		if len(fin) != 1 {
			t.Fatalf("%s: %d replies stored", mode, len(fin))
		}
		if mode == ModeShadow && fin[0].usage != nil {
			t.Errorf("shadow: the reply was stored with the usage of the uncompacted request: %+v", fin[0].usage)
		}
		if mode == ModeRewrite && fin[0].usage == nil {
			t.Errorf("rewrite: the reply was stored without its usage")
		}
		if mode == ModeShadow && resp.Header.Get(StatusHeader) != StatusShadow {
			t.Errorf("shadow: %s = %q", StatusHeader, resp.Header.Get(StatusHeader))
		}
	}
	if !bytes.Equal(sent[ModeShadow], []byte(chatBody)) {
		t.Errorf("shadow: the upstream got %s; want the client's bytes %s", sent[ModeShadow], chatBody)
	}
	if bytes.Equal(sent[ModeRewrite], []byte(chatBody)) {
		t.Error("rewrite: the upstream got the client's request, not the compacted one")
	}
	sh, rw := books[ModeShadow].all()[0], books[ModeRewrite].all()[0]
	if sh.CompactedTokens != rw.CompactedTokens || sh.ClientTokens != rw.ClientTokens || sh.CompactedTokens >= sh.ClientTokens {
		t.Fatalf("shadow booked client %d, compacted %d; rewrite %d, %d: want the same, compacted below client",
			sh.ClientTokens, sh.CompactedTokens, rw.ClientTokens, rw.CompactedTokens)
	}
	// What rewrite booked is what it sent: the compacted context (11 tokens) and the
	// body besides its messages, 4 bytes a token.
	if want := int64(11 + reserve([]byte(chatBody))); rw.CompactedTokens != want {
		t.Errorf("rewrite booked %d compacted tokens; want %d", rw.CompactedTokens, want)
	}
}

// The sent entry is acknowledged before the request goes upstream: an exchange the
// upstream may bill is in the ledger whatever happens to the proxy after.
func TestLedgerBooksTheExchangeBeforeTheUpstreamGetsIt(t *testing.T) {
	led := &memLedger{}
	var before []schemas.LedgerEntry
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		before = led.all()
		replyJSON("ok")(w, r)
	})
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Ledger = led })
	readAll(t, p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "b1"))
	if len(before) != 1 || before[0].Phase != schemas.LedgerSent {
		t.Fatalf("when the upstream got the request the ledger held %+v; want the sent entry", before)
	}
	led.waitEntries(t, 2)
}

// A ledger that refuses never holds a request back: the exchange goes on, counted.
func TestALedgerThatFailsNeverStopsTheRequest(t *testing.T) {
	led := &memLedger{fail: errors.New("no responders")}
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Ledger = led })
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "f1")
	if readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if p.srv.ledgerErrs.Load() != 1 {
		t.Errorf("ledger failures counted: %d; want 1 (the sent entry; no done entry without it)", p.srv.ledgerErrs.Load())
	}
}

// In shadow mode nothing the proxy decides reaches the client: a turn it cannot
// prepare (another credential's conversation) is forwarded as sent, not refused.
func TestShadowForwardsWhatRewriteWouldRefuse(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	led := &memLedger{}
	p := newTestProxy(t, up, func(c *Config, o *Options) { c.Mode, o.Ledger = ModeShadow, led })
	p.convs.prepareErr = ErrNotOwner
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "o1")
	if readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d; want the upstream's 200", resp.StatusCode)
	}
	if reqs := up.requests(); len(reqs) != 1 || !bytes.Equal(reqs[0].body, []byte(chatBody)) {
		t.Fatalf("the upstream got %d requests; want the client's, as sent", len(reqs))
	}
	if es := led.all(); len(es) != 0 {
		t.Errorf("booked %d entries for a turn that was not prepared", len(es))
	}
}

// A conversation's next request within the cache's life shares its start with the
// previous one: the ledger books that prefix, on both sides; a compaction that changed
// the compacted context's generation is booked as a swap.
func TestLedgerBooksTheCachedPrefix(t *testing.T) {
	led := &memLedger{}
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Ledger = led })
	first := `{"messages":[{"role":"user","content":"hello there"}]}`
	second := `{"messages":[{"role":"user","content":"hello there"},{"role":"assistant","content":"ok"},{"role":"user","content":"more please"}]}`
	readAll(t, p.post(t, "/v1/chat/completions", first, ConversationHeader, "p1"))
	led.waitEntries(t, 2)
	readAll(t, p.post(t, "/v1/chat/completions", second, ConversationHeader, "p1"))
	es := led.waitEntries(t, 4)
	a, b := es[0], es[2]
	if a.ClientPrefixTokens != 0 || a.Swap {
		t.Errorf("the first request booked a prefix of %d, swap %v; want none", a.ClientPrefixTokens, a.Swap)
	}
	if b.ClientPrefixTokens <= 0 || b.ClientPrefixTokens >= b.ClientTokens {
		t.Errorf("the second request booked a client prefix of %d of %d; want the first message's", b.ClientPrefixTokens, b.ClientTokens)
	}
	// memConvs sends the client's last message only: the two compacted requests share nothing.
	if b.CompactedPrefixTokens != 0 {
		t.Errorf("compacted prefix %d; want 0", b.CompactedPrefixTokens)
	}
}

func TestClientName(t *testing.T) {
	for _, tt := range []struct{ ua, hdr, want string }{
		{"claude-cli/1.0.83 (external, cli)", "", "claude-cli"},
		{"codex_cli_rs/0.28.0 (Linux)", "", "codex_cli_rs"},
		{"GeminiCLI/0.1.5 (linux; x64)", "", "GeminiCLI"},
		{"OpenAI/JS 5.1.0", "", "OpenAI"},
		{"x", "my agent/2", "myagent2"},
		{"", "", ""},
		{"évil\x00name/1", "", "vilname"},
	} {
		h := http.Header{}
		h.Set("User-Agent", tt.ua)
		if tt.hdr != "" {
			h.Set(ClientHeader, tt.hdr)
		}
		if got := clientName(h); got != tt.want {
			t.Errorf("clientName(%q, %q) = %q; want %q", tt.ua, tt.hdr, got, tt.want)
		}
	}
}
