package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The summarizer tokens a deployment (a tenant: its own deployment bucket) spent, per
// UTC day, are counted in its deployment bucket under usage.tokens.<YYYY-MM-DD>: the
// workers of every process add to the same count with compare-and-set, so a quota holds
// across processes. A count is a decimal number.

// usageSubject is the subject of day's count of summarizer tokens.
func (s *Store) usageSubject(day time.Time) string {
	return "$KV." + s.cfg.DeploymentBucket + ".usage.tokens." + day.UTC().Format(time.DateOnly)
}

// maxUsageAttempts bounds the compare-and-set retries of one update of a count: each lost race is
// another worker's add, which succeeded.
const maxUsageAttempts = 16

// TokensUsed is the summarizer tokens counted for day (UTC), and the count's revision
// (0: none yet), read from the bucket's stream leader.
func (s *Store) TokensUsed(ctx context.Context, day time.Time) (n int64, rev uint64, err error) {
	m, err := s.leaderGet(ctx, s.deploymentStream(), map[string]any{"last_by_subj": s.usageSubject(day)})
	if errors.Is(err, errNoMessage) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("tokens used on %s: %w", day.UTC().Format(time.DateOnly), err)
	}
	if kvDeleted(&m) {
		return 0, m.Seq, nil
	}
	n, err = strconv.ParseInt(string(m.Data), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, fmt.Errorf("tokens used on %s: the count %q is not a number", day.UTC().Format(time.DateOnly), m.Data)
	}
	return n, m.Seq, nil
}

// AddTokensUsed adds n tokens to day's count (n < 0 takes them off, down to 0) and
// returns the new count.
func (s *Store) AddTokensUsed(ctx context.Context, day time.Time, n int64) (int64, error) {
	total, _, err := s.updateTokensUsed(ctx, day, func(have int64) (int64, bool) { return max(have+n, 0), true })
	return total, err
}

// ReserveTokens adds n tokens to day's count when the count stays within limit, in one
// compare-and-set, so workers of every process reserving at once never pass the limit
// together. It returns the count (with n when reserved) and whether n was reserved.
func (s *Store) ReserveTokens(ctx context.Context, day time.Time, n, limit int64) (int64, bool, error) {
	return s.updateTokensUsed(ctx, day, func(have int64) (int64, bool) { return have + n, have+n <= limit })
}

// updateTokensUsed sets day's count to what next makes of it, with compare-and-set,
// unless next says no; it returns the count and whether it was set.
func (s *Store) updateTokensUsed(ctx context.Context, day time.Time, next func(have int64) (int64, bool)) (int64, bool, error) {
	for range maxUsageAttempts {
		have, rev, err := s.TokensUsed(ctx, day)
		if err != nil {
			return 0, false, err
		}
		total, ok := next(have)
		if !ok {
			return have, false, nil
		}
		_, err = s.js.Publish(ctx, s.usageSubject(day), []byte(strconv.FormatInt(total, 10)),
			natsjs.WithExpectStream(s.deploymentStream()), natsjs.WithExpectLastSequencePerSubject(rev))
		if err == nil {
			return total, true, nil
		}
		if errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, natsjs.ErrStreamNotFound) {
			return 0, false, fmt.Errorf("count tokens in %s: %w (%w)", s.cfg.DeploymentBucket, ErrNoDeploymentBucket, err)
		}
		if !isWrongLastSequence(err) {
			return 0, false, fmt.Errorf("count tokens in %s: %w", s.cfg.DeploymentBucket, err)
		}
	}
	return 0, false, fmt.Errorf("count tokens in %s: %d writers raced it; given up", s.cfg.DeploymentBucket, maxUsageAttempts)
}

// DeploymentBucketMissing reports whether the deployment bucket was missing when the
// store was opened (an optional bucket this user may not create).
func (s *Store) DeploymentBucketMissing() bool {
	return slices.Contains(s.MissingBuckets(), s.cfg.DeploymentBucket)
}

// ChatFigures are what CHAT and the objects bucket hold.
type ChatFigures struct {
	// Conversations is how many conversations CHAT holds, a conversation and up to
	// BranchesPerConversation of its branches (the proxy's <conversation>--<16 hex
	// digits>) counted as one, as the conversations quota counts them (ChatRoots).
	Conversations int64
	// Bytes is what the conversations store: ChatBytes and ObjectBytes together, what a
	// tenant's stored_bytes quota bounds (each stream by its own max_bytes).
	Bytes int64
	// ChatBytes is CHAT's size, ObjectBytes the objects bucket's (the messages over the
	// max payload).
	ChatBytes, ObjectBytes int64
}

// ChatState reads how many conversations CHAT holds and the bytes CHAT and the objects
// bucket hold.
func (s *Store) ChatState(ctx context.Context) (ChatFigures, error) {
	str, err := s.js.Stream(ctx, s.cfg.ChatStream)
	if err != nil {
		return ChatFigures{}, fmt.Errorf("stream %s: %w", s.cfg.ChatStream, err)
	}
	info := str.CachedInfo() // read by the lookup just now
	f := ChatFigures{ChatBytes: int64(info.State.Bytes)}
	cc, err := s.ChatRoots(ctx)
	if err != nil {
		return ChatFigures{}, err
	}
	f.Conversations = cc.Conversations
	objects := objectsStream(s.cfg.ObjectsBucket)
	if obj, err := s.js.Stream(ctx, objects); err == nil {
		f.ObjectBytes = int64(obj.CachedInfo().State.Bytes)
	} else if !errors.Is(err, natsjs.ErrStreamNotFound) {
		return ChatFigures{}, fmt.Errorf("stream %s: %w", objects, err)
	}
	f.Bytes = f.ChatBytes + f.ObjectBytes
	return f, nil
}
