package e2etest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/schemas/assemble"
)

// summaryCarrier finds, in an Anthropic request as sent, the message (or the system)
// that carries Compactor's summary, and says whether one of its blocks is marked for
// prompt caching (cache_control); found is false when the request has no summary.
func summaryCarrier(t *testing.T, r *fakeupstream.Request) (found, marked bool, raw string) {
	t.Helper()
	parts := append([]json.RawMessage{r.System}, r.Messages...)
	for i, p := range parts {
		if !strings.Contains(string(p), "Summary of the earlier conversation") {
			continue
		}
		content := p
		if i > 0 {
			var m struct {
				Content json.RawMessage `json:"content"`
			}
			must(t, json.Unmarshal(p, &m))
			content = m.Content
		}
		var blocks []map[string]any
		if json.Unmarshal(content, &blocks) != nil {
			return true, false, string(p) // a string content carries no marker
		}
		for _, b := range blocks {
			if _, ok := b["cache_control"]; ok {
				return true, true, string(p)
			}
		}
		return true, false, string(p)
	}
	return false, false, ""
}

// On the Anthropic wire the summary block is marked for prompt caching (the issue: "the
// summary block marked for prompt caching where the API has it"), so the provider
// caches the compacted prefix up to it.
func TestAnthropicSummaryMarkedForCaching(t *testing.T) {
	if !strings.HasPrefix(assemble.SummaryPrefix, "[Summary of the earlier conversation") {
		t.Fatalf("the summary prefix changed: %q", assemble.SummaryPrefix)
	}
	s := startStack(t, fmt.Sprintf("COMPACTOR_CONTEXT_WINDOW=%d", loopWindow))
	l := newLoop(t, s, &anthropicAgent{root: s.proxy})
	for i := 0; i < 80; i++ {
		l.turn(i)
		reqs := s.up.Agent()
		found, marked, raw := summaryCarrier(t, reqs[len(reqs)-1])
		if !found {
			continue
		}
		if !marked {
			t.Fatalf("turn %d: the summary reached the upstream with no cache_control:\n%s", i, raw)
		}
		return
	}
	t.Fatalf("no summary reached the upstream in 80 turns (%d summarizer calls)", s.up.Summaries())
}
