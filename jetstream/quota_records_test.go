package jetstream_test

import (
	"testing"

	"github.com/compactor/compactor/jetstream"
)

func TestConversationRoot(t *testing.T) {
	tests := []struct {
		name, give, want string
	}{
		{"no branch", "c1", "c1"},
		{"a branch", "c1--0123456789abcdef", "c1"},
		{"a branch of a branch", "c1--0123456789abcdef--fedcba9876543210", "c1"},
		{"two dashes, no digest", "proj--billing", "proj--billing"},
		{"upper-case digits are no digest", "c1--0123456789ABCDEF", "c1--0123456789ABCDEF"},
		{"a digest too short", "c1--0123456789abcde", "c1--0123456789abcde"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jetstream.ConversationRoot(tt.give); got != tt.want {
				t.Fatalf("ConversationRoot(%q) = %q; want %q", tt.give, got, tt.want)
			}
		})
	}
}
