package schemas

import (
	"encoding/json"
	"testing"
)

// scanJSONString skips plain bytes eight at a time: a quote, a backslash or a control
// character at any place of a long literal (and a byte of 0x80 and up, which is plain
// to it) gives the verdict encoding/json gives.
func TestScanJSONStringEightAtATime(t *testing.T) {
	body := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	for _, special := range []string{`"`, `\`, `\n`, `\u00e9`, `\x`, "\x00", "\x1f", "\x7f", "\x80", "é", " ", "~"} {
		for at := 0; at <= len(body); at++ {
			raw := []byte(`"`)
			raw = append(raw, body[:at]...)
			raw = append(raw, special...)
			raw = append(raw, body[at:]...)
			raw = append(raw, '"')
			var s string
			want := json.Unmarshal(raw, &s) == nil
			if got := scanJSONString(raw) != notAString; got != want {
				t.Fatalf("scanJSONString(%q) says a string: %v; encoding/json: %v", raw, got, want)
			}
		}
	}
}

func FuzzPlainJSON8(f *testing.F) {
	f.Add(uint64(0x2020202020202020))
	f.Add(uint64(0x5c61616161616161))
	f.Add(uint64(0x80ff1f2261616161))
	f.Fuzz(func(t *testing.T, x uint64) {
		want := true
		for i := range 8 {
			if !plainByte[byte(x>>(8*i))] {
				want = false
			}
		}
		if got := plainJSON8(x); got != want {
			t.Fatalf("plainJSON8(%#x) = %v; byte by byte: %v", x, got, want)
		}
	})
}
