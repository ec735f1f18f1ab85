package triggers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// The trigger's estimate counts a value's evidence section with its summary, as readers
// show it: without it, a conversation whose section is large would be under-counted.
func TestEstimateCountsTheEvidenceSection(t *testing.T) {
	_, st := setup(t)
	tr := startWith(t, st, testConfig())
	// The value is written before the trigger first sees the conversation, so its first
	// sight reads it (a value written behind the trigger's back, with no event, would
	// not be noticed): the sequence it covers is another conversation's message.
	first := publish(t, st, "evid-before", text(40))
	v := &schemas.Result{SchemaVersion: 1, Conversation: "evid", Generation: 1, Summary: "what came before",
		EvidenceText: "[Messages through CHAT sequence 1 are summarized above.]\nFiles read: " + strings.Repeat("/repo/a.go, ", 100),
		TailStartSeq: first + 1, CoveredThroughSeq: first, LoadedThroughSeq: first, CreatedAt: time.Now().UTC()}
	if _, err := st.Results().Put(context.Background(), v, 0); err != nil {
		t.Fatal(err)
	}
	m := text(40)
	publish(t, st, "evid", m)
	sm := assemble.SummaryMessage(v)
	want := tokens.Message(&sm) + tokens.Message(&m)
	plain := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(assemble.SummaryPrefix + v.Summary)}
	if want-tokens.Message(&plain)-tokens.Message(&m) < 300 {
		t.Fatalf("the section adds only %d tokens: the test proves nothing", want-tokens.Message(&plain)-tokens.Message(&m))
	}
	waitFor(t, "the estimate to count the summary with its evidence and the tail", func() bool {
		got, _ := tr.b.TokensOf("evid")
		return got == want
	})
}
