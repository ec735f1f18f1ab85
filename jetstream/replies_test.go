package jetstream_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// TestBatchedReadsAllocateLittle: a batched read of a short conversation allocates
// kilobytes, not the 512 KiB channel a subscription of its own came with.
func TestBatchedReadsAllocateLittle(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		ctx := ctxT(t)
		for range 3 {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
			data, _ := m.Encode()
			if _, err := st.Chat().Publish(ctx, "c", data, ""); err != nil {
				t.Fatal(err)
			}
		}
		read := func() {
			msgs, err := st.Chat().Load(ctx, "c", 1, 0)
			if err != nil || len(msgs) != 3 {
				t.Fatalf("got %d messages, %v; want 3", len(msgs), err)
			}
		}
		read()
		const reads = 50
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range reads {
			read()
		}
		runtime.ReadMemStats(&after)
		// The whole process allocates meanwhile (the in-process server too): the bound
		// is loose, and still 10 times under one subscription channel.
		if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > 48<<10 {
			t.Errorf("a batched read allocated %d bytes; want at most %d", per, 48<<10)
		}
	})
}

// TestConcurrentBatchedReadsOnACustomInboxPrefix: many reads at once on one connection
// each get their own conversation's messages, on a connection whose user may subscribe
// only under its own inbox prefix (as the roles of deploy/nats are set up).
func TestConcurrentBatchedReadsOnACustomInboxPrefix(t *testing.T) {
	srv := jstest.ServerWith(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "reader", Password: "reader", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_reader.>"}},
			}},
		}
	})
	url := "nats://" + jstest.HostPort(srv)
	admin, err := nats.Connect(url, nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	ctx := ctxT(t)
	st, err := jetstream.Provision(ctx, admin, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const convs = 12
	for i := range convs {
		for j := range i + 1 + (i%3)*jetstream.DirectBatchSize/2 {
			m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("conversation %d message %d", i, j))}
			data, _ := m.Encode()
			if _, err := st.Chat().PublishAsync(fmt.Sprintf("c%d", i), data, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	<-st.Chat().PublishAsyncComplete()

	var denied []string
	var mu sync.Mutex
	rc, err := nats.Connect(url, nats.UserInfo("reader", "reader"), nats.CustomInboxPrefix("_INBOX_reader"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			denied = append(denied, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	reader, err := jetstream.Open(ctx, rc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, convs*5)
	for i := range convs {
		for range 5 {
			wg.Go(func() {
				want := i + 1 + (i%3)*jetstream.DirectBatchSize/2
				es, err := reader.Chat().LoadEntries(context.Background(), fmt.Sprintf("c%d", i), 1, 0)
				if err != nil {
					errs <- err
					return
				}
				if len(es) != want {
					errs <- fmt.Errorf("c%d: got %d messages; want %d", i, len(es), want)
					return
				}
				for j, e := range es {
					if got, w := e.Message.Content.String(), fmt.Sprintf("conversation %d message %d", i, j); e.Err != nil || got != w {
						errs <- fmt.Errorf("c%d message %d: got %q (%v); want %q", i, j, got, e.Err, w)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(denied) > 0 {
		t.Errorf("permission errors: %s", strings.Join(denied, "; "))
	}
}

// A read through a sequence whose direct get already found a later message of the
// conversation does not ask the stream leader: the server that answered holds the
// stream up to that message. A new conversation's first read (from 1 through the
// message before the one just delivered) is one request.
func TestReadThroughAsksTheLeaderOnlyWhenShort(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	ctx := ctxT(t)
	spy := jstest.Conn(t, srv)
	var leader atomic.Int64
	sub, err := spy.Subscribe("$JS.API.STREAM.MSG.GET.>", func(*nats.Msg) { leader.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("hello")}
	data, _ := m.Encode()
	if _, err := st.Chat().Publish(ctx, "other", data, ""); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for range 3 {
		seq, err := st.Chat().Publish(ctx, "c", data, "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	for _, tc := range []struct {
		name          string
		from, through uint64
		want          int
	}{
		{"new conversation", 1, seqs[0] - 1, 0},
		{"through the middle", 1, seqs[1], 2},
		{"after the first", seqs[1], seqs[2] - 1, 1},
	} {
		es, err := st.Chat().LoadEntriesThrough(ctx, "c", tc.from, tc.through)
		if err != nil || len(es) != tc.want {
			t.Fatalf("%s: got %d entries, %v; want %d", tc.name, len(es), err, tc.want)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := leader.Load(); n != 0 {
		t.Errorf("%d requests to the stream leader; want none", n)
	}
	// Through the newest message: the answer reaches it, nothing is missing.
	if es, err := st.Chat().LoadEntriesThrough(ctx, "c", 1, seqs[2]); err != nil || len(es) != 3 {
		t.Fatalf("through the newest: got %d entries, %v; want 3", len(es), err)
	}
}
