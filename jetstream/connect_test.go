package jetstream

import "testing"

func TestRedact(t *testing.T) {
	tests := []struct{ give, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://user:secret@a:4222,nats://token@b:4222", "nats://redacted@a:4222,nats://redacted@b:4222"},
		{"nats://a:4222, nats://b:4222", "nats://a:4222,nats://b:4222"},
	}
	for _, tc := range tests {
		if got := redact(tc.give); got != tc.want {
			t.Errorf("redact(%q) = %q; want %q", tc.give, got, tc.want)
		}
	}
}
