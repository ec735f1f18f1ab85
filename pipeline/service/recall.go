package service

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

// recallHeadroom is the part of the max payload an answer leaves for the reply's
// headers and framing.
const recallHeadroom = 1024

// onRecall answers a conversation's raw messages (schemas.RecallRequest): newest first
// within the budget, cut further, oldest units first, to stay under the connection's
// max payload (the answer says so).
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
	out, err := s.store.Recall(ctx, in, 0)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if _, err := recall.FitBytes(out, int(s.nc.MaxPayload())-recallHeadroom); err != nil {
		return nil, internal(in.Conversation, err)
	}
	return out, nil
}
