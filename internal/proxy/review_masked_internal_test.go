package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// Review: the docs promise that what an agent masked or dropped "is never sent back to
// the model"; managedContext keeps that promise, but the answer to the same agent's
// compaction request is built from the stored tail, not the client's copies: Gemini
// CLI's masked tool output comes back whole in its <state_snapshot>, which the agent
// then sends the model as its history.
func TestReviewCompactionAnswerKeepsWhatTheAgentMasked(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		s, ctx := r2store(t, nc, st)
		opts := TurnOptions{Owner: "o", CacheTTL: time.Minute}
		turn := func(h []schemas.Message, reply string) {
			t.Helper()
			tr, err := s.Prepare(ctx, "mk", h, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Finish(ctx, tr, r2bot(reply), &Usage{Input: 100, Output: 10}); err != nil {
				t.Fatal(err)
			}
		}
		call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "gemini_0_run", Type: "function",
			Function: schemas.FunctionCall{Name: "run", Arguments: `{"command":"make"}`}}}}
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("you are an agent")}
		big := "FULL-OUTPUT " + strings.Repeat("line of build log\n", 50)
		h := []schemas.Message{sys, r2user("FACT-1 build it"), call, {Role: schemas.RoleTool, ToolCallID: "gemini_0_run", Content: schemas.Text(big)}}
		turn(h, "built")
		h = append(h, r2bot("built"), r2user("now test"))
		turn(h, "tested")
		h = append(h, r2bot("tested"))

		msgs, err := st.Chat().LoadLeader(ctx, "mk", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, rev, _ := st.Results().Get(ctx, "mk", true)
		v := &schemas.Result{SchemaVersion: 1, Conversation: "mk", Generation: 1, Summary: "SUMMARY: FACT-1",
			TailStartSeq: msgs[2].Seq, CoveredThroughSeq: msgs[2].Seq - 1, FirstSeq: msgs[0].Seq, CreatedAt: time.Now()}
		if _, err := st.Results().Put(ctx, v, rev); err != nil {
			t.Fatal(err)
		}

		masked := append([]schemas.Message(nil), h...)
		masked[3] = schemas.Message{Role: schemas.RoleTool, ToolCallID: "gemini_0_run", Content: schemas.Text("<tool_output_masked>\nline of build log\n</tool_output_masked>")}
		copts := opts
		copts.Compaction = true
		tr, err := s.Prepare(ctx, "mk", append(masked, r2user("Generate a new <state_snapshot> now")), copts)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(reviewSent(tr), "FULL-OUTPUT") {
			t.Fatalf("the model would be sent the masked output")
		}
		text, ok := compactionAnswer(tr, FormatStateSnapshot)
		if !ok || strings.Contains(text, "FULL-OUTPUT") {
			t.Fatalf("answered %v with what the agent masked: %q", ok, text)
		}
	})
}

func reviewSent(t *Turn) string {
	var b strings.Builder
	for _, m := range t.Context.Messages {
		b.WriteString(m.Content.String())
		b.WriteString("|")
	}
	return b.String()
}
