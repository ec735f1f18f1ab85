package gemini_test

import (
	"bytes"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/gemini"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
	"github.com/compactor/compactor/schemas/rounds"
)

// TestCorpusThroughTheWire sends every corpus conversation, rendered as a Gemini
// request (formats.Gemini, ids on every call and response), through Parse and Build:
// the request built from the messages it parses to is the request sent. Then the
// parsed messages, stored and compacted at their middle, build a request that holds
// the summary, then the tail as the client sent it (parsed again, the same messages),
// every field but contents as sent.
func TestCorpusThroughTheWire(t *testing.T) {
	const head = `{"generationConfig":{"maxOutputTokens":1024,"thinkingConfig":{"includeThoughts":true}},"tools":[{"functionDeclarations":[]}],`
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			whole := assemble.Assemble(assemble.Input{Tail: c.Entries}, assemble.Options{})
			r, err := formats.Render(&whole, formats.Gemini)
			if err != nil {
				t.Fatal(err)
			}
			body := []byte(head + string(r.JSON[1:]))
			req, err := gemini.Gemini().Parse(body)
			if err != nil {
				t.Fatal(err)
			}
			if req.MaxOutput != 1024 {
				t.Fatalf("max output %d", req.MaxOutput)
			}
			out := wiretest.CheckBuild(t, gemini.Gemini(), req, "contents", "systemInstruction")
			if out == nil || !wiretest.JSONEqual(t, out, body) {
				t.Fatalf("the request built differs from the one sent:\n%.2000s\nsent\n%.2000s", out, body)
			}

			es := make([]schemas.Entry, len(req.Messages))
			for i, m := range req.Messages {
				es[i] = schemas.Entry{Seq: uint64(i + 1), Message: m}
			}
			split := rounds.SnapForward(es, len(es)/2)
			if split <= 0 || split >= len(es) {
				return
			}
			value := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1,
				Summary: "Summary of " + c.Name, TailStartSeq: uint64(split) + 1}
			compacted := assemble.Assemble(assemble.Input{Value: value, Tail: es[split:]}, assemble.Options{})
			out, err = gemini.Gemini().Build(req, &compacted)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := wire.FieldMap(body)
			after, err := wire.FieldMap(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"generationConfig", "tools"} {
				if !bytes.Equal(before[k], after[k]) {
					t.Fatalf("%s changed", k)
				}
			}
			again, err := gemini.Gemini().Parse(out)
			if err != nil {
				t.Fatalf("the compacted request does not parse: %v", err)
			}
			if !bytes.Contains(out, []byte("Summary of "+c.Name)) {
				t.Fatal("no summary in the compacted request")
			}
			// The tail, as parsed again, is the tail stored (the summary may share the
			// first user Content with the tail's first user message).
			tail := es[split:]
			got := again.Messages[len(again.Messages)-len(tail):]
			for i := range tail {
				if i == 0 && tail[0].Message.Role == schemas.RoleUser {
					continue
				}
				a, _ := tail[i].Message.Encode()
				b, _ := got[i].Encode()
				if !bytes.Equal(a, b) {
					t.Fatalf("tail message %d: stored %s, sent %s", i, a, b)
				}
			}
		})
	}
}
