package tenants

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
)

// countTTL is how long a tenant's count of conversations is used before it is read
// again: one stream info per tenant and process every few seconds, not one per job.
const countTTL = 5 * time.Second

// Quota enforces a tenant's quotas on its compactions (summarizer.Quota) and counts
// what its LLM calls spend. A compaction over a quota is declined with a reason the
// tenant reads in the outcome of its compaction (compactor.compact) and in the declined
// event; nothing is deleted, and a later message asks again, so the conversation
// compacts once the quota allows it. A context past its hard limit gets the free
// fallback instead, and a fallback's repair waits in the queue for the quota.
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

// Allow decides whether compacting conv may start now. Under a token quota it reserves
// the compaction's estimated input in the day's count, in one compare-and-set, so
// compactions starting at once in every process cannot pass the quota together; Release
// takes the reservation back once the compaction is done (its LLM calls are counted as
// they report their usage, by Charge).
func (q *Quota) Allow(ctx context.Context, conv string, compacted bool, estimate int) (summarizer.QuotaDecision, error) {
	if limit := q.quotas.Conversations; limit > 0 && !compacted {
		n, err := q.conversations(ctx)
		if err != nil {
			return summarizer.QuotaDecision{}, err
		}
		if n > limit {
			q.declined("conversations")
			return summarizer.QuotaDecision{Reason: fmt.Sprintf("quota: tenant %s holds %d conversations, over its quota of %d: "+
				"a conversation never compacted before is not compacted until some are forgotten (compactor.forget); its messages are kept",
				q.tenant, n, limit)}, nil
		}
	}
	limit := q.quotas.SummarizerTokensPerDay
	if limit <= 0 {
		return summarizer.QuotaDecision{}, nil
	}
	now := q.now()
	retryIn := nextDay(now).Sub(now)
	noCount := summarizer.QuotaDecision{RetryIn: time.Minute, Reason: fmt.Sprintf("quota: tenant %s's summarizer tokens cannot be counted: "+
		"its deployment bucket is missing (run compactor provision as admin); its messages are kept", q.tenant)}
	if q.store.DeploymentBucketMissing() {
		q.declined("summarizer_tokens_per_day")
		return noCount, nil
	}
	used, ok, err := q.store.ReserveTokens(ctx, now, int64(estimate), limit)
	if errors.Is(err, jetstream.ErrNoDeploymentBucket) {
		q.declined("summarizer_tokens_per_day")
		return noCount, nil
	}
	if err != nil {
		return summarizer.QuotaDecision{}, err
	}
	if !ok {
		q.declined("summarizer_tokens_per_day")
		return summarizer.QuotaDecision{RetryIn: retryIn, Reason: fmt.Sprintf("quota: tenant %s used %d of its %d summarizer tokens today (UTC) "+
			"and this compaction needs about %d; compactions resume at 00:00 UTC (in %s); its messages are kept",
			q.tenant, used, limit, estimate, retryIn.Round(time.Minute))}, nil
	}
	return summarizer.QuotaDecision{Release: func() { q.release(now, int64(estimate)) }}, nil
}

// release takes back n tokens reserved on day's count.
func (q *Quota) release(day time.Time, n int64) {
	ctx, cancel := context.WithTimeout(context.Background(), chargeTimeout)
	defer cancel()
	if _, err := q.store.AddTokensUsed(ctx, day, -n); err != nil {
		q.log.Warn().Err(err).Int64("tokens", n).Msg("a reservation of summarizer tokens was not taken back: the day's count stays higher by it")
	}
}

// chargeTimeout bounds one write of the count.
const chargeTimeout = 10 * time.Second

// Charge counts the tokens of one LLM call of the tenant's (the llm summarizer's usage
// hook), quota or not, so the day's count is the tenant's spending. A count that cannot
// be written is logged: the tokens are spent.
func (q *Quota) Charge(u schemas.Usage) {
	n := int64(max(u.PromptTokens, 0)) + int64(max(u.CompletionTokens, 0))
	if n <= 0 {
		return
	}
	if q.Charged != nil {
		q.Charged(n)
	}
	if q.store.DeploymentBucketMissing() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), chargeTimeout)
	defer cancel()
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
