package summarizer

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// SummarizeToFit runs the pool's map-reduce for the tests of package summarizer_test,
// which drive it through the real llm summarizer (a package that imports this one).
func SummarizeToFit(ctx context.Context, sum Summarizer, in Input, window int) (Output, error) {
	p := &Pool{cfg: DefaultConfig(), log: zerolog.Nop(), now: time.Now}
	return p.summarizeToFit(ctx, &job{log: zerolog.Nop()}, sum, in, window)
}

// SetForgetCheckWait shortens how long one tombstone check asks, until the test ends.
func SetForgetCheckWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := forgetCheckWait
	forgetCheckWait = d
	t.Cleanup(func() { forgetCheckWait = old })
}

// SetRepairWindowBytes bounds what a repair holds of the covered messages at once,
// until the test ends.
func SetRepairWindowBytes(t interface{ Cleanup(func()) }, n int) {
	old := repairWindowBytes
	repairWindowBytes = n
	t.Cleanup(func() { repairWindowBytes = old })
}

// Handle works on one delivery as one of the pool's workers does, until it is settled:
// the tests hand it a delivery they held, as a worker frozen with it would.
func (p *Pool) Handle(ctx context.Context, d *jetstream.Delivery) { p.handle(ctx, ctx, d) }
