package proxy

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

// BenchmarkWire is the proxy's own work on a request: Parse and Build of the largest
// corpus conversation, whole, in each API's form.
func BenchmarkWire(b *testing.B) {
	c := corpustest.Largest(b, 1)[0]
	cx := assemble.Assemble(assemble.Input{Tail: c.Entries}, assemble.Options{})
	for _, w := range []struct {
		wire   Wire
		format formats.Format
		head   string
	}{
		{OpenAI(), formats.OpenAI, `{"model":"gpt-4o",`},
		{Anthropic(), formats.Anthropic, `{"model":"claude-sonnet-4-5","max_tokens":1024,`},
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
