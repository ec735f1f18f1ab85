package service

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

// recallHeadroom is the part of the max payload an answer leaves for the reply's
// headers and framing; recallEnvelope, for the answer's fields beside its messages
// (counts, the scanned range, up to schemas.MaxRecallSkippedSeqs sequences).
const (
	recallHeadroom = 1024
	recallEnvelope = 2048
)

// onRecall answers a conversation's raw messages (schemas.RecallRequest): newest first
// within the budget and the connection's max payload (what is left out for the payload
// is named in skipped_seqs and cut_by_payload says so).
func (s *Service) onRecall(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.RecallRequest
	if err := decode(req.Data(), &in, false, `{"conversation":"c1","query":"error"}`); err != nil {
		return nil, err
	}
	if err := schemas.ValidateConversationID(in.Conversation); err != nil {
		return nil, badRequest(err)
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	last, err := s.store.Chat().LastSeq(ctx, in.Conversation)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if last == 0 {
		return nil, &apiError{code: 404, msg: fmt.Sprintf("conversation %s not found: nothing was published to it", in.Conversation)}
	}
	// Selected by bytes too, so no more is read than the answer can carry: a stub's
	// object is fetched only when it is returned (or, one at a time, to match a query).
	limit := int(s.nc.MaxPayload()) - recallHeadroom
	out, err := s.store.Recall(ctx, in, 0, limit-recallEnvelope)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if _, err := recall.FitBytes(out, limit); err != nil {
		return nil, internal(in.Conversation, err)
	}
	return out, nil
}
