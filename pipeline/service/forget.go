package service

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
)

// forgetTimeout bounds one forget: a purge per stream, the erasure of the conversation's
// messages (EraseBudget) and a read of its objects through its messages' stubs.
const forgetTimeout = time.Minute

// onForget deletes a conversation everywhere, for good (jetstream.Store.Forget): its
// messages, value and history, policy, pending request, idle timer, dead letters,
// events and objects. A conversation with nothing stored is no error.
func (s *Service) onForget(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ForgetRequest
	if err := decode(req.Data(), &in, false, `{"conversation":"c1"}`); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgetTimeout)
	defer cancel()
	out, err := s.forget(ctx, in.Conversation)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	d := out.Deleted
	s.log.Info().Str("conversation", in.Conversation).Uint64("through_seq", out.ThroughSeq).
		Uint64("chat_messages", d.ChatMessages).Uint64("result_revisions", d.ResultRevisions).Uint64("objects", d.Objects).
		Msg("conversation forgotten through the service")
	return out, nil
}
