package proxy

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// Cut to fit, a context loses its oldest messages after the summary, a tool call with
// all its results at once, never the summary or the newest message, and never leaves a
// result without its call.
func TestDropOldestKeepsToolRoundsWhole(t *testing.T) {
	big := strings.Repeat("x", 4000)
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}},
		{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	msgs := []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("summary")},
		call,
		{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(big)},
		{Role: schemas.RoleTool, ToolCallID: "b", Content: schemas.Text(big)},
		{Role: schemas.RoleUser, Content: schemas.Text(big)},
		{Role: schemas.RoleAssistant, Content: schemas.Text("ok")},
		{Role: schemas.RoleUser, Content: schemas.Text("newest " + big)},
	}
	cx := &assemble.Context{Messages: msgs, Seqs: []uint64{0, 5, 6, 7, 8, 9, 10}, HasSummary: true, Tokens: tokens.Messages(msgs)}
	limit := tokens.Messages(msgs[5:]) + tokens.Message(&msgs[0])
	dropOldest(cx, limit)
	if cx.Tokens > limit || cx.Tokens != tokens.Messages(cx.Messages) {
		t.Fatalf("tokens %d (counted %d), limit %d", cx.Tokens, tokens.Messages(cx.Messages), limit)
	}
	var roles []string
	for _, m := range cx.Messages {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, ","); got != "user,assistant,user" || cx.Messages[0].Content.String() != "summary" {
		t.Fatalf("kept %s", got)
	}
	if len(cx.Seqs) != len(cx.Messages) {
		t.Fatalf("%d seqs for %d messages", len(cx.Seqs), len(cx.Messages))
	}
}

// A request's tools take room in the window: what is outside its conversation is
// reserved, 4 bytes to a token.
func TestReserveCountsWhatIsNotTheConversation(t *testing.T) {
	tools := `"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]`
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 4000) + `"}],"system":"s",` + tools + `}`
	outside := len(body) - len(`[{"role":"user","content":"`+strings.Repeat("x", 4000)+`"}]`) - len(`"s"`)
	if got := reserve([]byte(body)); got != outside/4 || got < len(tools)/4 {
		t.Fatalf("reserve = %d; want %d", got, outside/4)
	}
	if got := reserve([]byte("not json")); got != 0 {
		t.Fatalf("reserve of a body that is no object = %d", got)
	}
}
