package jetstream

import (
	"testing"
	"unicode/utf8"
)

func TestTruncateUTF8NeverCutsACharacter(t *testing.T) {
	tests := []struct {
		name string
		give string
		n    int
		want string
	}{
		{"short", "abc", 5, "abc"},
		{"ascii", "abcdef", 3, "abc"},
		{"before a two-byte character", "abé", 3, "ab"},
		{"after a two-byte character", "abéc", 4, "abé"},
		{"inside a four-byte character", "a😀b", 3, "a"},
		{"zero", "é", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TruncateUTF8(tt.give, tt.n)
			if got != tt.want || !utf8.ValidString(got) || len(got) > tt.n && len(tt.give) > tt.n {
				t.Errorf("TruncateUTF8(%q, %d) = %q; want %q", tt.give, tt.n, got, tt.want)
			}
		})
	}
}
