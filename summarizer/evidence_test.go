package summarizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/evidence"
	"github.com/compactor/compactor/summarizer/extractive"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// evidenceOff is window4000 with evidence_budget 0.
type evidenceOff struct{}

func (evidenceOff) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	s, err := window4000{}.Settings(ctx, conv)
	s.EvidenceBudget = 0
	return s, err
}

// publishRounds publishes n tool rounds of conv: a bash call reading /repo/pkg<i>/file.go
// (from first on) and a 1,600-character output. It returns the last sequence.
func publishRounds(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, first, n int) uint64 {
	t.Helper()
	var last uint64
	for i := first; i < first+n; i++ {
		args, _ := json.Marshal(map[string]string{"command": fmt.Sprintf("sed -n 1,80p /repo/pkg%d/file.go", i)})
		id := fmt.Sprintf("call%d", i)
		for _, m := range []schemas.Message{
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "bash", Arguments: string(args)}}}},
			{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(strings.Repeat("w", 1600))},
		} {
			data, _ := m.Encode()
			var err error
			if last, err = st.Chat().Publish(ctx, conv, data, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	return last
}

// compact queues a manual compaction of conv through upTo and waits for its outcome.
func compact(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, upTo uint64) *schemas.Result {
	t.Helper()
	req := request(t, ctx, st, conv, upTo)
	ev, err := st.Events().WaitOutcome(ctx, conv, req.RequestID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != schemas.EventCompleted {
		t.Fatalf("outcome %+v; want completed", ev)
	}
	v, _, err := st.Results().Get(ctx, conv, true)
	if err != nil || v == nil {
		t.Fatalf("value %v, %v", v, err)
	}
	return v
}

// A compaction stores the evidence of the messages it covers (here with the extractive
// summarizer, which knows nothing of it) and its section; the read context carries it
// after the summary and stays within target × W; the next compaction carries it forward.
func TestCompactionStoresEvidenceAndTheContextShowsIt(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	um := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("Fix PROJ-42: the parser drops the last token after 30s.")}
	user, _ := um.Encode()
	if _, err := st.Chat().Publish(ctx, "ev", user, ""); err != nil {
		t.Fatal(err)
	}
	last := publishRounds(t, ctx, st, "ev", 0, 8)
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})

	v := compact(t, ctx, st, "ev", last)
	s, _ := window4000{}.Settings(ctx, "ev")
	b := s.Budget()
	if v.Evidence == nil || v.Evidence.ThroughSeq != v.CoveredThroughSeq {
		t.Fatalf("evidence %+v; want one through covered_through_seq %d", v.Evidence, v.CoveredThroughSeq)
	}
	if err := v.Evidence.Validate(); err != nil {
		t.Fatal(err)
	}
	header := fmt.Sprintf(evidence.Header, v.CoveredThroughSeq)
	if !strings.HasPrefix(v.EvidenceText, header) {
		t.Fatalf("evidence_text %q does not start with %q", v.EvidenceText, header)
	}
	for _, want := range []string{"/repo/pkg0/file.go", "PROJ-42", "30s"} {
		if !strings.Contains(v.EvidenceText, want) {
			t.Errorf("evidence_text lacks %q:\n%s", want, v.EvidenceText)
		}
	}
	if n := s.Budget().EvidenceTokens(); len(v.EvidenceText)/4 > n {
		t.Fatalf("evidence_text of %d tokens over its budget %d", len(v.EvidenceText)/4, n)
	}

	c, err := pipeline.NewWithStore(nc, st).Context(ctx, "ev")
	if err != nil {
		t.Fatal(err)
	}
	if !c.HasSummary || !strings.HasSuffix(c.Messages[0].Content.String(), "\n\n"+v.EvidenceText) {
		t.Fatalf("the context's summary message does not end with the evidence section: %q", c.Messages[0].Content.String())
	}
	if c.Tokens > b.TargetTokens() || c.Tokens != v.TokensAfter {
		t.Fatalf("context of %d tokens (value says %d); want at most target × W = %d", c.Tokens, v.TokensAfter, b.TargetTokens())
	}

	// Carry-forward: pkg0 was covered by the first compaction, and is still there.
	last = publishRounds(t, ctx, st, "ev", 8, 8)
	v2 := compact(t, ctx, st, "ev", last)
	if v2.Generation != v.Generation+1 || v2.CoveredThroughSeq <= v.CoveredThroughSeq {
		t.Fatalf("second compaction generation %d through %d; want %d beyond %d", v2.Generation, v2.CoveredThroughSeq, v.Generation+1, v.CoveredThroughSeq)
	}
	has := func(ev *schemas.Evidence, value string) bool {
		for _, it := range ev.Items {
			if it.Value == value {
				return true
			}
		}
		return false
	}
	if !has(v2.Evidence, "/repo/pkg0/file.go") || !has(v2.Evidence, "PROJ-42") || !has(v2.Evidence, "/repo/pkg10/file.go") {
		t.Fatalf("second evidence did not carry the first forward and add the new: %+v", v2.Evidence.Items)
	}
	if !strings.HasPrefix(v2.EvidenceText, fmt.Sprintf(evidence.Header, v2.CoveredThroughSeq)) {
		t.Fatalf("second evidence_text header: %q", v2.EvidenceText)
	}
	c2, err := pipeline.NewWithStore(nc, st).Context(ctx, "ev")
	if err != nil {
		t.Fatal(err)
	}
	if c2.Tokens > b.TargetTokens() {
		t.Fatalf("context of %d tokens after the second compaction; want at most %d", c2.Tokens, b.TargetTokens())
	}
}

// evidence_budget 0 turns it off: the value has neither field, and the summary message
// is exactly what it was before evidence existed.
func TestEvidenceOff(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := publishRounds(t, ctx, st, "off", 0, 8)
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: evidenceOff{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	v := compact(t, ctx, st, "off", last)
	if v.Evidence != nil || v.EvidenceText != "" {
		t.Fatalf("evidence stored with evidence_budget 0: %+v %q", v.Evidence, v.EvidenceText)
	}
}

// Evidence does not outlive its messages: once the messages an item came from have
// left CHAT (the age limit, or a purge), the next compaction drops it; items whose
// messages are still there stay.
func TestEvidenceLeavesWithItsMessages(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := publishRounds(t, ctx, st, "aged", 0, 8)
	cfg := summarizer.DefaultConfig()
	cfg.Workers, cfg.FetchWait = 1, 200*time.Millisecond
	runPool(t, st, cfg, summarizer.Options{Policies: window4000{},
		Summarizers: func(policy.Settings) (summarizer.Summarizer, error) { return extractive.New(), nil }})
	v := compact(t, ctx, st, "aged", last)
	has := func(ev *schemas.Evidence, value string) bool {
		for _, it := range ev.Items {
			if it.Value == value {
				return true
			}
		}
		return false
	}
	if !has(v.Evidence, "/repo/pkg0/file.go") {
		t.Fatalf("first evidence lacks pkg0: %+v", v.Evidence.Items)
	}

	// The covered messages leave CHAT, as the age limit would take them.
	filter, err := st.Config().ChatFilter("aged")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := testJetStream(t, nc).Stream(ctx, st.Config().ChatStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, natsjs.WithPurgeSubject(filter), natsjs.WithPurgeSequence(v.TailStartSeq)); err != nil {
		t.Fatal(err)
	}
	last = publishRounds(t, ctx, st, "aged", 8, 8)
	v2 := compact(t, ctx, st, "aged", last)
	for _, it := range v2.Evidence.Items {
		if it.LastSeq < v.TailStartSeq {
			t.Errorf("item %s %q of sequence %d outlived its messages (the oldest left is %d)", it.Kind, it.Value, it.LastSeq, v.TailStartSeq)
		}
	}
	if has(v2.Evidence, "/repo/pkg0/file.go") || !has(v2.Evidence, "/repo/pkg10/file.go") {
		t.Fatalf("second evidence: %+v", v2.Evidence.Items)
	}
	if strings.Contains(v2.EvidenceText, "/repo/pkg0/") {
		t.Fatalf("the section still shows pkg0:\n%s", v2.EvidenceText)
	}
}
