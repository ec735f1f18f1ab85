package proxy_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// subjectCounter counts the requests and publishes the proxy's connection makes, by
// the kind of subject, as a subscriber to every subject sees them.
type subjectCounter struct {
	mu sync.Mutex
	n  map[string]int
	// replyBytes is the bytes of the replies (messages to an inbox): what was read.
	replyBytes int
}

func countSubjects(t testing.TB, nc *nats.Conn) *subjectCounter {
	c := &subjectCounter{n: map[string]int{}}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "_INBOX") {
			c.mu.Lock()
			c.replyBytes += len(m.Data)
			c.mu.Unlock()
			return
		}
		if strings.HasPrefix(m.Subject, "$JS.EVENT") {
			return
		}
		c.mu.Lock()
		c.n[kindOf(m.Subject)]++
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

// kindOf is a subject with its conversation left out.
func kindOf(subj string) string {
	parts := strings.Split(subj, ".")
	switch {
	case strings.HasPrefix(subj, "$JS.API.DIRECT.GET."):
		if len(parts) > 5 {
			return "direct-get last " + parts[4] + "." + parts[5]
		}
		return "direct-get " + parts[4]
	case strings.HasPrefix(subj, "$JS.API."):
		if len(parts) > 4 {
			return strings.Join(parts[:4], ".") + " " + parts[4]
		}
		return subj
	}
	if len(parts) > 2 {
		return "publish " + strings.Join(parts[:2], ".")
	}
	return subj
}

func (c *subjectCounter) take() (map[string]int, int, int) {
	time.Sleep(50 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total, bytes := c.n, 0, c.replyBytes
	for _, v := range out {
		total += v
	}
	c.n, c.replyBytes = map[string]int{}, 0
	return out, total, bytes
}

// report is the requests since the last report, by kind, how many in all, and the
// bytes of their replies.
func (c *subjectCounter) report() (string, int, int) {
	m, total, bytes := c.take()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %3d %s\n", m[k], k)
	}
	fmt.Fprintf(&b, "  %3d in all, %d bytes of replies", total, bytes)
	return b.String(), total, bytes
}

// TestRoundTripsOfATurn logs the NATS requests of one ordinary turn (Prepare, then
// Finish) of a compacted conversation with a tail of 60 messages (about 50 kB), and holds them to
// what the warm context costs: Prepare reads the newest message, then at once the live
// value, the tombstone and only the messages stored since the last turn (no whole
// tail); Finish reads the newest message and publishes the new messages one at a time.
func TestRoundTripsOfATurn(t *testing.T) {
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	watch := jstest.Conn(t, srv)
	set := policy.Defaults()
	settings := func(context.Context, string) (policy.Settings, error) { return set, nil }
	s := proxy.NewConversations(nc, st, settings, zerolog.Nop())
	ctx := context.Background()
	f := &fixture{t: t, ctx: ctx, st: st, conv: s, opts: proxy.TurnOptions{Owner: "o", CacheTTL: time.Minute}}
	var h []schemas.Message
	for i := range 40 {
		h = append(h, user(fmt.Sprintf("question %d %s", i, strings.Repeat("text ", 100))), bot(fmt.Sprintf("answer %d %s", i, strings.Repeat("more ", 100))))
	}
	for n := 1; n < 10; n += 2 {
		f.turn("rt", h[:n], h[n].Content.String())
	}
	putValue(f, "rt", 1, "SUMMARY", h[4].Content.String())
	for n := 11; n < 75; n += 2 {
		f.turn("rt", h[:n], h[n].Content.String())
	}
	c := countSubjects(t, watch)
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := s.Prepare(ctx, "rt", h[:75], f.opts)
	if err != nil {
		t.Fatal(err)
	}
	prepare, n, read := c.report()
	t.Logf("Prepare:\n%s", prepare)
	if err := s.Finish(ctx, tr, h[75], &proxy.Usage{Input: 100, Output: 10}); err != nil {
		t.Fatal(err)
	}
	finish, m, _ := c.report()
	t.Logf("Finish:\n%s", finish)
	if n > 5 || m > 3 {
		t.Fatalf("a turn made %d requests to prepare and %d to finish; want at most 5 and 3", n, m)
	}
	// The tail is 60 messages of about 500 bytes: read whole, some 50 kB.
	if read > 10_000 {
		t.Fatalf("preparing the turn read %d bytes: the whole tail again, not the messages since the last turn", read)
	}
}
