package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// A tenant's quotas keep what they must share across processes in its deployment
// bucket, beside the day's count of tokens (usage.go): the reservations in flight
// (internal/tenants.Quota) and how far CHAT went while the tenant held no more
// conversations than its quota. These are the raw reads and compare-and-set writes.

// DeploymentRecord reads key of the deployment bucket from its stream leader: its value
// and revision (nil and 0: none, or deleted).
func (s *Store) DeploymentRecord(ctx context.Context, key string) ([]byte, uint64, error) {
	m, err := s.leaderGet(ctx, s.deploymentStream(), map[string]any{"last_by_subj": s.deploymentSubject(key)})
	if errors.Is(err, errNoMessage) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s/%s: %w", s.cfg.DeploymentBucket, key, err)
	}
	if kvDeleted(&m) {
		return nil, m.Seq, nil
	}
	return m.Data, m.Seq, nil
}

// PutDeploymentRecord writes key of the deployment bucket when its revision is still rev
// (0: no value yet) and returns the new revision; a value written meanwhile is
// ErrRevisionMismatch, a missing bucket ErrNoDeploymentBucket.
func (s *Store) PutDeploymentRecord(ctx context.Context, key string, data []byte, rev uint64) (uint64, error) {
	ack, err := s.js.Publish(ctx, s.deploymentSubject(key), data,
		natsjs.WithExpectStream(s.deploymentStream()), natsjs.WithExpectLastSequencePerSubject(rev))
	switch {
	case err == nil:
		return ack.Sequence, nil
	case errors.Is(err, natsjs.ErrNoStreamResponse) || errors.Is(err, natsjs.ErrStreamNotFound):
		return 0, fmt.Errorf("write %s/%s: %w (%w)", s.cfg.DeploymentBucket, key, ErrNoDeploymentBucket, err)
	case isWrongLastSequence(err):
		return 0, fmt.Errorf("write %s/%s: %w", s.cfg.DeploymentBucket, key, ErrRevisionMismatch)
	}
	return 0, fmt.Errorf("write %s/%s: %w", s.cfg.DeploymentBucket, key, err)
}

func (s *Store) deploymentSubject(key string) string {
	return "$KV." + s.cfg.DeploymentBucket + "." + key
}

// ConversationRoot is the conversation a branch belongs to (conv itself when it is no
// branch): the proxy names a branch <conversation>--<16 hex digits> (IsBranch).
func ConversationRoot(conv string) string {
	for IsBranch(conv) {
		conv = conv[:len(conv)-BranchDigits-len(BranchSep)]
	}
	return conv
}

// BranchesPerConversation is how many branches count with their conversation: a
// conversation and up to this many branches are one conversation to the conversations
// quota; each branch past them counts as a conversation of its own. The proxy makes a
// branch when a client edits or regenerates its history, a few a session; a producer
// that names thousands of conversations <root>--<16 hex digits> gets no more from the
// quota than one that names them anything else. A constant, so that every process of
// a deployment counts alike.
const BranchesPerConversation = 32

// ChatCount is what one listing of CHAT's subjects tells the conversations quota.
type ChatCount struct {
	// Conversations is how many conversations CHAT holds: each root (ConversationRoot)
	// with up to BranchesPerConversation of its branches is one; each branch past them
	// one more.
	Conversations int64
	// LastSeq is CHAT's last sequence when it was listed.
	LastSeq uint64
	// Crowded holds the roots with more than BranchesPerConversation branches: their
	// branches are judged each on its own by the quota, not as their root.
	Crowded map[string]bool
}

// ChatRoots reads how many conversations CHAT holds, each counted with up to
// BranchesPerConversation of its branches as one, and CHAT's last sequence, from one
// stream info that lists its subjects.
func (s *Store) ChatRoots(ctx context.Context) (ChatCount, error) {
	str, err := s.js.Stream(ctx, s.cfg.ChatStream)
	if err != nil {
		return ChatCount{}, fmt.Errorf("stream %s: %w", s.cfg.ChatStream, err)
	}
	info, err := str.Info(ctx, natsjs.WithSubjectFilter(s.cfg.ChatPrefix+".>"))
	if err != nil {
		return ChatCount{}, fmt.Errorf("stream %s: %w", s.cfg.ChatStream, err)
	}
	branches := make(map[string]int, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		conv, ok := s.cfg.ConversationOf(subj)
		if !ok {
			conv = strings.TrimPrefix(subj, s.cfg.ChatPrefix+".") // counted as it is stored
		}
		root := ConversationRoot(conv)
		if root != conv {
			branches[root]++ // a root with branches only (its own messages aged out) is one all the same
		} else if _, ok := branches[root]; !ok {
			branches[root] = 0
		}
	}
	c := ChatCount{LastSeq: info.State.LastSeq}
	for root, n := range branches {
		c.Conversations += 1 + int64(max(0, n-BranchesPerConversation))
		if n > BranchesPerConversation {
			if c.Crowded == nil {
				c.Crowded = map[string]bool{}
			}
			c.Crowded[root] = true
		}
	}
	return c, nil
}
