package proxy

import (
	"context"
	"strconv"

	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// seed starts branch from its parent when the branch has no messages yet: with the
// parent's summary (and the messages its context keeps ahead of it) when that summary
// covers only messages the client still has unchanged, the first len(common) of its
// history. The summary is reused only on that digest: the parent's link at the last
// position it covers must equal the client's. Otherwise the branch gets no seed and
// starts from the client's own messages.
func (s *Store) seed(ctx context.Context, parent, branch string, stored []schemas.Entry, common []Digest, owner string) error {
	tp, err := s.tip(ctx, branch)
	if err != nil || !tp.empty {
		return err
	}
	v, err := s.c.Result(ctx, parent)
	if err != nil || v == nil {
		return err
	}
	pos, link, ok := coveredPosition(stored, v.TailStartSeq)
	if !ok || pos == 0 || pos > len(common) || common[pos-1] != link {
		return nil
	}
	cx, err := s.c.Context(ctx, parent, pipeline.Value(v))
	if err != nil || cx.Generation != v.Generation {
		return err
	}
	base, err := s.base(ctx, branch, tp)
	if err != nil {
		return err
	}
	var batch []pipeline.BatchMsg
	for i := range cx.Messages {
		if cx.Seqs[i] != 0 && cx.Seqs[i] >= v.TailStartSeq {
			break
		}
		m := cx.Messages[i].StripMetadata()
		m.Meta = withMeta(nil, pos, link, owner)
		m.Meta[MetaSeed] = parent
		batch = append(batch, pipeline.BatchMsg{Conv: branch, Message: m, MsgID: "proxy-seed:" + branch + ":" + strconv.FormatUint(base, 10) + ":" + strconv.Itoa(i)})
	}
	if len(batch) == 0 {
		return nil
	}
	_, err = s.c.PublishBatch(ctx, batch, pipeline.BatchOptions{})
	return err
}

// coveredPosition is the client position of the newest stored message before
// tailStart (the last one a summary with that tail start covers) and its link.
func coveredPosition(stored []schemas.Entry, tailStart uint64) (int, Digest, bool) {
	for i := len(stored) - 1; i >= 0; i-- {
		if stored[i].Seq < tailStart {
			return position(&stored[i].Message)
		}
	}
	return 0, Digest{}, false
}
