package summarizer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
)

// seed publishes n messages of 1,600 characters (400 tokens each), user and assistant in
// turn, and returns the last one's sequence. Eight are over the threshold of a
// 4,000-token window (3,000) and under its hard limit (3,800).
func seed(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := range n {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		m := schemas.Message{Role: role, Content: schemas.Text(strings.Repeat("w", 1600))}
		data, _ := m.Encode()
		var err error
		if last, err = st.PublishMessage(ctx, conv, data, ""); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// runPool runs a pool on st until the test ends; opts.Fallback and opts.Logger default
// to the extractive summarizer and errors only.
func runPool(t *testing.T, st *jetstream.Store, cfg summarizer.Config, opts summarizer.Options) {
	t.Helper()
	if opts.Fallback == nil {
		opts.Fallback = extractive.New()
	}
	opts.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	pool, err := summarizer.NewPool(cfg, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// request queues a manual compaction of conv through upTo.
func request(t *testing.T, ctx context.Context, st *jetstream.Store, conv string, upTo uint64) schemas.Request {
	t.Helper()
	req := schemas.Request{RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerManual,
		Reason: "test", RequestedAt: time.Now().UTC(), UpToSeq: upTo}
	if _, err := st.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	return req
}
