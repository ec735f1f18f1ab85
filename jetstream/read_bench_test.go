package jetstream_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// benchConversation publishes n user messages of 200 characters to conv.
func benchConversation(b *testing.B, st *jetstream.Store, conv string, n int) []uint64 {
	b.Helper()
	seqs := make([]uint64, n)
	for i := range n {
		m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("w", 200))}
		data, _ := m.Encode()
		seq, err := st.Chat().Publish(context.Background(), conv, data, "")
		if err != nil {
			b.Fatal(err)
		}
		seqs[i] = seq
	}
	return seqs
}

// BenchmarkLoadConversation is one batched read of a 20-message conversation, the read
// of every trigger rebuild and every context read. Run with -benchmem: the allocations
// of the read's response subscription show.
func BenchmarkLoadConversation(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	benchConversation(b, st, "bench", 20)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		msgs, err := st.Chat().Load(ctx, "bench", 1, 0)
		if err != nil || len(msgs) != 20 {
			b.Fatalf("got %d messages, %v; want 20", len(msgs), err)
		}
	}
}

// BenchmarkLoadConversationParallel is LoadConversation from many goroutines at once
// on one connection, as a worker pool and a busy trigger do.
func BenchmarkLoadConversationParallel(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	for i := range 8 {
		benchConversation(b, st, fmt.Sprintf("bench-%d", i), 5)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		conv := fmt.Sprintf("bench-%d", next.Add(1)%8)
		for pb.Next() {
			msgs, err := st.Chat().Load(ctx, conv, 1, 0)
			if err != nil || len(msgs) != 5 {
				b.Errorf("got %d messages, %v; want 5", len(msgs), err)
				return
			}
		}
	})
}

// BenchmarkLoadPinned reads 4 pinned messages, and reports how many JetStream API
// requests (stream info included) each read made.
func BenchmarkLoadPinned(b *testing.B) {
	srv := jstest.Server(b)
	nc := jstest.Conn(b, srv)
	st := jstest.Provision(b, nc)
	seqs := benchConversation(b, st, "bench", 8)
	pinned := []uint64{seqs[0], seqs[2], seqs[4], seqs[6]}
	spy := jstest.Conn(b, srv)
	var api, info atomic.Int64
	sub, err := spy.Subscribe("$JS.API.>", func(m *nats.Msg) {
		api.Add(1)
		if strings.HasPrefix(m.Subject, "$JS.API.STREAM.INFO.") {
			info.Add(1)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	_ = spy.Flush()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		es, err := st.Chat().LoadPinned(ctx, "bench", pinned)
		if err != nil || len(es) != 4 {
			b.Fatalf("got %d entries, %v; want 4", len(es), err)
		}
	}
	b.StopTimer()
	_ = nc.Flush()
	_ = spy.Flush()
	_ = sub.Unsubscribe()
	b.ReportMetric(float64(api.Load())/float64(b.N), "api-requests/op")
	b.ReportMetric(float64(info.Load())/float64(b.N), "stream-infos/op")
}
