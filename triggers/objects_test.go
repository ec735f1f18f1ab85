package triggers_test

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// A message over the max payload reaches the trigger as a stub: it is counted by its
// reference's tokens, as much as the whole message, without its object being fetched
// (here it was never stored), and its size fires the structural trigger.
func TestStubIsCountedByItsReference(t *testing.T) {
	nc, st := setup(t)
	reqs := watchRequests(t, nc, st)
	tr := start(t, st, func(s *policy.Settings) { s.ToolOutputTriggerTokens = 5000 })
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	big := schemas.Message{Role: schemas.RoleTool, ToolCallID: "c1", Content: schemas.Text(strings.Repeat("output ", 4000))} // 7,000 tokens
	stub, _, err := big.Offload("s", st.Config().ObjectsBucket, tokens.Stored(&big))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, st, "s", call)
	publish(t, st, "s", stub)
	want := tokens.Message(&call) + tokens.Message(&big)
	waitFor(t, "the stub to be counted", func() bool { got, _ := tr.b.TokensOf("s"); return got == want })
	waitFor(t, "a structural request", func() bool { return reqs.count() == 1 })
	if got := reqs.got[0]; got.Trigger != schemas.TriggerStructural || !strings.Contains(got.Reason, "tool_output_trigger_tokens 5000") {
		t.Fatalf("request %s %q; want a structural one for the large output", got.Trigger, got.Reason)
	}
}
