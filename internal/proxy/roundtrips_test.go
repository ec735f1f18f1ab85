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
}

func countSubjects(t testing.TB, nc *nats.Conn) *subjectCounter {
	c := &subjectCounter{n: map[string]int{}}
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "_INBOX") || strings.HasPrefix(m.Subject, "$JS.EVENT") {
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

func (c *subjectCounter) take() (map[string]int, int) {
	time.Sleep(50 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	out, total := c.n, 0
	for _, v := range out {
		total += v
	}
	c.n = map[string]int{}
	return out, total
}

func (c *subjectCounter) String() string {
	m, total := c.take()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %3d %s\n", m[k], k)
	}
	fmt.Fprintf(&b, "  %3d in all", total)
	return b.String()
}

// TestRoundTripsOfATurn logs the NATS requests of one ordinary turn (Prepare, then
// Finish) of a compacted conversation, the breakdown docs and reports cite.
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
	for i := range 10 {
		h = append(h, user(fmt.Sprintf("question %d", i)), bot(fmt.Sprintf("answer %d", i)))
	}
	for n := 1; n < 10; n += 2 {
		f.turn("rt", h[:n], h[n].Content.String())
	}
	putValue(f, "rt", 1, "SUMMARY", "question 2")
	f.turn("rt", h[:11], h[11].Content.String())
	c := countSubjects(t, watch)
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	tr, err := s.Prepare(ctx, "rt", h[:13], f.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prepare:\n%s", c)
	if err := s.Finish(ctx, tr, h[13], &proxy.Usage{Input: 100, Output: 10}); err != nil {
		t.Fatal(err)
	}
	t.Logf("Finish:\n%s", c)
}
