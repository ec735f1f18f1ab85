package schemas_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
)

// Invalid UTF-8 cannot round-trip through JSON: encoding/json would replace it with
// U+FFFD, a silent rewrite of the producer's bytes. It is refused with a clear error,
// at decode and at publish; NUL is data and round-trips.
func TestInvalidUTF8IsRefused(t *testing.T) {
	for _, raw := range []string{
		"{\"role\":\"user\",\"content\":\"ok \xff\xfe bad\"}",
		"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\xc3\"}]}",
		"{\"role\":\"user\",\"content\":\"x\",\"name\":\"\xed\xa0\x80\"}", // a surrogate
		"{\"role\":\"user\",\"content\":\"x\",\"meta\":{\"k\":\"\x80\"}}",
		"{\"role\":\"user\",\"content\":\"x\",\"extra\":{\"sig\":\"\xf8\"}}",
	} {
		_, err := schemas.DecodeMessage([]byte(raw))
		if !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("DecodeMessage(%q) = %v; want ErrInvalid naming UTF-8", raw, err)
		}
	}
	for name, m := range map[string]schemas.Message{
		"content":      {Role: schemas.RoleUser, Content: schemas.Text("a\xffb")},
		"name":         {Role: schemas.RoleUser, Content: schemas.Text("x"), Name: "\xff"},
		"reasoning":    {Role: schemas.RoleAssistant, Content: schemas.Text("x"), Reasoning: "r\xc0"},
		"meta value":   {Role: schemas.RoleUser, Content: schemas.Text("x"), Meta: map[string]string{"k": "\xff"}},
		"meta key":     {Role: schemas.RoleUser, Content: schemas.Text("x"), Meta: map[string]string{"\xff": "v"}},
		"tool call id": {Role: schemas.RoleTool, Content: schemas.Text("x"), ToolCallID: "c\xff"},
		"arguments": {Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function",
			Function: schemas.FunctionCall{Name: "f", Arguments: "{\"p\":\"\xff\"}"}}}},
	} {
		if err := m.Validate(); !errors.Is(err, schemas.ErrInvalid) || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: Validate() = %v; want ErrInvalid naming UTF-8", name, err)
		}
	}
}

func TestNULIsDataAndRoundTrips(t *testing.T) {
	raw := `{"role":"tool","content":"before\u0000after","tool_call_id":"c1"}`
	m, err := schemas.DecodeMessage([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Content.String(); got != "before\x00after" {
		t.Fatalf("content %q; want the NUL kept", got)
	}
	enc, err := m.Encode()
	if err != nil || string(enc) != raw {
		t.Fatalf("re-encoded %s, %v; want the same bytes", enc, err)
	}
	built := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("a\x00b")}
	if err := built.Validate(); err != nil {
		t.Fatalf("NUL in a Go string: %v; want it valid", err)
	}
	// A raw NUL byte inside a JSON string is not JSON.
	if _, err := schemas.DecodeMessage([]byte("{\"role\":\"user\",\"content\":\"a\x00b\"}")); !errors.Is(err, schemas.ErrInvalid) {
		t.Fatalf("raw NUL: got %v; want ErrInvalid", err)
	}
}
