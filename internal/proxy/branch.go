package proxy

import (
	"context"
	"errors"
	"strconv"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// parentView is what a diverging history was compared with.
type parentView struct {
	// common is how many of the client's first messages the conversation holds
	// unchanged.
	common int
	// value is the conversation's live value (nil: never compacted) and covered the
	// last client position its summary covers (0: unknown).
	value   *schemas.Result
	covered int
}

// common compares the client's history with conv's. The tail of conv's live value
// is read first: a regenerate or an edit of a recent message is found there. Only an
// edit of a message the summary covers needs the whole conversation.
func (s *Store) common(ctx context.Context, conv string, chain []Digest) (parentView, error) {
	v, err := s.c.Result(ctx, conv)
	if err != nil {
		return parentView{}, err
	}
	pv := parentView{value: v}
	from := uint64(1)
	if v != nil {
		from = v.TailStartSeq
	}
	tail, err := s.entries(ctx, conv, from)
	if err != nil {
		return parentView{}, err
	}
	pv.common = longestCommon(tail, chain)
	if v == nil || len(tail) == 0 {
		if v != nil {
			// Everything is summarized: compare with the whole conversation.
			pv.common, err = s.scanLinks(ctx, conv, chain)
		}
		return pv, err
	}
	first := &tail[0].Message
	pos, link, ok := position(first)
	if !ok || first.Meta[MetaSeed] != "" {
		return pv, nil
	}
	pv.covered = pos - 1
	if pv.common > 0 || pv.covered == 0 || pv.covered > len(chain) {
		return pv, nil
	}
	// The client's history diverges at the first message of the tail or before: the
	// first tail message's link tells whether it still has what the summary covers.
	if Link(chain[pv.covered-1], first) == link {
		pv.common = pv.covered
		return pv, nil
	}
	pv.common, err = s.scanLinks(ctx, conv, chain)
	return pv, err
}

// maxLinkScan bounds how many stored messages an edit of a summarized message reads to
// find where the client's history leaves the conversation. Past it the branch starts
// from the client's own messages: what the model is sent is the same, only no summary
// is reused.
const maxLinkScan = 20_000

// scanLinks is longestCommon over conv's oldest maxLinkScan messages, read a page at a
// time and kept only as far as their links.
func (s *Store) scanLinks(ctx context.Context, conv string, chain []Digest) (int, error) {
	best := 0
	for from, read := uint64(1), 0; read < maxLinkScan; {
		page, more, err := s.st.Chat().LoadPage(ctx, conv, from, 0, jetstream.DirectBatchSize-1)
		if err != nil {
			return 0, err
		}
		entries := make([]schemas.Entry, 0, len(page))
		for _, m := range page {
			if e := m.Entry(); e.Err == nil {
				entries = append(entries, e)
			}
		}
		best = max(best, longestCommon(entries, chain))
		read += len(page)
		if !more || len(page) == 0 {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	return best, nil
}

// entries reads conv's messages from sequence from on, from the stream leader.
func (s *Store) entries(ctx context.Context, conv string, from uint64) ([]schemas.Entry, error) {
	stored, err := s.st.Chat().LoadLeader(ctx, conv, from, 0)
	if err != nil {
		return nil, err
	}
	out := make([]schemas.Entry, 0, len(stored))
	for _, m := range stored {
		if e := m.Entry(); e.Err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// longestCommon is the largest client position at which a stored link equals the
// client's: links chain, so the histories agree up to it.
func longestCommon(stored []schemas.Entry, chain []Digest) int {
	best := 0
	for i := range stored {
		if pos, link, ok := position(&stored[i].Message); ok && pos > best && pos <= len(chain) && chain[pos-1] == link {
			best = pos
		}
	}
	return best
}

// seedOf is what a branch of parent starts with: the parent's summary (and the
// messages its context keeps ahead of it) when that summary covers only messages the
// client still has unchanged, the first pv.common of its history, and the last client
// position it covers. The summary is reused only on that digest: the client's link at
// the last position the summary covers equals the parent's. Otherwise there is no seed
// (nil, 0): the branch starts from the client's own messages.
func (s *Store) seedOf(ctx context.Context, parent string, pv parentView, chain []Digest) (*assemble.Context, int, error) {
	v, pos := pv.value, pv.covered
	if v == nil || pos == 0 || pos > pv.common {
		return nil, 0, nil
	}
	cx, err := s.c.Context(ctx, parent, pipeline.Value(v))
	if err != nil || cx.Generation != v.Generation {
		return nil, 0, err
	}
	seed := &assemble.Context{Generation: cx.Generation, HasSummary: cx.HasSummary}
	for i := range cx.Messages {
		if cx.Seqs[i] != 0 && cx.Seqs[i] >= v.TailStartSeq {
			break
		}
		seed.Messages = append(seed.Messages, cx.Messages[i].StripMetadata())
		seed.Seqs = append(seed.Seqs, cx.Seqs[i])
	}
	if len(seed.Messages) == 0 {
		return nil, 0, nil
	}
	seed.Tokens = tokens.Messages(seed.Messages)
	return seed, pos, nil
}

// seed stores the first messages of branch (seedOf) when it has none yet.
func (s *Store) seed(ctx context.Context, parent, branch string, pv parentView, chain []Digest, owner string) error {
	tp, err := s.tip(ctx, branch)
	if err != nil || !tp.empty {
		return err
	}
	seed, pos, err := s.seedOf(ctx, parent, pv, chain)
	if err != nil || seed == nil {
		return err
	}
	base, err := s.base(ctx, branch, tp)
	if err != nil {
		return err
	}
	link := chain[pos-1]
	batch := make([]pipeline.BatchMsg, len(seed.Messages))
	for i, m := range seed.Messages {
		m.Meta = withMeta(nil, pos, link, owner)
		m.Meta[MetaSeed] = parent
		batch[i] = pipeline.BatchMsg{Conv: branch, Message: m, MsgID: "proxy-seed:" + branch + ":" + strconv.FormatUint(base, 10) + ":" + strconv.Itoa(i)}
	}
	// The parent may have been forgotten since its summary was read: seed nothing then.
	if _, _, tomb, err := s.st.Results().Live(ctx, parent, true); err != nil || tomb.Covers(pv.value.FirstSeq) {
		return err
	}
	_, err = s.c.PublishBatch(ctx, batch, pipeline.BatchOptions{Window: 1})
	if errors.Is(err, pipeline.ErrDuplicate) {
		return nil // another writer seeded it meanwhile
	}
	return err
}
