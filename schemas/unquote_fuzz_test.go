package schemas

import (
	"encoding/json"
	"testing"
)

// FuzzContentString: the one-pass decoding of a string content agrees with
// encoding/json on every input: the same text when both decode it, and the same
// verdict on whether it is a JSON string at all (Validate relies on it).
func FuzzContentString(f *testing.F) {
	for _, s := range []string{
		`"plain"`, `"tab\tnewline\nquote\"slash\/back\\"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`,
		`"bad \x"`, `"ctl ` + "\x01" + `"`, `"a"b"`, `"unterminated`, `""`, `"\u12"`, `"é ü 中"`,
		`"` + "\xff" + `"`, ` "spaced" `, `"\uDFFF\uD800"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var want string
		err := json.Unmarshal(raw, &want)
		trimmed := trimJSONSpace(raw)
		isStringLiteral := err == nil && len(trimmed) > 0 && trimmed[0] == '"'
		if got := scanJSONString(trimmed) != notAString; got != isStringLiteral && len(trimmed) > 0 && trimmed[0] == '"' {
			t.Fatalf("scanJSONString(%q) says a string: %v; encoding/json: %v (%v)", raw, got, isStringLiteral, err)
		}
		if !isStringLiteral {
			return
		}
		if got := (Content{raw: raw}).String(); got != want {
			t.Fatalf("String() of %q = %q; encoding/json: %q", raw, got, want)
		}
		if s, ok := unquote(trimmed); ok && s != want {
			t.Fatalf("unquote(%q) = %q; encoding/json: %q", raw, s, want)
		}
	})
}
