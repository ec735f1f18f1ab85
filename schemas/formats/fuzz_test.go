package formats_test

import (
	"bytes"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
	"github.com/compactor/compactor/schemas/rounds"
)

// FuzzRender renders fuzzed conversations (hostile JSONL lines included) compacted at
// a fuzzed point: no panic, every rendering passes its provider's validator, a second
// rendering is the same bytes, and the prefix does not change when the tail is cut
// shorter at a unit boundary.
func FuzzRender(f *testing.F) {
	f.Add([]byte{2, 9, 0, 40, 3, 1, 4, 0, 30, 4, 1, 20, 1, 9}, []byte(nil), uint8(3), uint8(2))
	f.Add([]byte{5, 5, 5, 5, 5, 5}, []byte(`{"role":"system","content":"be brief"}
{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}
{"role":"assistant","content":null,"tool_calls":[{"id":"t 1","type":"function","function":{"name":"ls","arguments":"[1"}}]}
{"role":"tool","tool_call_id":"t 1","content":[{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lG"}}]}
{"role":"user","content":[{"type":"text","text":"  "},{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}}]}
{"role":"system","content":"<later & rule>"}`), uint8(1), uint8(1))
	f.Fuzz(renderFuzzed)
}

// renderFuzzed is the body of FuzzRender.
func renderFuzzed(t *testing.T, ops, jsonl []byte, at, cut uint8) {
	es := corpustest.FuzzEntries(ops, jsonl)
	split := rounds.SnapForward(es, int(at)%(len(es)+1))
	value := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1, Summary: "fuzzed summary", TailStartSeq: 1}
	if split < len(es) {
		value.TailStartSeq = es[split].Seq
	} else if len(es) > 0 {
		value.TailStartSeq = es[len(es)-1].Seq + 1
	}
	var pinned []schemas.Entry
	for _, e := range es[:split] {
		if e.Err == nil && e.Message.Pinned() {
			pinned = append(pinned, e)
			value.PinnedSeqs = append(value.PinnedSeqs, e.Seq)
		}
	}
	tail := es[split:]
	full := assemble.Assemble(assemble.Input{Value: value, Pinned: pinned, Tail: tail}, assemble.Options{})
	short := assemble.Assemble(assemble.Input{Value: value, Pinned: pinned,
		Tail: tail[:rounds.SnapBack(tail, int(cut)%(len(tail)+1))]}, assemble.Options{})
	whole := assemble.Assemble(assemble.Input{Tail: es}, assemble.Options{})
	for _, name := range formats.Names() {
		f := formats.Format(name)
		var got [2]formats.Request
		for i, cx := range []*assemble.Context{&full, &short} {
			req, err := formats.Render(cx, f)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := validators[f](req.JSON); err != nil {
				t.Fatalf("%s: %v\n%s", f, err, req.JSON)
			}
			got[i] = req
		}
		if again, _ := formats.Render(&full, f); !bytes.Equal(again.JSON, got[0].JSON) {
			t.Fatalf("%s: a second rendering differs", f)
		}
		if got[0].Prefix != got[1].Prefix || !bytes.Equal(got[0].JSON[:got[0].Prefix], got[1].JSON[:got[1].Prefix]) {
			t.Fatalf("%s: the prefix depends on the tail:\n%s\n%s", f, got[0].JSON, got[1].JSON)
		}
		req, err := formats.Render(&whole, f)
		if err != nil {
			t.Fatalf("%s, never compacted: %v", f, err)
		}
		if err := validators[f](req.JSON); err != nil {
			t.Fatalf("%s, never compacted: %v\n%s", f, err, req.JSON)
		}
	}
}
