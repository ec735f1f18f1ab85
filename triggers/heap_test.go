package triggers

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// BenchmarkTrackedConversationHeap measures the heap the trigger holds per tracked
// conversation: its state after counting a few messages, open tool calls included.
// Run: go test ./triggers -bench TrackedConversationHeap -run '^$'
func BenchmarkTrackedConversationHeap(b *testing.B) {
	const n = 20000
	s := policy.Defaults()
	call := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
		{ID: "call_a", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}}
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("done")}
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		convs := make(map[string]*convState, n)
		for i := range n {
			id := fmt.Sprintf("conversation-%08d", i)
			c := &convState{id: id, settings: s, budget: s.Budget(), lastMsgAt: time.Now()}
			c.lastSeen = time.Now()
			c.add(&reply, 1)
			c.add(&call, 2) // one open tool call
			convs[id] = c
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/conversation")
		runtime.KeepAlive(convs)
	}
}
