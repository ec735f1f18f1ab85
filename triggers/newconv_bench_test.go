package triggers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/triggers"
)

// BenchmarkNewConversations is the trigger's throughput on conversations it has never
// seen: n conversations of one message each are published to a real in-process server,
// then a real Trigger consumes them; the time is from its start until it acknowledged
// every message. "quiet" messages are under the budget (the state is built, nothing
// is asked); "over" messages each call for a compaction (a request queued and its
// requested event published per conversation).
// Run: go test ./triggers -bench NewConversations -run '^$' -benchtime 3x
func BenchmarkNewConversations(b *testing.B) {
	const n = 1000
	for _, bc := range []struct {
		name  string
		chars int
	}{{"quiet", 400}, {"over", 13000}} {
		b.Run(bc.name, func(b *testing.B) {
			msg := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", bc.chars))}
			data, _ := msg.Encode()
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				srv := jstest.Server(b)
				nc := jstest.Conn(b, srv)
				st := jstest.Provision(b, nc)
				ctx := context.Background()
				var futures []jetstream.PubAckFuture
				for i := range n {
					f, err := st.Chat().PublishAsync(fmt.Sprintf("conversation-%06d", i), data, "")
					if err != nil {
						b.Fatal(err)
					}
					futures = append(futures, f)
				}
				var last uint64
				for _, f := range futures {
					select {
					case a := <-f.Ok():
						last = max(last, a.Sequence)
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
				cons, err := testJS(b, nc).Consumer(ctx, st.Config().ChatStream, st.Config().TriggerConsumer)
				if err != nil {
					b.Fatal(err)
				}
				tr, err := triggers.New(triggers.DefaultConfig(), st, fixed{}, zerolog.Nop())
				if err != nil {
					b.Fatal(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				b.StartTimer()
				began := time.Now()
				go func() { done <- tr.Run(rctx) }()
				waitAll(b, "the trigger to acknowledge every message", func() bool {
					ci, err := cons.Info(ctx)
					return err == nil && ci.AckFloor.Stream >= last
				})
				elapsed += time.Since(began)
				b.StopTimer()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "conversations/s")
		})
	}
}
