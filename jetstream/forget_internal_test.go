package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/embedded"
)

// Past its budget the erase stops where it is, without error, and leaves the rest to
// the purge that follows it.
func TestEraseChatStopsAtItsDeadline(t *testing.T) {
	st := internalStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		last uint64
		err  error
	)
	for i := range 5 {
		if last, err = st.Chat().Publish(ctx, "c", fmt.Appendf(nil, `{"role":"user","content":"m%d"}`, i), ""); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.eraseChat(ctx, "c", last, time.Now().Add(-time.Second)); n != 0 || err != nil {
		t.Fatalf("erase past its deadline: %d, %v; want 0 and no error", n, err)
	}
	if n, err := st.eraseChat(ctx, "c", last-2, time.Now().Add(time.Minute)); n != 3 || err != nil {
		t.Fatalf("erase through seq %d: %d, %v; want 3", last-2, n, err)
	}
	out, err := st.Forget(ctx, "c")
	if err != nil || out.Deleted.ChatMessages != 2 || out.Deleted.ChatMessagesErased != 2 {
		t.Fatalf("forget after the partial erase: %+v, %v; want the 2 left", out.Deleted, err)
	}
}

// internalStore provisions the default streams on an embedded server of the test's own
// (the internal tests cannot use jstest, which imports this package).
func internalStore(t *testing.T) *Store {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Listen: "127.0.0.1:-1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := Provision(ctx, nc, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
