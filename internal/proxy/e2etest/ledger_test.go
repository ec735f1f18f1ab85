package e2etest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// ledgerOf is every valid entry of the deployment's savings ledger, oldest first.
func (s *stack) ledgerOf(t *testing.T) []*schemas.LedgerEntry {
	t.Helper()
	st, err := jetstream.Open(ctxFor(t, 10*time.Second), s.nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out []*schemas.LedgerEntry
	stats, err := st.Ledger().Read(ctxFor(t, 10*time.Second), jetstream.LedgerRead{}, func(e *schemas.LedgerEntry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Invalid != 0 {
		t.Fatalf("the ledger holds %d entries that do not validate", stats.Invalid)
	}
	return out
}

// send posts body to path for conv with the wire's credential header, and reads the answer.
func (s *stack) send(t *testing.T, path, conv, body string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.proxy+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Compactor-Conversation", conv)
	req.Header.Set("User-Agent", "ledger-e2e/1.0")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two turns of a conversation on each wire, against the fake provider, whose usage
// (the input, the prefix it shares with the previous request as cached, cache writes,
// the output) is known: the ledger books each exchange once, sent then done, with the
// usage the provider reported, in each API's terms brought to one.
func TestLedgerBooksWhatEachWiresUpstreamReported(t *testing.T) {
	s := startStack(t)
	for _, w := range ledgerWires() {
		conv := "ledger-" + w.api
		for _, body := range []string{w.first, w.second} {
			if code, got := s.send(t, w.path, conv, body, w.headers...); code != http.StatusOK {
				t.Fatalf("%s: %d %s", w.api, code, got)
			}
		}
	}
	var agent []*fakeupstream.Request
	for _, r := range s.up.Agent() {
		if r.Usage != nil {
			agent = append(agent, r)
		}
	}
	if len(agent) != 8 {
		t.Fatalf("the provider answered %d agent requests with usage; want 8", len(agent))
	}
	var es []*schemas.LedgerEntry
	proctest.WaitFor(t, 10*time.Second, "16 ledger entries", func() error {
		if es = s.ledgerOf(t); len(es) < 16 {
			return fmt.Errorf("%d", len(es))
		}
		return nil
	})
	if len(es) != 16 {
		t.Fatalf("the ledger holds %d entries; want 16 (8 exchanges, each sent and done)", len(es))
	}
	sent := map[string]*schemas.LedgerEntry{}
	var done []*schemas.LedgerEntry
	for _, e := range es {
		if e.Phase == schemas.LedgerSent {
			sent[e.ID] = e
		} else {
			done = append(done, e)
		}
	}
	for i, r := range agent {
		d := done[i]
		se := sent[d.ID]
		if se == nil {
			t.Fatalf("exchange %d: done without sent", i)
		}
		want := schemas.LedgerUsage{Input: int64(r.Usage.Input), CacheRead: int64(r.Usage.CacheRead), CacheWrite: int64(r.Usage.CacheWrite), Output: int64(r.Usage.Output)}
		if d.Usage == nil || *d.Usage != want {
			t.Errorf("%s exchange %d: booked usage %+v; the provider reported %+v", r.API, i, d.Usage, want)
		}
		if se.API != r.API || se.Model != r.Model || se.Client != "ledger-e2e" || se.Mode != schemas.LedgerRewrite || d.Status != 200 {
			t.Errorf("%s exchange %d: sent %+v, done status %d", r.API, i, se, d.Status)
		}
		if se.ClientTokens <= 0 || se.CompactedTokens <= 0 {
			t.Errorf("%s exchange %d: client %d, compacted %d tokens", r.API, i, se.ClientTokens, se.CompactedTokens)
		}
		if i%2 == 1 && (se.ClientPrefixTokens <= 0 || r.Usage.CacheRead <= 0) {
			t.Errorf("%s second turn: booked client prefix %d, the provider cached %d; want both", r.API, se.ClientPrefixTokens, r.Usage.CacheRead)
		}
	}
}

// A proxy killed while the provider is answering: the exchange was booked before it
// went upstream, so it is in the ledger, unsettled; the client's retry through a new
// proxy process is booked as the second exchange it is. The ledger holds as many
// exchanges as the provider received: none lost, none doubled.
func TestLedgerKeepsAnExchangeWhoseProxyWasKilled(t *testing.T) {
	s := startStack(t)
	stalled, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s.up.Push(fakeupstream.Reply{Text: "a long answer", StallAfter: 1, Stalled: stalled, Release: release})
	body := `{"model":"gpt-ledger","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.proxy+"/v1/chat/completions", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Compactor-Conversation", "killed")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider never got the request")
	}
	s.proc.ExpectExit()
	s.proc.Signal(t, syscall.SIGKILL)
	if err := s.proc.Wait(t, 10*time.Second, "SIGKILL"); err == nil {
		t.Log("killed")
	}
	es := s.ledgerOf(t)
	if len(es) != 1 || es[0].Phase != schemas.LedgerSent || es[0].Conversation != "killed" {
		t.Fatalf("after the kill the ledger holds %+v; want the exchange's sent entry", es)
	}
	// The client retries through a proxy started again.
	s.proc = proctest.Start(t, "compactor serve (proxy, again)", proctest.Compactor(t), []string{"serve"}, s.env)
	s.waitReady(t)
	if code, got := s.send(t, "/v1/chat/completions", "killed", strings.Replace(body, `"stream":true,`, "", 1)); code != http.StatusOK {
		t.Fatalf("retry: %d %s", code, got)
	}
	proctest.WaitFor(t, 10*time.Second, "the retry's entries", func() error {
		if es = s.ledgerOf(t); len(es) < 3 {
			return fmt.Errorf("%d", len(es))
		}
		return nil
	})
	ids := map[string]int{}
	for _, e := range es {
		ids[e.ID]++
	}
	if n := len(s.up.Agent()); len(ids) != n || len(es) != 3 {
		t.Fatalf("the ledger holds %d entries of %d exchanges; the provider received %d requests", len(es), len(ids), n)
	}
}

type wireTurns struct {
	api, path, model string
	headers          []string
	first, second    string
}

func ledgerWires() []wireTurns {
	long := strings.Repeat("the build log says the linker failed on libfoo. ", 20)
	return []wireTurns{
		{api: "openai", path: "/v1/chat/completions", model: "gpt-ledger", headers: []string{"Authorization", "Bearer sk-client"},
			first:  `{"model":"gpt-ledger","messages":[{"role":"user","content":"` + long + `"}]}`,
			second: `{"model":"gpt-ledger","messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"ok"},{"role":"user","content":"and then?"}]}`},
		{api: "anthropic", path: "/v1/messages", model: "claude-ledger", headers: []string{"x-api-key", "sk-ant-client", "anthropic-version", "2023-06-01"},
			first:  `{"model":"claude-ledger","max_tokens":100,"messages":[{"role":"user","content":"` + long + `"}]}`,
			second: `{"model":"claude-ledger","max_tokens":100,"messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"and then?","cache_control":{"type":"ephemeral"}}]}]}`},
		{api: "responses", path: "/v1/responses", model: "gpt-ledger-r", headers: []string{"Authorization", "Bearer sk-client"},
			first:  `{"model":"gpt-ledger-r","input":[{"role":"user","content":"` + long + `"}]}`,
			second: `{"model":"gpt-ledger-r","input":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"ok"},{"role":"user","content":"and then?"}]}`},
		{api: "gemini", path: "/v1beta/models/gemini-ledger:generateContent", model: "gemini-ledger", headers: []string{"x-goog-api-key", "g-client"},
			first:  `{"contents":[{"role":"user","parts":[{"text":"` + long + `"}]}]}`,
			second: `{"contents":[{"role":"user","parts":[{"text":"` + long + `"}]},{"role":"model","parts":[{"text":"ok"}]},{"role":"user","parts":[{"text":"and then?"}]}]}`},
	}
}
