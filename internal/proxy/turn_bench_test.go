package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// BenchmarkTurn is the proxy's store side of one turn (Prepare, then Finish with the
// reply) of a conversation 100 messages long, against an in-process server.
func BenchmarkTurn(b *testing.B) {
	nc := jstest.Conn(b, jstest.Server(b))
	st := jstest.Provision(b, nc)
	{
		set := policy.Defaults()
		settings := func(context.Context, string) (policy.Settings, error) { return set, nil }
		s := proxy.NewConversations(nc, st, settings, zerolog.Nop())
		ctx := context.Background()
		var h []schemas.Message
		for i := range 100 {
			h = append(h, user(fmt.Sprintf("question %d %s", i, strings.Repeat("text ", 40))), bot(fmt.Sprintf("answer %d %s", i, strings.Repeat("more ", 40))))
		}
		opts := proxy.TurnOptions{CacheTTL: time.Minute}
		b.ResetTimer()
		for i := range b.N {
			conv := fmt.Sprintf("bench-%d", i/50)
			n := 2*(i%50) + 1
			t, err := s.Prepare(ctx, conv, h[:n], opts)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Finish(ctx, t, h[n], nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}
