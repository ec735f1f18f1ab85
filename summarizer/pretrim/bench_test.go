package pretrim_test

import (
	"slices"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/summarizer/pretrim"
)

// BenchmarkPretrim pre-trims the largest conversation of the corpus as a worker does
// before summarizing: tool outputs capped, then the whole input cut to a budget.
// Run: go test ./summarizer/pretrim -bench . -benchmem -run '^$'
func BenchmarkPretrim(b *testing.B) {
	convs := corpustest.Load(b)
	largest := slices.MaxFunc(convs, func(x, y corpustest.Conversation) int { return x.Bytes - y.Bytes })
	msgs := largest.Messages()
	b.Run("ToolOutputs", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(largest.Bytes))
		for b.Loop() {
			pretrim.ToolOutputs(msgs, 2000)
		}
	})
	b.Run("TotalBudget", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(largest.Bytes))
		for b.Loop() {
			pretrim.TotalBudget(msgs, 16000)
		}
	})
}
