package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// Results is the handle on the results bucket, the compaction values: it reads and
// compare-and-sets a conversation's value, removes revisions of it, reads its history,
// and reads a value together with its tombstone on first sight. Store.Results returns
// it.
type Results struct{ *core }

// ErrRevisionMismatch means the KV value changed since it was read: a compare-and-set
// lost the race.
var ErrRevisionMismatch = errors.New("compaction value changed since it was read")

// Get reads a conversation's compaction value and its revision. It returns
// (nil, 0, nil) when the conversation was never compacted. With fromLeader the stream
// leader answers, so the read sees every acknowledged write; otherwise any replica may.
func (rs *Results) Get(ctx context.Context, conv string, fromLeader bool) (*schemas.Result, uint64, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, 0, err
	}
	if !fromLeader {
		e, err := rs.resultsKV.Get(ctx, conv)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("get %s/%s: %w", rs.cfg.ResultsBucket, conv, err)
		}
		r, err := decodeResultOf(conv, e.Value())
		if err != nil {
			return nil, 0, err
		}
		return r, e.Revision(), nil
	}
	m, err := rs.leaderGet(ctx, "KV_"+rs.cfg.ResultsBucket, map[string]any{
		"last_by_subj": "$KV." + rs.cfg.ResultsBucket + "." + conv,
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
	r, err := decodeResultOf(conv, m.Data)
	if err != nil {
		return nil, 0, err
	}
	return r, m.Seq, nil
}

// decodeResultOf decodes the value stored under conv's key, which must be conv's.
func decodeResultOf(conv string, data []byte) (*schemas.Result, error) {
	r, err := schemas.DecodeResult(data)
	if err != nil {
		return nil, fmt.Errorf("compaction value of %s: %w", conv, err)
	}
	if r.Conversation != conv {
		return nil, fmt.Errorf("compaction value of %s: %w", conv,
			&schemas.ValidationError{Field: "conversation", Rule: fmt.Sprintf("is %q, not the key's", r.Conversation)})
	}
	return r, nil
}

// Put writes a value with compare-and-set: revision 0 creates the key (it must
// not exist), any other revision must still be the current one. It returns the new
// revision, or ErrRevisionMismatch when the value changed meanwhile.
func (rs *Results) Put(ctx context.Context, r *schemas.Result, revision uint64) (uint64, error) {
	if err := schemas.ValidateConversationID(r.Conversation); err != nil {
		return 0, err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("encode compaction value: %w", err)
	}
	var rev uint64
	if revision == 0 {
		rev, err = rs.resultsKV.Create(ctx, r.Conversation, data)
	} else {
		rev, err = rs.resultsKV.Update(ctx, r.Conversation, data, revision)
	}
	if err != nil {
		if isWrongLastSequence(err) {
			return 0, fmt.Errorf("%w (%s at revision %d)", ErrRevisionMismatch, r.Conversation, revision)
		}
		return 0, fmt.Errorf("write %s/%s: %w", rs.cfg.ResultsBucket, r.Conversation, err)
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
	return false
}

// Remove deletes the revisions of a conversation's value up to and including
// rev, and none written after it: a job takes back its own write, or a value of a
// forgotten conversation it found, without touching a newer one. No delete marker is
// left (it would keep the key, the conversation id).
func (rs *Results) Remove(ctx context.Context, conv string, rev uint64) error {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return err
	}
	if _, err := rs.purge(ctx, "KV_"+rs.cfg.ResultsBucket, "$KV."+rs.cfg.ResultsBucket+"."+conv, rev+1); err != nil {
		return fmt.Errorf("remove the value of %s through revision %d: %w", conv, rev, err)
	}
	return nil
}

// Conversations lists the keys of the results bucket: every conversation with a value
// (compactor verify walks them with CHAT's, since a conversation whose messages are all
// gone has no subject left in CHAT).
func (rs *Results) Conversations(ctx context.Context) ([]string, error) {
	l, err := rs.resultsKV.ListKeys(ctx)
	if err != nil {
		if errors.Is(err, natsjs.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list the keys of %s: %w", rs.cfg.ResultsBucket, err)
	}
	defer func() { _ = l.Stop() }()
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, ctx.Err()
}
