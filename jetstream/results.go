package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// ErrRevisionMismatch means the KV value changed since it was read: a compare-and-set
// lost the race.
var ErrRevisionMismatch = errors.New("compaction value changed since it was read")

// ErrRequestPending means a request for the conversation already waits in the queue.
var ErrRequestPending = errors.New("a compaction request is already pending")

// GetResult reads a conversation's compaction value and its revision. It returns
// (nil, 0, nil) when the conversation was never compacted. With fromLeader the stream
// leader answers, so the read sees every acknowledged write; otherwise any replica may.
func (s *Store) GetResult(ctx context.Context, conv string, fromLeader bool) (*schemas.Result, uint64, error) {
	if !fromLeader {
		e, err := s.results.Get(ctx, conv)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("get %s/%s: %w", s.cfg.ResultsBucket, conv, err)
		}
		r, err := schemas.DecodeResult(e.Value())
		if err != nil {
			return nil, 0, err
		}
		return r, e.Revision(), nil
	}
	m, err := s.leaderGet(ctx, "KV_"+s.cfg.ResultsBucket, map[string]any{
		"last_by_subj": "$KV." + s.cfg.ResultsBucket + "." + conv,
	})
	if errors.Is(err, errNoMessage) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, nil
	}
	r, err := schemas.DecodeResult(m.Data)
	if err != nil {
		return nil, 0, err
	}
	return r, m.Seq, nil
}

// PutResult writes a value with compare-and-set: revision 0 creates the key (it must
// not exist), any other revision must still be the current one. It returns the new
// revision, or ErrRevisionMismatch when the value changed meanwhile.
func (s *Store) PutResult(ctx context.Context, r *schemas.Result, revision uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("encode compaction value: %w", err)
	}
	var rev uint64
	if revision == 0 {
		rev, err = s.results.Create(ctx, r.Conversation, data)
	} else {
		rev, err = s.results.Update(ctx, r.Conversation, data, revision)
	}
	if err != nil {
		if isWrongLastSequence(err) {
			return 0, fmt.Errorf("%w (%s at revision %d)", ErrRevisionMismatch, r.Conversation, revision)
		}
		return 0, fmt.Errorf("write %s/%s: %w", s.cfg.ResultsBucket, r.Conversation, err)
	}
	return rev, nil
}

func isWrongLastSequence(err error) bool {
	if errors.Is(err, natsjs.ErrKeyExists) {
		return true
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == natsjs.JSErrCodeStreamWrongLastSequenceConstant
	}
	return strings.Contains(err.Error(), "wrong last sequence")
}

// Enqueue puts a request on the work queue and returns its queue sequence. It returns
// ErrRequestPending when one already waits for the conversation (the queue keeps at
// most one per conversation); any other error is an error.
func (s *Store) Enqueue(ctx context.Context, req schemas.Request) (uint64, error) {
	if err := req.Validate(); err != nil {
		return 0, err
	}
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	ack, err := s.js.Publish(ctx, s.cfg.RequestSubject(req.Conversation), data,
		natsjs.WithMsgID(req.RequestID), natsjs.WithExpectStream(s.cfg.RequestsStream))
	if err != nil {
		if strings.Contains(err.Error(), "maximum messages per subject exceeded") {
			return 0, ErrRequestPending
		}
		return 0, fmt.Errorf("queue compaction of %s: %w", req.Conversation, err)
	}
	if ack.Duplicate {
		return ack.Sequence, ErrRequestPending
	}
	return ack.Sequence, nil
}

// PendingRequest returns the request waiting (or being worked on) for a conversation,
// nil when there is none.
func (s *Store) PendingRequest(ctx context.Context, conv string) (*schemas.Request, error) {
	st, err := s.js.Stream(ctx, s.cfg.RequestsStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.cfg.RequestsStream, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, s.cfg.RequestSubject(conv))
	if errors.Is(err, natsjs.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the pending request of %s: %w", conv, err)
	}
	var r schemas.Request
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("decode the pending request of %s: %w", conv, err)
	}
	return &r, nil
}

// PublishEvent publishes an event on compact.event.<conv>.
func (s *Store) PublishEvent(ctx context.Context, ev schemas.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, s.cfg.EventSubject(ev.Conversation), data); err != nil {
		return fmt.Errorf("publish %s event for %s: %w", ev.Type, ev.Conversation, err)
	}
	return nil
}

// PublishDead records a request that used up its attempts.
func (s *Store) PublishDead(ctx context.Context, d schemas.DeadLetter) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if _, err := s.js.Publish(ctx, s.cfg.DeadSubject(d.Request.Conversation), data); err != nil {
		return fmt.Errorf("publish dead letter for %s: %w", d.Request.Conversation, err)
	}
	return nil
}

// TriggerConsumer returns the durable consumer the trigger reads CHAT with.
func (s *Store) TriggerConsumer(ctx context.Context) (natsjs.Consumer, error) {
	c, err := s.js.Consumer(ctx, s.cfg.ChatStream, s.cfg.TriggerConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", s.cfg.TriggerConsumer, s.cfg.ChatStream, err)
	}
	return c, nil
}

// IdleConsumer returns the durable consumer the trigger reads idle markers with.
func (s *Store) IdleConsumer(ctx context.Context) (natsjs.Consumer, error) {
	c, err := s.js.Consumer(ctx, s.cfg.ActivityStream, s.cfg.IdleConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", s.cfg.IdleConsumer, s.cfg.ActivityStream, err)
	}
	return c, nil
}

// WorkerConsumer returns the durable consumer the summarizer pool shares.
func (s *Store) WorkerConsumer(ctx context.Context) (natsjs.Consumer, error) {
	c, err := s.js.Consumer(ctx, s.cfg.RequestsStream, s.cfg.WorkerConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", s.cfg.WorkerConsumer, s.cfg.RequestsStream, err)
	}
	return c, nil
}

// GetPolicy reads a conversation's policy and its revision (nil, 0 when it has none)
// from the stream leader, so a compare-and-set on the revision sees every write.
func (s *Store) GetPolicy(ctx context.Context, conv string) ([]byte, uint64, error) {
	m, err := s.leaderGet(ctx, "KV_"+s.cfg.PolicyBucket, map[string]any{
		"last_by_subj": "$KV." + s.cfg.PolicyBucket + "." + conv,
	})
	if errors.Is(err, errNoMessage) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s: %w", s.cfg.PolicyBucket, conv, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, nil // a deleted policy is created again (revision 0)
	}
	return m.Data, m.Seq, nil
}

// PutPolicy writes a conversation's policy with compare-and-set on the revision
// GetPolicy returned: revision 0 creates the key (it must not hold a policy), any other
// revision must still be the current one. Nil data deletes the policy, on that revision
// when it is not 0. A policy changed meanwhile is an error matching
// ErrRevisionMismatch: read it again, apply the change again and retry.
func (s *Store) PutPolicy(ctx context.Context, conv string, data []byte, revision uint64) error {
	kv, err := s.js.KeyValue(ctx, s.cfg.PolicyBucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", s.cfg.PolicyBucket, err)
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
			return fmt.Errorf("%w (policy %s/%s at revision %d)", ErrRevisionMismatch, s.cfg.PolicyBucket, conv, revision)
		}
		return fmt.Errorf("write %s/%s: %w", s.cfg.PolicyBucket, conv, err)
	}
	return nil
}

// PolicyAttempts is how often UpdatePolicy applies a change before giving up on
// writers that keep changing the policy first.
const PolicyAttempts = 5

// UpdatePolicy is a read-modify-write of a conversation's policy with compare-and-set:
// change gets the current policy (nil: none) and returns the next one (nil: delete) and
// whether to write at all. When another writer changed the policy meanwhile, the change
// is applied again to the newer policy, up to PolicyAttempts times, with a growing,
// jittered pause; then the error matches ErrRevisionMismatch and nothing was written.
// An error from change ends it at once.
func (s *Store) UpdatePolicy(ctx context.Context, conv string, change func(current []byte) (next []byte, write bool, err error)) error {
	for attempt := 1; ; attempt++ {
		data, rev, err := s.GetPolicy(ctx, conv)
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
		err = s.PutPolicy(ctx, conv, next, rev)
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

// PolicySubject matches every update of the policy bucket, for watchers.
func (s *Store) PolicySubject() string { return "$KV." + s.cfg.PolicyBucket + ".>" }
