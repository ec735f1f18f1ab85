package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// HeapReport is the trigger's heap per tracked conversation and how fast it takes on
// new conversations.
type HeapReport struct {
	Conversations int `json:"conversations"`
	// BytesPerConversation is the live heap (after GC) the process holds once the trigger
	// tracks every conversation, less what it held before the trigger started, per
	// conversation. With the server in another process this is the trigger's state
	// (and its client's buffers); with an embedded one it includes the server's.
	BytesPerConversation float64 `json:"bytes_per_conversation"`
	// NewPerSec is new conversations tracked per second (each one's state rebuilt from
	// KV and the stream).
	NewPerSec       float64 `json:"new_conversations_per_sec"`
	ServerInProcess bool    `json:"server_in_process"`
}

func measureHeap(ctx context.Context, url string, sz sizes, profile string, rep *Report, progress func(string, ...any)) error {
	hr := &rep.Heap
	n := sz.heapConversations
	hr.Conversations, hr.ServerInProcess = n, rep.Server == "embedded"
	r, err := newRig(ctx, url)
	if err != nil {
		return err
	}
	defer r.close()
	progress("heap: publishing one message to each of %d conversations", n)
	user := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("please run the build")}
	data, err := user.Encode()
	if err != nil {
		return err
	}
	futures := make([]jetstream.PubAckFuture, 0, asyncWindow)
	var last uint64
	for i := range n {
		f, err := r.store.PublishMessageAsync(fmt.Sprintf("conversation-%08d", i), data, "")
		if err != nil {
			return err
		}
		futures = append(futures, f)
		if len(futures) == asyncWindow || i == n-1 {
			for _, f := range futures {
				select {
				case a := <-f.Ok():
					last = max(last, a.Sequence)
				case err := <-f.Err():
					return err
				}
			}
			futures = futures[:0]
		}
	}
	cons, err := r.js.Consumer(ctx, r.cfg.ChatStream, r.cfg.TriggerConsumer)
	if err != nil {
		return err
	}
	before := liveHeap()
	progress("heap: a trigger takes on %d new conversations", n)
	start := time.Now()
	t, stop, err := r.startTrigger(ctx, settings(benchWindow))
	if err != nil {
		return err
	}
	defer stop()
	if err := wait(ctx, 10*time.Minute, "the trigger to track every conversation", func() bool { return t.Tracked() >= n }); err != nil {
		return err
	}
	if err := wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= last
	}); err != nil {
		return err
	}
	hr.NewPerSec = float64(n) / time.Since(start).Seconds()
	after := liveHeap()
	hr.BytesPerConversation = float64(int64(after)-int64(before)) / float64(n)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	progress("heap: %.0f bytes per conversation, %.0f new conversations/s", hr.BytesPerConversation, hr.NewPerSec)
	return nil
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
