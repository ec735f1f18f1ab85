package triggers

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// Conversations of one policy share one copy of its settings, and a policy no
// conversation holds any more is let go.
func TestConversationsShareTheirPolicy(t *testing.T) {
	var sp sharedPolicies
	a, b := policy.Defaults(), policy.Defaults()
	b.ContextWindow = 8000
	pa := sp.get(a, tokens.Chars4{})
	if sp.get(a, tokens.Chars4{}) != pa {
		t.Fatal("two conversations of one policy got two copies")
	}
	pb := sp.get(b, tokens.Chars4{})
	if pb == pa || pb.settings.ContextWindow != 8000 || pb.budget.ContextWindow != 8000 {
		t.Fatalf("another policy got %+v", pb.settings)
	}
	if n := sp.size(); n != 2 {
		t.Fatalf("%d policies held; want 2", n)
	}
	runtime.KeepAlive(pa)
	runtime.KeepAlive(pb)
	deadline := time.Now().Add(10 * time.Second)
	for sp.size() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d policies still held with no conversation holding them", sp.size())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// A tracked conversation's state is a few hundred bytes: its policy is a pointer to the
// shared settings (not a copy of them), its instants are Unix nanoseconds (not
// time.Time), its open tool calls a slice (not a map), its small counters 32 bits
// beside a flag. The witness of what it saw (48 bytes: a count, where it starts and 4
// sums, see docs/design.md#holes) is the most recent part. The state is allocated on
// its own, so what it costs is its size class: 288 bytes holds it; one word more
// and it takes 320 (a heap of 532 bytes a conversation, measured, over the 512 B
// target).
func TestTrackedStateIsSmall(t *testing.T) {
	if got := unsafe.Sizeof(convState{}); got > 288 {
		t.Errorf("a conversation's state takes %d bytes; want at most 288 (a size class of the Go allocator)", got)
	}
	if got := unsafe.Sizeof(convState{}) + unsafe.Sizeof(tracked{}); got > 440 {
		t.Errorf("a tracked conversation's state takes %d bytes; want at most 440", got)
	}
}
