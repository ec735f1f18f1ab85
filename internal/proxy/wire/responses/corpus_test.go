package responses

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
	"github.com/compactor/compactor/schemas/rounds"
)

// TestCorpusThroughTheWire sends every corpus conversation, rendered as a Responses
// request (formats.Render), through Parse and Build: built from what it parses to, with
// the client's items and from the messages alone, it is the same request, and that
// request parses to the same messages (a fixed point). Built with the conversation
// compacted at its middle, the request holds every other field as sent and parses to
// the compacted context's messages, its tool calls paired.
func TestCorpusThroughTheWire(t *testing.T) {
	const head = `{"model":"gpt-5.1-codex","instructions":"You are Codex.","stream":true,"store":false,`
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			es := c.Entries
			whole := assemble.Assemble(assemble.Input{Tail: es}, assemble.Options{})
			r, err := formats.Render(&whole, formats.Responses)
			if err != nil {
				t.Fatal(err)
			}
			body := head + string(r.JSON[1:])
			req := fixedPoint(t, body)
			out, err := Responses().Build(req, wiretest.ContextOf(req.Messages))
			if err != nil || string(out) != body {
				t.Fatalf("not byte for byte: %v", err)
			}

			split := rounds.SnapForward(es, len(es)/2)
			value := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1,
				Summary: "Summary of " + c.Name, TailStartSeq: uint64(split) + 1}
			compacted := assemble.Assemble(assemble.Input{Value: value, Tail: es[split:]}, assemble.Options{})
			// The instructions' message first, as the conversation core keeps it.
			cx := compacted
			cx.Messages = append([]schemas.Message{req.Messages[0]}, compacted.Messages...)
			cx.Seqs = append([]uint64{1}, compacted.Seqs...)
			out, err = Responses().Build(req, &cx)
			if err != nil {
				t.Fatal(err)
			}
			before, _ := wire.FieldMap([]byte(body))
			after, _ := wire.FieldMap(out)
			for k, v := range before {
				if k != "input" && string(after[k]) != string(v) {
					t.Fatalf("%s changed: %s -> %s", k, v, after[k])
				}
			}
			again, err := Responses().Parse(out)
			if err != nil {
				t.Fatalf("the compacted request does not parse: %v", err)
			}
			// Consecutive assistant messages are one run of the model's items, read back
			// as one message.
			var want []schemas.Role
			for i, m := range cx.Messages {
				if m.Role != schemas.RoleAssistant || i == 0 || cx.Messages[i-1].Role != schemas.RoleAssistant {
					want = append(want, m.Role)
				}
			}
			if len(again.Messages) != len(want) {
				t.Fatalf("the compacted request has %d messages, want %d", len(again.Messages), len(want))
			}
			for i, r := range want {
				if again.Messages[i].Role != r {
					t.Fatalf("message %d: %s, sent as %s", i, r, again.Messages[i].Role)
				}
			}
			if err := wire.CheckPairs(again.Messages); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkWire is the proxy's own work on a request: Parse and Build of the largest
// corpus conversation, whole, as a Responses request; Build with the client's items
// (the whole input as sent) and from the messages alone.
func BenchmarkWire(b *testing.B) {
	c := corpustest.Largest(b, 1)[0]
	cx := assemble.Assemble(assemble.Input{Tail: c.Entries}, assemble.Options{})
	r, err := formats.Render(&cx, formats.Responses)
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"gpt-5.1-codex",` + string(r.JSON[1:]))
	for _, own := range []bool{true, false} {
		name := "own-items"
		if !own {
			name = "from-messages"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req, err := Responses().Parse(body)
				if err != nil {
					b.Fatal(err)
				}
				if !own {
					req.State = nil
				}
				if _, err := Responses().Build(req, wiretest.ContextOf(req.Messages)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
