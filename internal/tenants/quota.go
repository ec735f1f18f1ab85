package tenants

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/summary"
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
//
// The day's count (usage.tokens.<day> in the tenant's deployment bucket) is what the
// tenant's LLM calls spent, and nothing else. What compactions in flight may still
// spend is held apart (usage.tokens.held-<day>: one reservation per compaction, with a
// deadline): a compaction starts only when the count, the live reservations and its
// own estimate fit in the quota. Each call's tokens are taken out of its process's
// reservations as they are counted, so a running compaction is counted once; a
// reservation ends with its compaction, and one whose process died (a crash, a kill)
// stops counting at its deadline, which its process pushes back while it works.
type Quota struct {
	tenant string
	quotas Quotas
	store  *jetstream.Store
	now    func() time.Time
	log    zerolog.Logger
	// holdFor is how long a reservation counts after its process last wrote the
	// reservations (holdTTL; a variable for the tests).
	holdFor time.Duration
	// Declined hears each compaction the quota declines, by the quota's name
	// (conversations, summarizer_tokens_per_day); nil: nobody.
	Declined func(quota string)
	// Charged hears the tokens each compaction spent; nil: nobody.
	Charged func(tokens int64)

	mu       sync.Mutex
	countAt  time.Time
	count    int64
	crowded  map[string]bool // the roots with more branches than count with them, at countAt
	admitted uint64          // how far CHAT went while the tenant was within its conversations (0: not read)
	own      map[string]*hold
	next     uint64
	prefix   string
}

// hold is one reservation of this process's, as it keeps it.
type hold struct {
	day    time.Time // the day whose reservations hold it
	tokens int64     // what is still reserved: the estimate less what its calls spent
}

// holdTTL is how long a reservation counts after its process last wrote the day's
// reservations: past one LLM call's timeout (2 min by default) several times over. A
// process writes them at every reservation, every counted call and every release.
const holdTTL = 15 * time.Minute

// NewQuota returns tenant's quota over its store.
func NewQuota(tenant string, q Quotas, st *jetstream.Store, log zerolog.Logger) *Quota {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Quota{tenant: tenant, quotas: q, store: st, now: time.Now, log: log, holdFor: holdTTL,
		own: map[string]*hold{}, prefix: hex.EncodeToString(b[:])}
}

// Allow decides whether compacting conv may start now. Under a token quota it reserves
// the compaction's estimate in the day's reservations, in one compare-and-set, when
// the day's count, the live reservations and the estimate fit in the quota, so
// compactions starting at once in every process cannot pass the quota together; the
// decision's Release ends the reservation once the compaction is done (its LLM calls
// are counted as they report their usage, by Charge, and taken out of it).
func (q *Quota) Allow(ctx context.Context, conv string, compacted bool, estimate int) (summarizer.QuotaDecision, error) {
	if limit := q.quotas.Conversations; limit > 0 && !compacted {
		n, refuse, err := q.newOverQuota(ctx, conv)
		if err != nil {
			return summarizer.QuotaDecision{}, err
		}
		if refuse {
			q.declined("conversations")
			return summarizer.QuotaDecision{Reason: fmt.Sprintf("quota: tenant %s holds %d conversations, over its quota of %d: "+
				"a conversation started after the tenant reached its quota is not compacted until some are forgotten (compactor.forget); its messages are kept",
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
	id, used, ok, err := q.reserve(ctx, now, int64(estimate), limit)
	if errors.Is(err, jetstream.ErrNoDeploymentBucket) {
		q.declined("summarizer_tokens_per_day")
		return noCount, nil
	}
	if err != nil {
		return summarizer.QuotaDecision{}, err
	}
	if !ok {
		q.declined("summarizer_tokens_per_day")
		return summarizer.QuotaDecision{RetryIn: retryIn, Reason: fmt.Sprintf("quota: tenant %s used or reserved %d of its %d summarizer tokens today (UTC) "+
			"and this compaction needs about %d; compactions resume at 00:00 UTC (in %s); its messages are kept",
			q.tenant, used, limit, estimate, retryIn.Round(time.Minute))}, nil
	}
	var once sync.Once
	return summarizer.QuotaDecision{Tag: id, Release: func() { once.Do(func() { q.release(id) }) }}, nil
}

// chargeTimeout bounds one write of the count.
const chargeTimeout = 10 * time.Second

// maxHoldAttempts bounds the compare-and-set retries of one update of the day's
// reservations: each lost race is another worker's update, which succeeded.
const maxHoldAttempts = 32

// holdsKey is the key of day's reservations in the deployment bucket. It is one token
// under usage.tokens, as the day's count is: the workers' permissions in a deployment of
// tenants (deploy/nats/tenants.conf, nsc-tenants.sh) allow them $KV.*.usage.tokens.*.
func holdsKey(day time.Time) string {
	return "usage.tokens.held-" + day.UTC().Format(time.DateOnly)
}

// heldRecord is one reservation as the deployment bucket holds it.
type heldRecord struct {
	Tokens int64     `json:"tokens"`
	Until  time.Time `json:"until"`
}

// updateHolds applies change to day's reservations (their expired ones dropped, this
// process's deadlines pushed back) and writes them with compare-and-set, unless change
// says no; it returns the day's count and what the live reservations hold, as read.
func (q *Quota) updateHolds(ctx context.Context, day time.Time, change func(spent, held int64, holds map[string]heldRecord) bool) (spent, held int64, ok bool, err error) {
	key := holdsKey(day)
	for range maxHoldAttempts {
		data, rev, err := q.store.DeploymentRecord(ctx, key)
		if err != nil {
			return 0, 0, false, err
		}
		holds := map[string]heldRecord{}
		if len(data) > 0 {
			if err := json.Unmarshal(data, &holds); err != nil {
				q.log.Warn().Err(err).Str("key", key).Msg("the day's reservations of summarizer tokens do not read; started again")
				holds = map[string]heldRecord{}
			}
		}
		// The count is read after the reservations: a call counted meanwhile is then
		// in both (the caller's estimate is higher, never lower).
		spent, _, err = q.store.TokensUsed(ctx, day)
		if err != nil {
			return 0, 0, false, err
		}
		now := q.now()
		q.mu.Lock()
		held = 0
		for id, h := range holds {
			if mine, ok := q.own[id]; ok {
				h = heldRecord{Tokens: mine.tokens, Until: now.Add(q.holdFor)}
				holds[id] = h
			} else if !h.Until.After(now) {
				delete(holds, id) // its process stopped working on it: it counts no more
				continue
			}
			held += h.Tokens
		}
		q.mu.Unlock()
		if !change(spent, held, holds) {
			return spent, held, false, nil
		}
		body, err := json.Marshal(holds)
		if err != nil {
			return 0, 0, false, err
		}
		_, err = q.store.PutDeploymentRecord(ctx, key, body, rev)
		if err == nil {
			return spent, held, true, nil
		}
		if !errors.Is(err, jetstream.ErrRevisionMismatch) {
			return 0, 0, false, err
		}
	}
	return 0, 0, false, fmt.Errorf("reservations of summarizer tokens: %d writers raced them; given up", maxHoldAttempts)
}

// reserve adds a reservation of n tokens to day's when the count, the live
// reservations and n fit in limit; used is the count and the reservations as read.
func (q *Quota) reserve(ctx context.Context, day time.Time, n, limit int64) (id string, used int64, ok bool, err error) {
	q.mu.Lock()
	q.next++
	id = fmt.Sprintf("%s-%d", q.prefix, q.next)
	q.mu.Unlock()
	spent, held, ok, err := q.updateHolds(ctx, day, func(spent, held int64, holds map[string]heldRecord) bool {
		if spent+held+n > limit {
			return false
		}
		holds[id] = heldRecord{Tokens: n, Until: q.now().Add(q.holdFor)}
		return true
	})
	if err != nil || !ok {
		return "", spent + held, false, err
	}
	q.mu.Lock()
	q.own[id] = &hold{day: day, tokens: n}
	q.mu.Unlock()
	return id, spent + held + n, true, nil
}

// release ends reservation id: what it still holds counts no more.
func (q *Quota) release(id string) {
	q.mu.Lock()
	h, ok := q.own[id]
	delete(q.own, id)
	q.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), chargeTimeout)
	defer cancel()
	if _, _, _, err := q.updateHolds(ctx, h.day, func(_, _ int64, holds map[string]heldRecord) bool {
		delete(holds, id)
		return true
	}); err != nil {
		q.log.Warn().Err(err).Int64("tokens", h.tokens).Dur("counts_for", q.holdFor).
			Msg("a reservation of summarizer tokens was not ended: it counts until its deadline")
	}
}

// Charge counts the tokens of one LLM call of the tenant's (the llm summarizer's usage
// hook), quota or not, so the day's count is the tenant's spending, then takes them out
// of the reservation the call was made under (its context's tag, summary.ChargeOf), so
// they are counted once. A count that cannot be written is logged: the tokens are
// spent.
func (q *Quota) Charge(ctx context.Context, u schemas.Usage) {
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
	tag := summary.ChargeOf(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chargeTimeout)
	defer cancel()
	if _, err := q.store.AddTokensUsed(ctx, q.now(), n); err != nil {
		q.log.Warn().Err(err).Int64("tokens", n).Msg("summarizer tokens not counted against the tenant's quota")
		return
	}
	// What the call spent comes out of the reservation it was made under: taken from
	// another, that one's compaction could end first and drop the part not taken, while
	// the call's own went on holding less than its compaction may still spend. A call
	// without a tag (made outside a compaction's reservation) takes from the oldest.
	days := map[time.Time]bool{}
	q.mu.Lock()
	ids := make([]string, 0, len(q.own))
	if _, ok := q.own[tag]; ok {
		ids = append(ids, tag)
	} else {
		for id := range q.own {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(seqOf(a), seqOf(b)) })
	}
	left := n
	for _, id := range ids {
		h := q.own[id]
		take := min(left, h.tokens)
		if take > 0 {
			h.tokens -= take
			left -= take
			days[h.day] = true
		}
	}
	q.mu.Unlock()
	for day := range days {
		if _, _, _, err := q.updateHolds(ctx, day, func(_, _ int64, _ map[string]heldRecord) bool { return true }); err != nil {
			q.log.Warn().Err(err).Msg("the reservations of summarizer tokens were not brought down to what is left of them: they count until their compactions end")
		}
	}
}

// seqOf is the number at the end of a reservation's id.
func seqOf(id string) uint64 {
	_, s, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// newOverQuota decides whether conv is refused by the conversations quota: the tenant
// holds more than its quota (a conversation and up to
// jetstream.BranchesPerConversation of its branches count as one), and conv (its root,
// for a branch) started after the tenant reached its quota. The conversations the
// tenant held before go on being compacted: being over the quota refuses new ones
// only. A branch of a root with more branches than count with it is judged on its own:
// the root's age does not admit branches beyond the bound. n is the count.
func (q *Quota) newOverQuota(ctx context.Context, conv string) (n int64, refuse bool, err error) {
	n, admitted, crowded, err := q.conversations(ctx)
	if err != nil || n <= q.quotas.Conversations {
		return n, false, err
	}
	judged := jetstream.ConversationRoot(conv)
	if crowded[judged] {
		judged = conv
	}
	first, err := q.store.Chat().FirstSeq(ctx, judged)
	if err != nil {
		return n, false, err
	}
	if first == 0 && judged != conv { // its root has no message left: the branch's own first one
		if first, err = q.store.Chat().FirstSeq(ctx, conv); err != nil {
			return n, false, err
		}
	}
	return n, first == 0 || first > admitted, nil
}

// admittedKey is the key, in the deployment bucket, of how far CHAT went while the
// tenant held no more conversations than its quota (under usage.tokens, which the
// workers may write: see holdsKey).
const admittedKey = "usage.tokens.conversations-admitted-through"

// conversations is the tenant's count of conversations (branches with their root, up
// to jetstream.BranchesPerConversation of them), read at most every countTTL, how far
// CHAT went while the tenant held no more than its quota (every conversation whose
// first message is at or below it is one the tenant held then) and the roots with
// more branches than count with them. While within the quota it follows CHAT's last
// sequence; the first time a process finds the tenant over it with nothing recorded,
// every conversation held then counts as held before.
func (q *Quota) conversations(ctx context.Context) (int64, uint64, map[string]bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now := q.now(); now.Sub(q.countAt) < countTTL && q.admitted > 0 {
		return q.count, q.admitted, q.crowded, nil
	}
	cc, err := q.store.ChatRoots(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	q.count, q.crowded, q.countAt = cc.Conversations, cc.Crowded, q.now()
	within := cc.Conversations <= q.quotas.Conversations
	if !within && q.admitted > 0 {
		return q.count, q.admitted, q.crowded, nil
	}
	admitted, err := q.recordAdmitted(ctx, cc.LastSeq, within)
	if err != nil {
		return 0, 0, nil, err
	}
	q.admitted = admitted
	return q.count, q.admitted, q.crowded, nil
}

// recordAdmitted reads the recorded sequence and, while the tenant is within its quota
// (or nothing is recorded yet), moves it up to last. Without the deployment bucket it
// is kept in this process only.
func (q *Quota) recordAdmitted(ctx context.Context, last uint64, within bool) (uint64, error) {
	if q.store.DeploymentBucketMissing() {
		return max(q.admitted, last), nil
	}
	for range maxHoldAttempts {
		data, rev, err := q.store.DeploymentRecord(ctx, admittedKey)
		if err != nil {
			return 0, err
		}
		have, _ := strconv.ParseUint(string(data), 10, 64)
		if have >= last || (!within && have > 0) {
			return have, nil
		}
		if _, err = q.store.PutDeploymentRecord(ctx, admittedKey, []byte(strconv.FormatUint(last, 10)), rev); err == nil {
			return last, nil
		}
		if errors.Is(err, jetstream.ErrNoDeploymentBucket) {
			return max(q.admitted, last), nil
		}
		if !errors.Is(err, jetstream.ErrRevisionMismatch) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%s: %d writers raced it; given up", admittedKey, maxHoldAttempts)
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
