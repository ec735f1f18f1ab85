package main

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/natsconn"
)

// Connection settings that cannot work are a usage error (exit 2), wherever the
// connection is dialled: eval's and bench's --nats-url go straight to natsconn.Connect
// (found by the outside review: the move to natsconn made it exit 1).
func TestAnInvalidNATSURLIsAUsageError(t *testing.T) {
	_, err := natsconn.Connect("nats://u:p@[::1", "test", zerolog.Nop())
	if err == nil {
		t.Fatal("Connect accepted an invalid URL")
	}
	if got := exitCode(err); got != exitUsage {
		t.Fatalf("exitCode(%v) = %d; want %d (usage)", err, got, exitUsage)
	}
}
