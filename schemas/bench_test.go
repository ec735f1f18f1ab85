package schemas_test

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
)

// BenchmarkDecodeMessage decodes and validates every corpus message as the trigger,
// the workers and readers receive it (its wire JSON); ns/op is per message.
// Run: go test ./schemas -bench DecodeMessage -benchmem -run '^$'
func BenchmarkDecodeMessage(b *testing.B) {
	var payloads [][]byte
	size := 0
	for _, c := range corpustest.Load(b) {
		for _, m := range c.Messages() {
			data, err := m.Encode()
			if err != nil {
				b.Fatal(err)
			}
			payloads = append(payloads, data)
			size += len(data)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(size / len(payloads)))
	i := 0
	for b.Loop() {
		if _, err := schemas.DecodeMessage(payloads[i%len(payloads)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
