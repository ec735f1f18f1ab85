package jetstream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A recall window is bounded by bytes as well as by messages: past maxBytes in more than
// one message it reports full (the scan then narrows it); a single message larger than
// maxBytes is still a window.
func TestRecallWindowIsBoundedByBytes(t *testing.T) {
	st := internalStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body := strings.Repeat("b", 100_000)
	var first, last uint64
	for i := range 30 {
		seq, err := st.Chat().Publish(ctx, "w", fmt.Appendf(nil, `{"role":"user","content":"%d %s"}`, i, body), "")
		if err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			first = seq
		}
		last = seq
	}
	msgs, full, err := st.loadWindow(ctx, "w", first, last, recallPage, 1<<30)
	if err != nil || full || len(msgs) != 30 {
		t.Fatalf("window under its bounds: %d messages, full %v, %v; want all 30", len(msgs), full, err)
	}
	if _, full, err = st.loadWindow(ctx, "w", first, last, recallPage, 1<<20); err != nil || !full {
		t.Fatalf("3 MB of messages within a 1 MiB bound: full %v, %v; want full", full, err)
	}
	msgs, full, err = st.loadWindow(ctx, "w", last, last, recallPage, 1000)
	if err != nil || full || len(msgs) != 1 {
		t.Fatalf("one message over the bound: %d messages, full %v, %v; want it alone", len(msgs), full, err)
	}
}
