package formats_test

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/formats"
)

// BenchmarkRender renders the largest corpus conversation, whole, in each format.
func BenchmarkRender(b *testing.B) {
	c := corpustest.Largest(b, 1)[0]
	cx := assemble.Assemble(assemble.Input{Tail: c.Entries}, assemble.Options{})
	for _, name := range formats.Names() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(c.Bytes))
			for b.Loop() {
				if _, err := formats.Render(&cx, formats.Format(name)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
