package tokens_test

import (
	"slices"
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// corpusMessages is every message of the corpus, in file order.
func corpusMessages(b *testing.B) []schemas.Message {
	var out []schemas.Message
	for _, c := range corpustest.Load(b) {
		out = append(out, c.Messages()...)
	}
	return out
}

// BenchmarkEstimate counts every corpus message with chars/4 (what the trigger does per
// message when the producer sent no count); ns/op is per message.
// Run: go test ./schemas/tokens -bench . -benchmem -run '^$'
func BenchmarkEstimate(b *testing.B) {
	msgs := corpusMessages(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tokens.Estimate(&msgs[i%len(msgs)])
		i++
	}
}

// BenchmarkMessages counts the largest conversation of the corpus in one call.
func BenchmarkMessages(b *testing.B) {
	convs := corpustest.Load(b)
	largest := slices.MaxFunc(convs, func(x, y corpustest.Conversation) int { return x.Bytes - y.Bytes })
	msgs := largest.Messages()
	b.ReportAllocs()
	b.SetBytes(int64(largest.Bytes))
	for b.Loop() {
		tokens.Messages(msgs)
	}
}
