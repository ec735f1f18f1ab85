package agenttest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// Shadow mode with the agents people run: every request the model gets is one the
// agent sent, byte for byte, while the proxy stores and compacts the conversation and
// books what rewrite mode would have sent; the agent's session goes on as without
// Compactor.
func TestClaudeCodeInShadowMode(t *testing.T) { runShadow(t, claudeCode, 32000) }
func TestCodexInShadowMode(t *testing.T)      { runShadow(t, codex, 16000) } // Codex cuts each output to about 2,600 tokens

// shadowPrompts is how many prompts a shadow session runs: enough for the
// conversation to cross its compaction threshold (see the window notes above).
const shadowPrompts = 7

func runShadow(t *testing.T, a agent, w int) {
	jsDir(t, a.bin)
	s := startStack(t, w, command, "COMPACTOR_PROXY_MODE=shadow")
	ss := newSession(t, a, s, s.rec.URL)
	for i := 1; i <= shadowPrompts; i++ {
		ss.run(fmt.Sprintf("Prompt %d: run the command again.", i))
	}
	sent := map[[32]byte]bool{}
	for _, ex := range s.rec.exchanges() {
		sent[sha256.Sum256(ex.Body)] = true
	}
	agent := s.fake.Agent()
	if len(agent) < shadowPrompts {
		t.Fatalf("%s: the model got %d requests for %d prompts", a.name, len(agent), shadowPrompts)
	}
	for i, r := range agent {
		if !sent[sha256.Sum256(r.Body)] {
			t.Errorf("%s: the model's request %d (%s, %d bytes) is not one the agent sent: shadow mode changed it", a.name, i, r.Path, len(r.Body))
		}
	}
	// The ledger: every exchange booked in shadow mode, settled with the model's usage,
	// and once the conversation was compacted, what rewrite would have sent is less.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := jetstream.Open(ctx, s.nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var booked, settled, smaller int
	var entries []*schemas.LedgerEntry
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries = entries[:0]
		if _, err := st.Ledger().Read(ctx, jetstream.LedgerRead{}, func(e *schemas.LedgerEntry) error { entries = append(entries, e); return nil }); err != nil {
			t.Fatal(err)
		}
		booked, settled = 0, 0
		for _, e := range entries {
			if e.Phase == schemas.LedgerSent {
				booked++
			} else if e.Usage != nil {
				settled++
			}
		}
		if settled >= booked || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, e := range entries {
		if e.Mode != schemas.LedgerShadow {
			t.Fatalf("%s: an exchange booked in mode %q", a.name, e.Mode)
		}
		if e.Phase == schemas.LedgerSent && e.CompactedTokens < e.ClientTokens {
			smaller++
		}
	}
	t.Logf("%s: %d model requests, %d exchanges booked, %d settled with usage, %d with a smaller compacted request, %d summaries",
		a.name, len(agent), booked, settled, smaller, s.fake.Summaries())
	if booked < shadowPrompts || settled < booked {
		t.Errorf("%s: %d exchanges booked, %d settled with usage; want at least %d, all settled", a.name, booked, settled, shadowPrompts)
	}
	if smaller == 0 {
		t.Errorf("%s: no exchange booked a compacted request smaller than the agent's (%d summaries made)", a.name, s.fake.Summaries())
	}
}
