package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// ledgerEntries is every valid entry of conv in st's ledger.
func ledgerEntries(t *testing.T, st *jetstream.Store, conv string) []*schemas.LedgerEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*schemas.LedgerEntry
	if _, err := st.Ledger().Read(ctx, jetstream.LedgerRead{Conversation: conv}, func(e *schemas.LedgerEntry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// An agent's compaction request that Compactor answers from its summary calls no
// model: the ledger books it as answered, with no usage, beside the exchanges that did
// call the model. In shadow mode the same request goes to the model, as sent.
func TestLedgerBooksAnAnsweredCompactionAsNoModelCall(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		for _, mode := range []string{proxy.ModeRewrite, proxy.ModeShadow} {
			conv := "ans-" + mode
			a := newAnswerStackWith(t, nc, st, func(c *proxy.Config) { c.Mode = mode }, proxy.Options{Ledger: st.Ledger()})
			h := []string{"system", "you are an agent", "user", "FACT-9 is the port"}
			_, _ = a.chat(t, conv, false, h...)
			h = append(h, "assistant", "model reply 1", "user", "second")
			_, _ = a.chat(t, conv, false, h...)
			h = append(h, "assistant", "model reply 2")
			putValue(a.f, conv, 1, "SUMMARY: FACT-9 is the port.", "second")
			resp, body := a.chat(t, conv, false, append(h, "user", claudeCompact)...)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", mode, resp.StatusCode, body)
			}
			es := threeExchanges(t, st, conv, mode)
			last := es[5]
			switch mode {
			case proxy.ModeRewrite:
				if a.calls.Load() != 2 || !last.Answered || last.Usage != nil || last.Status != 200 || last.Phase != schemas.LedgerDone {
					t.Fatalf("rewrite: %d model calls; the answered exchange booked %+v", a.calls.Load(), last)
				}
			case proxy.ModeShadow:
				if a.calls.Load() != 3 || last.Answered || last.Usage == nil || last.Usage.Input != 10 {
					t.Fatalf("shadow: %d model calls; the compaction request booked %+v", a.calls.Load(), last)
				}
				// ... and booked as one rewrite mode would have answered: nothing sent.
				if s := es[4]; s.Phase != schemas.LedgerSent || !s.WouldAnswer {
					t.Fatalf("shadow: the compaction request's sent entry %+v; want would_answer", s)
				}
				if s := es[2]; s.WouldAnswer {
					t.Fatalf("shadow: an ordinary turn booked as one rewrite would answer: %+v", s)
				}
			}
			for _, e := range es[:4] {
				if e.Phase == schemas.LedgerDone && (e.Usage == nil || e.Usage.Input != 10 || e.Usage.Output != 2 || e.Answered) {
					t.Errorf("%s: a model call booked %+v", mode, e)
				}
				if e.Mode != mode {
					t.Errorf("booked in mode %q; the proxy runs %q", e.Mode, mode)
				}
			}
		}
	})
}

// A request of the Responses API's own compaction endpoint that goes to the provider
// (rewrite mode before a summary exists; shadow mode always) is booked like every
// request that calls the model: sent as the client sent it on both sides (rewrite mode
// too sends it as it came), settled with the usage the provider's response.compaction
// reports. Its reply, the provider's compaction, is relayed and not stored.
func TestLedgerBooksACompactEndpointRequestThatWentUpstream(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		for _, mode := range []string{proxy.ModeRewrite, proxy.ModeShadow} {
			conv := "cmp-" + mode
			a := newAnswerStackWith(t, nc, st, func(c *proxy.Config) { c.Mode = mode }, proxy.Options{Ledger: st.Ledger()})
			h := []string{"developer", "you are codex", "user", "FACT-5 lives in main.go"}
			_, _ = a.responses(t, "/v1/responses", conv, h...)
			h = append(h, "assistant", "model reply 1", "user", "second")
			_, _ = a.responses(t, "/v1/responses", conv, h...)
			h = append(h, "assistant", "model reply 2")
			stored := len(a.f.stored(conv))
			resp, body := a.responses(t, "/v1/responses/compact", conv, h...)
			if resp.StatusCode != 200 || !strings.Contains(body, `"encrypted_content":"opaque"`) || a.calls.Load() != 3 {
				t.Fatalf("%s: %d, %d upstream calls: %s", mode, resp.StatusCode, a.calls.Load(), body)
			}
			es := threeExchanges(t, st, conv, mode)
			sent, done := es[4], es[5]
			if sent.Phase != schemas.LedgerSent || sent.API != "responses" || sent.ClientTokens == 0 || sent.CompactedTokens != sent.ClientTokens || sent.Swap {
				t.Errorf("%s: the compact request's sent entry %+v; want the client's request on both sides", mode, sent)
			}
			if done.Phase != schemas.LedgerDone || done.ID != sent.ID || done.Status != 200 || done.Usage == nil ||
				done.Usage.Input != 40 || done.Usage.CacheRead != 30 || done.Usage.Output != 7 {
				t.Errorf("%s: the compact request's done entry %+v (usage %+v); want the provider's usage", mode, done, done.Usage)
			}
			if got := len(a.f.stored(conv)); got != stored {
				t.Errorf("%s: CHAT went from %d to %d messages: the provider's compaction was stored", mode, stored, got)
			}
		}
	})
}

// threeExchanges waits for conv's ledger to hold 3 exchanges, sent and done (the done
// entry is booked once the response is written), and returns them by exchange.
func threeExchanges(t *testing.T, st *jetstream.Store, conv, mode string) []*schemas.LedgerEntry {
	t.Helper()
	var es []*schemas.LedgerEntry
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if es = ledgerEntries(t, st, conv); len(es) >= 6 || time.Now().After(deadline) {
			break
		}
	}
	if len(es) != 6 {
		t.Fatalf("%s: the ledger holds %d entries; want 3 exchanges, sent and done", mode, len(es))
	}
	// A done entry is appended on a goroutine of its own: it may come after the next
	// exchange's sent entry. The exchanges are told apart by their ids.
	return byExchange(t, es)
}

// byExchange orders ledger entries as sent entries in the ledger's order, each followed
// by its done entry (when there is one).
func byExchange(t *testing.T, es []*schemas.LedgerEntry) []*schemas.LedgerEntry {
	t.Helper()
	done := map[string]*schemas.LedgerEntry{}
	for _, e := range es {
		if e.Phase == schemas.LedgerDone {
			done[e.ID] = e
		}
	}
	var out []*schemas.LedgerEntry
	for _, e := range es {
		if e.Phase == schemas.LedgerSent {
			out = append(out, e)
			if d := done[e.ID]; d != nil {
				out = append(out, d)
			}
		}
	}
	if len(out) != len(es) {
		t.Fatalf("the ledger holds a done entry without its sent entry: %d entries, %d paired", len(es), len(out))
	}
	return out
}
