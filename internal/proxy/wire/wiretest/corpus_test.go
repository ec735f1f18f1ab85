package wiretest_test

import (
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/proxy/wire/anthropic"
	"github.com/compactor/compactor/internal/proxy/wire/openai"
	"github.com/compactor/compactor/internal/proxy/wire/wiretest"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
	"github.com/compactor/compactor/schemas/rounds"
)

// TestCorpusThroughTheWires sends every corpus conversation, as each API's request,
// through Parse and Build. The OpenAI request's messages are read exactly as the
// reader's and built back to the same request. The Anthropic request (rendered by
// formats.Render) parses, and Build of what it parses to gives the same request again
// (a fixed point: nothing drifts from turn to turn). Built with the conversation
// compacted at its middle, each request holds the compacted context's rendering and
// every other byte as the client sent it.
func TestCorpusThroughTheWires(t *testing.T) {
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			es := c.Entries
			split := rounds.SnapForward(es, len(es)/2)
			value := &schemas.Result{SchemaVersion: 1, Conversation: "c1", Generation: 1,
				Summary: "Summary of " + c.Name, TailStartSeq: uint64(split) + 1}
			whole := assemble.Assemble(assemble.Input{Tail: es}, assemble.Options{})
			compacted := assemble.Assemble(assemble.Input{Value: value, Tail: es[split:]}, assemble.Options{})
			for _, w := range []struct {
				wire   wire.Wire
				format formats.Format
				head   string
			}{
				{openai.OpenAI(), formats.OpenAI, `{"model":"gpt-4o","stream":true,`},
				{anthropic.Anthropic(), formats.Anthropic, `{"model":"claude-sonnet-4-5","max_tokens":1024,`},
			} {
				req := throughTheWire(t, w.wire, w.format, w.head, &whole)
				r, err := formats.Render(&compacted, w.format)
				if err != nil {
					t.Fatal(err)
				}
				out, err := w.wire.Build(req, &compacted)
				if err != nil {
					t.Fatal(err)
				}
				if string(out) != w.head+string(r.JSON[1:]) {
					t.Fatalf("%s: the compacted request is not the head sent and the context rendered", w.wire.Name())
				}
			}
		})
	}
}

// throughTheWire parses head + the rendering of cx and builds it back from what it
// parsed to: the same request.
func throughTheWire(t *testing.T, w wire.Wire, f formats.Format, head string, cx *assemble.Context) *wire.Request {
	t.Helper()
	r, err := formats.Render(cx, f)
	if err != nil {
		t.Fatal(err)
	}
	body := head + string(r.JSON[1:])
	req, err := w.Parse([]byte(body))
	if err != nil {
		t.Fatalf("%s: %v", w.Name(), err)
	}
	if f == formats.OpenAI {
		if len(req.Messages) != len(cx.Messages) {
			t.Fatalf("openai: %d messages, want %d", len(req.Messages), len(cx.Messages))
		}
		for i := range req.Messages {
			a, _ := req.Messages[i].Encode()
			b, _ := cx.Messages[i].Encode()
			if string(a) != string(b) {
				t.Fatalf("openai: message %d read as %s, sent %s", i, a, b)
			}
		}
	}
	out, err := w.Build(req, wiretest.ContextOf(req.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if !wiretest.JSONEqual(t, out, []byte(body)) {
		t.Fatalf("%s: the request built differs from the one sent:\n%.2000s\nsent\n%.2000s", w.Name(), out, body)
	}
	return req
}

// BenchmarkWire is the proxy's own work on a request: Parse and Build of the largest
// corpus conversation, whole, in each API's form.
func BenchmarkWire(b *testing.B) {
	c := corpustest.Largest(b, 1)[0]
	cx := assemble.Assemble(assemble.Input{Tail: c.Entries}, assemble.Options{})
	for _, w := range []struct {
		wire   wire.Wire
		format formats.Format
		head   string
	}{
		{openai.OpenAI(), formats.OpenAI, `{"model":"gpt-4o",`},
		{anthropic.Anthropic(), formats.Anthropic, `{"model":"claude-sonnet-4-5","max_tokens":1024,`},
	} {
		r, err := formats.Render(&cx, w.format)
		if err != nil {
			b.Fatal(err)
		}
		body := []byte(w.head + string(r.JSON[1:]))
		b.Run(w.wire.Name(), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req, err := w.wire.Parse(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.wire.Build(req, &cx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
