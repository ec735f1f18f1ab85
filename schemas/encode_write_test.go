package schemas

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Encode's string and tool-call writers write what encoding/json writes, byte for byte:
// a message's bytes decide whether a retry with its MsgID is the same message.
func FuzzWriteJSONString(f *testing.F) {
	for _, s := range []string{"", "user", "plain text", `say "hi"`, `a\b`, "<b>&</b>", "tab\tnew\nline\r",
		"\x00\x1f\x7f", "é ü 漢字", "\u2028\u2029", "bad \xff utf-8", `{"path":"a.go"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		writeJSONString(&b, s)
		want, _ := json.Marshal(s)
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("writeJSONString(%q) = %s; encoding/json writes %s", s, b.Bytes(), want)
		}
	})
}

func FuzzWriteToolCalls(f *testing.F) {
	f.Add("call_1", "function", "read", `{"path":"a.go"}`, "call_2", "<&>")
	f.Add("", "", "", "", "\u2028", "\xff")
	f.Fuzz(func(t *testing.T, id, typ, name, args, id2, args2 string) {
		for _, tcs := range [][]ToolCall{
			{{ID: id, Type: typ, Function: FunctionCall{Name: name, Arguments: args}}},
			{{ID: id, Type: typ, Function: FunctionCall{Name: name, Arguments: args}}, {ID: id2, Type: typ, Function: FunctionCall{Name: name, Arguments: args2}}},
		} {
			var b bytes.Buffer
			writeToolCalls(&b, tcs)
			want, err := json.Marshal(tcs)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("writeToolCalls = %s; encoding/json writes %s", b.Bytes(), want)
			}
		}
	})
}
