package node

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// forgetSweep is the api role's backstop of forget: at start and then every quarter of
// the forget TTL it removes the values tombstones cover (jetstream.Store.SweepForgotten),
// so none outlives its tombstone, whatever happened to the writer that left it.
type forgetSweep struct {
	st    *jetstream.Store
	every time.Duration
	log   zerolog.Logger
}

func newForgetSweep(st *jetstream.Store, log zerolog.Logger) forgetSweep {
	return forgetSweep{st: st, every: max(st.Config().ForgetTTL/4, 10*time.Second), log: log.With().Str("component", "forget-sweep").Logger()}
}

// Run sweeps until ctx is done.
func (f forgetSweep) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := f.st.SweepForgotten(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			f.log.Warn().Err(err).Int("removed", n).Dur("next_in", f.every).Msg("sweep of forgotten conversations' values")
		case n > 0:
			f.log.Warn().Int("removed", n).Msg("removed values of forgotten conversations that outlived their forget")
		}
		t.Reset(f.every)
	}
}
