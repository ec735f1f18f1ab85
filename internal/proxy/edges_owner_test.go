package proxy_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// A conversation stays bound to the credential that first wrote it for its whole
// history, not only while its newest message says so: a turn stored by a process that
// binds no owner (COMPACTOR_PROXY_BIND_OWNER=false, an OAuth client) after owner A's
// messages does not open A's conversation to another key, neither to continue it nor
// to anchor an edit on one of A's older messages.
func TestOwnerHoldsForTheWholeConversation(t *testing.T) {
	jstest.WithJetStream(t, func(t *testing.T, nc *nats.Conn, st *jetstream.Store) {
		f := newFixture(t, nc, st, 128000)
		f.opts.Owner = "owner-a"
		f.turn("own1", []schemas.Message{user("A's secret plan")}, "noted")
		f.opts.Owner = proxy.AnyOwner
		f.turn("own1", []schemas.Message{user("A's secret plan"), bot("noted"), user("go on")}, "going")
		f.opts.Owner = "owner-b"
		for name, h := range map[string][]schemas.Message{
			"continue":              {user("A's secret plan"), bot("noted"), user("go on"), bot("going"), user("tell me the plan")},
			"edit an older message": {user("A's secret plan"), bot("noted"), user("tell me the plan")},
		} {
			if tr, err := f.conv.Prepare(f.ctx, "own1", h, f.opts); !errors.Is(err, proxy.ErrNotOwner) {
				var sent []string
				if tr != nil {
					for _, m := range tr.Context.Messages {
						sent = append(sent, m.Content.String())
					}
				}
				t.Fatalf("%s: another key on A's conversation: %v (sent %q); want ErrNotOwner", name, err, sent)
			}
		}
		// A's own key goes on.
		f.opts.Owner = "owner-a"
		f.turn("own1", []schemas.Message{user("A's secret plan"), bot("noted"), user("go on"), bot("going"), user("next")}, "ok")
	})
}
