package schemas

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

// scanValidJSONString is the two passes it replaces (badUTF8, then scanJSONString) in
// one: on any input it finds the same first bad byte, unless the literal breaks off
// before it (then both call it no string), and the same kind of literal.
func TestScanValidJSONStringIsTheTwoPassesInOne(t *testing.T) {
	alphabet := []string{"a", "ü", "€", "𝄞", `"`, `\`, `\n`, `\u00e9`, `\u12`, `\x`, "\x01", "\x80", "\xc3", "\xe2\x82", "\xff", " ", "12345678"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		b := []byte{'"'}
		for range rng.IntN(24) {
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		if rng.IntN(4) != 0 {
			b = append(b, '"')
		}
		kind, bad := scanValidJSONString(b)
		wantKind, wantBad := scanJSONString(b), badUTF8(b)
		switch {
		case bad >= 0:
			if bad != wantBad {
				t.Fatalf("%q: bad byte at %d; want %d", b, bad, wantBad)
			}
		case wantBad >= 0:
			if kind != notAString || wantKind != notAString {
				t.Fatalf("%q: missed the bad byte at %d (kind %d, two passes %d)", b, wantBad, kind, wantKind)
			}
		case kind != wantKind:
			t.Fatalf("%q: kind %d; want %d", b, kind, wantKind)
		}
		if utf8.Valid(b) && bad >= 0 {
			t.Fatalf("%q: valid UTF-8 reported bad at %d", b, bad)
		}
	}
}
