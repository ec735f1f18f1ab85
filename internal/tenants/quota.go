package tenants

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
)

// countTTL is how long a tenant's count of conversations is used before it is read
// again: one stream info per tenant and process every few seconds, not one per job.
const countTTL = 5 * time.Second

// Quota enforces a tenant's quotas on its compactions (summarizer.Quota). A compaction
// over a quota is declined with a reason the tenant reads in the outcome of its
// compaction (compactor.compact) and in the declined event; nothing is deleted, and a
// later message asks again, so the conversation compacts once the quota allows it.
type Quota struct {
	tenant string
	quotas Quotas
	store  *jetstream.Store
	now    func() time.Time
	log    zerolog.Logger
	// Declined hears each compaction the quota declines, by the quota's name
	// (conversations, summarizer_tokens_per_day); nil: nobody.
	Declined func(quota string)
	// Charged hears the tokens each compaction spent; nil: nobody.
	Charged func(tokens int64)

	mu      sync.Mutex
	countAt time.Time
	count   int64
}

// NewQuota returns tenant's quota over its store.
func NewQuota(tenant string, q Quotas, st *jetstream.Store, log zerolog.Logger) *Quota {
	return &Quota{tenant: tenant, quotas: q, store: st, now: time.Now, log: log}
}

// Allow says why compacting conv must not start now ("" when it may).
func (q *Quota) Allow(ctx context.Context, conv string, compacted bool, estimate int) (string, error) {
	if limit := q.quotas.Conversations; limit > 0 && !compacted {
		n, err := q.conversations(ctx)
		if err != nil {
			return "", err
		}
		if n > limit {
			q.declined("conversations")
			return fmt.Sprintf("quota: tenant %s holds %d conversations, over its quota of %d: a conversation never compacted before "+
				"is not compacted until some are forgotten (compactor.forget); its messages are kept", q.tenant, n, limit), nil
		}
	}
	if limit := q.quotas.SummarizerTokensPerDay; limit > 0 {
		now := q.now()
		used, _, err := q.store.TokensUsed(ctx, now)
		if err != nil {
			return "", err
		}
		if used+int64(estimate) > limit {
			q.declined("summarizer_tokens_per_day")
			return fmt.Sprintf("quota: tenant %s used %d of its %d summarizer tokens today (UTC) and this compaction needs about %d; "+
				"compactions resume at 00:00 UTC (in %s); its messages are kept", q.tenant, used, limit, estimate,
				nextDay(now).Sub(now).Round(time.Minute)), nil
		}
	}
	return "", nil
}

// Charge counts the tokens of u against today's quota. A count that cannot be written is
// logged: the tokens are spent, and the next compaction reads the count again.
func (q *Quota) Charge(ctx context.Context, conv string, u schemas.Usage) {
	n := int64(max(u.PromptTokens, 0)) + int64(max(u.CompletionTokens, 0))
	if n <= 0 {
		return
	}
	if q.Charged != nil {
		q.Charged(n)
	}
	if q.quotas.SummarizerTokensPerDay <= 0 {
		return
	}
	if _, err := q.store.AddTokensUsed(ctx, q.now(), n); err != nil {
		q.log.Warn().Err(err).Int64("tokens", n).Msg("summarizer tokens not counted against the tenant's quota")
	}
}

// conversations is the tenant's count of conversations, read at most every countTTL.
func (q *Quota) conversations(ctx context.Context) (int64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now := q.now(); now.Sub(q.countAt) < countTTL {
		return q.count, nil
	}
	state, err := q.store.ChatState(ctx)
	if err != nil {
		return 0, err
	}
	q.count, q.countAt = state.Conversations, q.now()
	return q.count, nil
}

func (q *Quota) declined(quota string) {
	if q.Declined != nil {
		q.Declined(quota)
	}
}

// nextDay is the start of the UTC day after t's.
func nextDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}
