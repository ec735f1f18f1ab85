package jetstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// Issue 18: the window a worker learned of an endpoint and model is shared with every
// worker through the windows bucket: one key per endpoint and model, the smallest
// learned kept, listed for status and metrics, and forgotten after LearnedWindowTTL.
func TestLearnedWindowsAreShared(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		w := st.Windows()
		if got, err := w.Get(ctx, "http://llm:8000/v1", "small"); err != nil || got != nil {
			t.Fatalf("before anything was learned: %v, %v", got, err)
		}
		first, err := w.Learn(ctx, jetstream.LearnedWindow{Endpoint: "http://llm:8000/v1", Model: "small", Tokens: 3000, StatedTokens: 3000, RefusedTokens: 8755})
		if err != nil || first.Tokens != 3000 {
			t.Fatalf("learn: %v, %v", first, err)
		}
		// A larger window learned later (another worker's stale view) does not win.
		if kept, err := w.Learn(ctx, jetstream.LearnedWindow{Endpoint: "http://llm:8000/v1", Model: "small", Tokens: 5000, RefusedTokens: 9000}); err != nil || kept.Tokens != 3000 {
			t.Fatalf("a larger window replaced a smaller one: %v, %v", kept, err)
		}
		if _, err := w.Learn(ctx, jetstream.LearnedWindow{Endpoint: "http://llm:8000/v1", Model: "other", Tokens: 2000, RefusedTokens: 4000}); err != nil {
			t.Fatal(err)
		}
		// Another handle on the same NATS (another worker process) reads it.
		other := jstest.Provision(t, jstest.ConnTo(t, nc.ConnectedUrl()))
		got, err := other.Windows().Get(ctx, "http://llm:8000/v1", "small")
		if err != nil || got == nil || got.Tokens != 3000 || got.StatedTokens != 3000 || got.RefusedTokens != 8755 || got.LearnedAt.IsZero() {
			t.Fatalf("another process reads %+v, %v", got, err)
		}
		all, err := other.Windows().List(ctx)
		if err != nil || len(all) != 2 || all[0].Model != "other" || all[1].Model != "small" {
			t.Fatalf("list: %+v, %v", all, err)
		}
		if status := other.Status(ctx); len(status.LearnedWindows) != 2 || status.LearnedWindowsError != "" || status.LearnedWindows[1].Tokens != 3000 {
			t.Fatalf("status shows %+v, %q", status.LearnedWindows, status.LearnedWindowsError)
		}
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, "KV_"+st.Config().WindowsBucket)
		if err != nil {
			t.Fatal(err)
		}
		if age := s.CachedInfo().Config.MaxAge; age != jetstream.LearnedWindowTTL || age > 24*time.Hour {
			t.Fatalf("learned windows kept for %s; want %s", age, jetstream.LearnedWindowTTL)
		}
	})
}

// A windows bucket that does not answer (not provisioned yet, or a user without its
// rights) costs a caller at most a couple of seconds, once: the handle then rests and
// answers ErrWindowsUnavailable at once, so a job or a status never waits on it.
func TestLearnedWindowsUnavailableRests(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		js, err := natsjs.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		if err := js.DeleteKeyValue(ctx, st.Config().WindowsBucket); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := st.Windows().Get(ctx, "http://llm/v1", "m"); err == nil {
			t.Fatal("read a bucket that is not there")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("the first read took %s", took)
		}
		// ErrWindowsUnavailable is the resting handle's answer, given before any request:
		// it is the answer at once (a request would end in its own error).
		_, err = st.Windows().Learn(ctx, jetstream.LearnedWindow{Endpoint: "http://llm/v1", Model: "m", Tokens: 3000})
		if !errors.Is(err, jetstream.ErrWindowsUnavailable) {
			t.Fatalf("learn while resting: %v; want ErrWindowsUnavailable at once", err)
		}
		if s := st.Status(ctx); s.LearnedWindowsError == "" {
			t.Fatal("status does not say the learned windows could not be read")
		}
	})
}
