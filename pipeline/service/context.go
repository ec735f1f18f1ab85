package service

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
)

// onContext answers where a conversation's context starts.
func (s *Service) onContext(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ConversationRequest
	if err := decode(req.Data(), &in, false, `{"conversation":"c1"}`); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	v, last, err := s.valueAndLast(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	out := schemas.ContextResponse{Conversation: in.Conversation, Value: v, TailStartSeq: 1, LastSeq: last}
	if v != nil && v.TailStartSeq > 0 {
		out.TailStartSeq = v.TailStartSeq
	}
	return out, nil
}

// valueAndLast reads the KV value (from the leader) and the newest CHAT sequence.
func (s *Service) valueAndLast(ctx context.Context, conv string) (*schemas.Result, uint64, error) {
	v, _, err := s.store.GetResult(ctx, conv, true)
	if err != nil {
		return nil, 0, internal(conv, err)
	}
	last, err := s.store.LastSeq(ctx, conv)
	if err != nil {
		return nil, 0, internal(conv, err)
	}
	return v, last, nil
}
