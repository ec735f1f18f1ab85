package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Policies is the handle on the policy bucket, the conversations' own settings: it
// reads, compare-and-sets, updates and watches them. Store.Policies returns it.
type Policies struct{ *core }

// Get reads a conversation's policy and its revision (nil, 0 when it has none)
// from the stream leader, so a compare-and-set on the revision sees every write.
func (po *Policies) Get(ctx context.Context, conv string) ([]byte, uint64, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, 0, err
	}
	m, err := po.leaderGet(ctx, "KV_"+po.cfg.PolicyBucket, map[string]any{
		"last_by_subj": "$KV." + po.cfg.PolicyBucket + "." + conv,
	})
	if errors.Is(err, errNoMessage) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", po.cfg.PolicyBucket, conv, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, nil // a deleted policy is created again (revision 0)
	}
	return m.Data, m.Seq, nil
}

// Put writes a conversation's policy with compare-and-set on the revision
// Get returned: revision 0 creates the key (it must not hold a policy), any other
// revision must still be the current one. Nil data deletes the policy, on that revision
// when it is not 0. A policy changed meanwhile is an error matching
// ErrRevisionMismatch: read it again, apply the change again and retry.
func (po *Policies) Put(ctx context.Context, conv string, data []byte, revision uint64) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return err
	}
	kv, err := po.js.KeyValue(ctx, po.cfg.PolicyBucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", po.cfg.PolicyBucket, err)
	}
	switch {
	case data == nil && revision == 0:
		err = kv.Delete(ctx, conv)
	case data == nil:
		err = kv.Delete(ctx, conv, natsjs.LastRevision(revision))
	case revision == 0:
		_, err = kv.Create(ctx, conv, data)
	default:
		_, err = kv.Update(ctx, conv, data, revision)
	}
	if err != nil {
		if isWrongLastSequence(err) {
			return fmt.Errorf("%w (policy %s/%s at revision %d)", ErrRevisionMismatch, po.cfg.PolicyBucket, conv, revision)
		}
		return fmt.Errorf("write %s/%s: %w", po.cfg.PolicyBucket, conv, err)
	}
	return nil
}

// PolicyAttempts is how often Policies.Update applies a change before giving up on
// writers that keep changing the policy first.
const PolicyAttempts = 5

// Update is a read-modify-write of a conversation's policy with compare-and-set:
// change gets the current policy (nil: none) and returns the next one (nil: delete) and
// whether to write at all. When another writer changed the policy meanwhile, the change
// is applied again to the newer policy, up to PolicyAttempts times, with a growing,
// jittered pause; then the error matches ErrRevisionMismatch and nothing was written.
// An error from change ends it at once.
func (po *Policies) Update(ctx context.Context, conv string, change func(current []byte) (next []byte, write bool, err error)) error {
	for attempt := 1; ; attempt++ {
		data, rev, err := po.Get(ctx, conv)
		if err != nil {
			return err
		}
		next, write, err := change(data)
		if err != nil || !write {
			return err
		}
		if data == nil && next == nil {
			return nil // nothing to delete
		}
		err = po.Put(ctx, conv, next, rev)
		if !errors.Is(err, ErrRevisionMismatch) || attempt == PolicyAttempts {
			if err != nil && attempt == PolicyAttempts {
				return fmt.Errorf("the policy of %s was changed by others %d times while this change was applied; nothing was written: retry: %w", conv, PolicyAttempts, err)
			}
			return err
		}
		t := time.NewTimer(time.Duration(attempt)*10*time.Millisecond + rand.N(10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Watch calls fn with the conversation of every policy change from now on
// (a change to a key that is not a valid conversation id is ignored). fn runs on the
// subscription's goroutine: it must not block for long.
func (po *Policies) Watch(fn func(conv string)) (*Subscription, error) {
	prefix := "$KV." + po.cfg.PolicyBucket
	sub, err := po.nc.Subscribe(prefix+".*", func(m *nats.Msg) {
		if conv, ok := conversationAfter(prefix, m.Subject); ok {
			fn(conv)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", po.cfg.PolicyBucket, err)
	}
	return &Subscription{sub: sub}, nil
}
