package assemble

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
)

// BenchmarkAssembleLargest is the reader algorithm on the largest conversations the
// fuzz target builds (48 messages of 8,128 characters, tool rounds among them), with a
// budget that makes it cut nearly everything.
func BenchmarkAssembleLargest(b *testing.B) {
	for _, bc := range []struct {
		name string
		ops  []byte
	}{
		{"text", []byte(strings.Repeat("\x00\xff\x01\xff", 24))},
		{"rounds", []byte(strings.Repeat("\x03\x02\x00\x01\x04\x00\xff\x04\x01\xff", 12))},
		{"parts", []byte(strings.Repeat("\x07\xff", 48))},
	} {
		es := corpustest.FuzzEntries(bc.ops, nil)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				got := Assemble(Input{Tail: es}, Options{MaxTokens: 1})
				if !got.Degraded {
					b.Fatal("not cut")
				}
			}
		})
	}
}
