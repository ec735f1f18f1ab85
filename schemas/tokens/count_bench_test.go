package tokens_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

func benchMessages() map[string][]byte {
	text := strings.Repeat("The build failed in step 3; see the log below.\n", 40)
	str, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(text)}).Encode()
	p1, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	p2 := json.RawMessage(`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`)
	parts, _ := (&schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(p1, p2, p1)}).Encode()
	return map[string][]byte{"string": str, "parts": parts}
}

// BenchmarkDecodeAndCount is what the trigger does with each chat message: decode and
// validate it, then count its tokens.
func BenchmarkDecodeAndCount(b *testing.B) {
	for name, data := range benchMessages() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for range b.N {
				m, err := schemas.DecodeMessage(data)
				if err != nil {
					b.Fatal(err)
				}
				if tokens.Message(&m) == 0 {
					b.Fatal("no tokens")
				}
			}
		})
	}
}

// BenchmarkCount is the token count of a decoded message alone.
func BenchmarkCount(b *testing.B) {
	for name, data := range benchMessages() {
		m, err := schemas.DecodeMessage(data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if tokens.Message(&m) == 0 {
					b.Fatal("no tokens")
				}
			}
		})
	}
}
