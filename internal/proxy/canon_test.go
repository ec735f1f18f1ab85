package proxy

import (
	"testing"

	"github.com/compactor/compactor/schemas"
)

// Two messages are the same when the model reads the same: a string and one text
// block, split text blocks, tool arguments re-encoded; Compactor's metadata, reasoning
// and extra do not count. A change of role, text, tool call or its arguments does.
func TestCanonical(t *testing.T) {
	text := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello world")}
	block := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts([]byte(`{"type":"text","text":"hello world","cache_control":{"type":"ephemeral"}}`))}
	split := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts([]byte(`{"type":"text","text":"hello "}`), []byte(`{"type":"text","text":"world"}`))}
	meta := text
	meta.Meta = map[string]string{"pin": "true", MetaPos: "3"}
	meta.Reasoning = "thought"
	call := func(args string) schemas.Message {
		return schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "c1", Type: "function",
			Function: schemas.FunctionCall{Name: "read", Arguments: args}}}}
	}
	same := [][2]schemas.Message{{text, block}, {text, split}, {text, meta},
		{call(`{"b":1,"a":"x"}`), call(`{ "a": "x", "b": 1 }`)}}
	for i, p := range same {
		if string(Canonical(&p[0])) != string(Canonical(&p[1])) {
			t.Errorf("pair %d: %s and %s differ", i, Canonical(&p[0]), Canonical(&p[1]))
		}
	}
	other := text
	other.Role = schemas.RoleAssistant
	image := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts([]byte(`{"type":"text","text":"hello world"}`), []byte(`{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}`))}
	differ := [][2]schemas.Message{{text, other}, {text, {Role: schemas.RoleUser, Content: schemas.Text("hello World")}},
		{text, image}, {call(`{"a":1}`), call(`{"a":2}`)}, {call(`{"a":1}`), call(`not json`)}}
	for i, p := range differ {
		if string(Canonical(&p[0])) == string(Canonical(&p[1])) {
			t.Errorf("pair %d: %s and %s are the same", i, Canonical(&p[0]), Canonical(&p[1]))
		}
	}
	// Fields are length-prefixed: moving text between fields changes the form.
	a := schemas.Message{Role: schemas.RoleUser, Name: "ab", Content: schemas.Text("c")}
	b := schemas.Message{Role: schemas.RoleUser, Name: "a", Content: schemas.Text("bc")}
	if string(Canonical(&a)) == string(Canonical(&b)) {
		t.Error("name and content run together")
	}
	// Links commit to the whole history before them.
	ab, ba := Chain([]schemas.Message{a, b}), Chain([]schemas.Message{b, a})
	if ab[1] == ba[1] {
		t.Error("the order of the history does not change its link")
	}
}

// FuzzCanonical: any content, parts or arguments give a form without a panic, the same
// each time.
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`"text"`), `{"a":1}`)
	f.Add([]byte(`[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"u"}}]`), `[1,2`)
	f.Add([]byte(`null`), ``)
	f.Fuzz(func(t *testing.T, content []byte, args string) {
		var c schemas.Content
		if err := c.UnmarshalJSON(content); err != nil {
			return
		}
		m := schemas.Message{Role: schemas.RoleAssistant, Content: c, ToolCalls: []schemas.ToolCall{{ID: "x", Function: schemas.FunctionCall{Name: "f", Arguments: args}}}}
		first := string(Canonical(&m))
		if again := string(Canonical(&m)); again != first {
			t.Fatal("not deterministic")
		}
	})
}
