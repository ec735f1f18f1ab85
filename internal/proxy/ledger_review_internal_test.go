package proxy

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
)

// A side request of the conversation (OpenCode's title generator) between two turns
// replaces the turns' chains in the prefix memo: the next turn books no cache prefix,
// although a provider's cache would serve it from the first turn.
func TestASideRequestLeavesTheNextTurnsPrefix(t *testing.T) {
	led := &memLedger{}
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Ledger = led })
	first := `{"messages":[{"role":"user","content":"hello there, a long first message of the conversation"}]}`
	side := `{"messages":[{"role":"system","content":"You are a title generator"},{"role":"user","content":"hello there"}]}`
	second := `{"messages":[{"role":"user","content":"hello there, a long first message of the conversation"},{"role":"assistant","content":"ok"},{"role":"user","content":"more please"}]}`
	readAll(t, p.post(t, "/v1/chat/completions", first, ConversationHeader, "s1"))
	led.waitEntries(t, 2)
	readAll(t, p.post(t, "/v1/chat/completions", side, ConversationHeader, "s1"))
	led.waitEntries(t, 4)
	readAll(t, p.post(t, "/v1/chat/completions", second, ConversationHeader, "s1"))
	es := led.waitEntries(t, 6)
	if b := es[4]; b.ClientPrefixTokens == 0 {
		t.Errorf("the turn after a side request booked a client prefix of 0 of %d (the first turn's message is its start)", b.ClientTokens)
	}
}

// Shadow mode: a body over COMPACTOR_PROXY_MAX_BODY is refused by the proxy (413),
// not forwarded as the client sent it.
func TestShadowForwardsABodyOverTheLimit(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, o *Options) { c.Mode, o.Ledger, c.MaxBody = ModeShadow, &memLedger{}, 64 })
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "big")
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK || len(up.requests()) != 1 {
		t.Errorf("shadow: status %d, upstream got %d requests; want the request forwarded as sent", resp.StatusCode, len(up.requests()))
	}
}

// The prefix memo is bounded in bytes, whatever the conversations' shape: a client
// that makes a new conversation per request (ids at will, one message each) holds at
// most about maxPrefixBytes of heap. Before, the bound counted digests, and short
// conversations held 158 MiB under a "24 MiB" bound.
func TestPrefixMemoIsBoundedInBytes(t *testing.T) {
	const max = 4 << 20
	m := newPrefixMemo(max)
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	now := time.Now()
	for i := range 200000 {
		conv := fmt.Sprintf("conversation-%s-%d", strings.Repeat("x", 60), i)
		c := sentChain{chain: make([]Digest, 1), cum: []int64{10}}
		k := sentChain{chain: make([]Digest, 1), cum: []int64{10}}
		m.record(conv, c, k, 1, now, time.Minute, true)
	}
	runtime.GC()
	runtime.ReadMemStats(&b)
	heap := int64(b.HeapAlloc) - int64(a.HeapAlloc)
	t.Logf("%d conversations kept, %d bytes counted, %.1f MiB of heap", len(m.convs), m.bytes, float64(heap)/(1<<20))
	if m.bytes > max {
		t.Errorf("the memo counts %d bytes; bound %d", m.bytes, max)
	}
	if heap > 2*max {
		t.Errorf("the memo holds %d bytes of heap; its bound is %d (counted as %d)", heap, max, m.bytes)
	}
}

type slowLedger struct{ memLedger }

func (l *slowLedger) Append(ctx context.Context, e *schemas.LedgerEntry) error {
	if e.Phase == schemas.LedgerDone {
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.memLedger.Append(ctx, e)
}

// Shadow mode: the client's reply waits for the ledger's done entry (and the store of
// the reply) before it is written.
func TestAReplyNeverWaitsForTheLedger(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, o *Options) { c.Mode, o.Ledger = ModeShadow, &slowLedger{} })
	start := time.Now()
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "slow")
	readAll(t, resp)
	if d := time.Since(start); d > time.Second {
		t.Errorf("shadow: the upstream's reply reached the client after %v (a slow ledger)", d)
	}
}
