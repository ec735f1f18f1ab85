package triggers_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/triggers"
)

// BenchmarkTrackedConversationHeap measures the heap a running trigger holds per tracked
// conversation. n conversations of two messages each (a user message and a tool call
// still open: open calls are part of the state) are published to a real in-process
// server first, and the heap measured; then a real Trigger consumes them, and once it
// tracks all of them and acknowledged every message, the heap is measured again. The
// difference per conversation is the trigger's state plus what delivering the messages
// cost the in-process server and the client (an upper bound of the trigger's share).
// The heap is not measured after the trigger stops: the client library's consumer
// timers keep the stopped trigger reachable for a while. The trigger's own share
// (state-bytes/conversation) is what dropping every conversation's state then frees.
// Run: go test ./triggers -bench TrackedConversationHeap -run '^$' -benchtime 1x
func BenchmarkTrackedConversationHeap(b *testing.B) {
	const n = 5000
	user := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("please run the build")}
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "call_a", Type: "function", Function: schemas.FunctionCall{Name: "run_build", Arguments: "{}"}}}}
	for range b.N {
		b.StopTimer()
		srv := jstest.Server(b)
		nc := jstest.Conn(b, srv)
		st := jstest.Provision(b, nc)
		ctx := context.Background()
		var futures []jetstream.PubAckFuture
		for i := range n {
			id := fmt.Sprintf("conversation-%08d", i)
			for _, m := range []schemas.Message{user, call} {
				data, _ := m.Encode()
				f, err := st.Chat().PublishAsync(id, data, "")
				if err != nil {
					b.Fatal(err)
				}
				futures = append(futures, f)
			}
			if len(futures) >= 1000 || i == n-1 {
				for _, f := range futures {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
				futures = futures[:0]
			}
		}
		info, err := testJS(b, nc).Stream(ctx, st.Config().ChatStream)
		if err != nil {
			b.Fatal(err)
		}
		si, err := info.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		last := si.State.LastSeq
		cons, err := testJS(b, nc).Consumer(ctx, st.Config().ChatStream, st.Config().TriggerConsumer)
		if err != nil {
			b.Fatal(err)
		}
		before := heap()
		b.StartTimer()
		tr, err := triggers.New(triggers.DefaultConfig(), st, fixed{}, zerolog.Nop())
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- tr.Run(rctx) }()
		waitAll(b, "the trigger to track every conversation", func() bool { return tr.Tracked() == n })
		waitAll(b, "the trigger to acknowledge every message", func() bool {
			ci, err := cons.Info(ctx)
			return err == nil && ci.AckFloor.Stream >= last
		})
		b.StopTimer()
		held := heap()
		b.ReportMetric(float64(int64(held)-int64(before))/n, "bytes/conversation")
		// The trigger's own share: what dropping every conversation's state frees.
		tr.DropStates()
		b.ReportMetric(float64(int64(held)-int64(heap()))/n, "state-bytes/conversation")
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func waitAll(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
