package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/schemas"
)

// ErrRevisionMismatch means the KV value changed since it was read: a compare-and-set
// lost the race.
var ErrRevisionMismatch = errors.New("compaction value changed since it was read")

// GetResult reads a conversation's compaction value and its revision. It returns
// (nil, 0, nil) when the conversation was never compacted. With fromLeader the stream
// leader answers, so the read sees every acknowledged write; otherwise any replica may.
func (s *Store) GetResult(ctx context.Context, conv string, fromLeader bool) (*schemas.Result, uint64, error) {
	if err := schemas.ValidateConversationID(conv); err != nil {
		return nil, 0, err
	}
	if !fromLeader {
		e, err := s.results.Get(ctx, conv)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			return nil, 0, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("get %s/%s: %w", s.cfg.ResultsBucket, conv, err)
		}
		r, err := decodeResultOf(conv, e.Value())
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

// PutResult writes a value with compare-and-set: revision 0 creates the key (it must
// not exist), any other revision must still be the current one. It returns the new
// revision, or ErrRevisionMismatch when the value changed meanwhile.
func (s *Store) PutResult(ctx context.Context, r *schemas.Result, revision uint64) (uint64, error) {
	if err := schemas.ValidateConversationID(r.Conversation); err != nil {
		return 0, err
	}
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
	return false
}
