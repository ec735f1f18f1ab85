package assemble_test

import (
	"slices"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
)

// BenchmarkAssemble runs the reader algorithm over the largest conversation of the
// corpus, as loaded from the stream: never compacted (the whole history is the tail),
// compacted half-way (summary + tail), and cut at read time (MaxTokens).
// Run: go test ./schemas/assemble -bench . -benchmem -run '^$'
func BenchmarkAssemble(b *testing.B) {
	convs := corpustest.Load(b)
	largest := slices.MaxFunc(convs, func(x, y corpustest.Conversation) int { return x.Bytes - y.Bytes })
	es := largest.Entries
	half := len(es) / 2
	value := &schemas.Result{SchemaVersion: 1, Conversation: "bench", Generation: 1,
		Summary: "## Goal\nContinue the task.", TailStartSeq: es[half].Seq, CoveredThroughSeq: es[half-1].Seq}
	cases := []struct {
		name string
		in   assemble.Input
		opts assemble.Options
	}{
		{"whole", assemble.Input{Tail: es}, assemble.Options{}},
		{"summary+tail", assemble.Input{Value: value, Tail: es[half:]}, assemble.Options{}},
		{"max-tokens", assemble.Input{Tail: es}, assemble.Options{MaxTokens: 8000}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				assemble.Assemble(tc.in, tc.opts)
			}
		})
	}
}
