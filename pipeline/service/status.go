package service

import (
	"context"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/schemas"
)

// onStatus answers one conversation's state, or without one the pipeline's streams and
// consumers.
func (s *Service) onStatus(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.ConversationRequest
	if err := decode(req.Data(), &in, true, `{"conversation":"c1"} or {}`); err != nil {
		return nil, err
	}
	if in.Conversation == "" {
		st := s.store.Status(ctx)
		if s.cfg.Tenant != "" {
			// A tenant reads its streams and consumers; the deployment's endpoints and
			// models (learned windows), its processes (trigger members) and its roles'
			// settings are the operator's.
			st.TriggerMembers, st.TriggerMembersError = nil, ""
			st.LearnedWindows, st.LearnedWindowsError = nil, ""
			st.PolicyDisagreements, st.PolicyRecordsError = nil, ""
		}
		return st, nil
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	v, _, last, err := s.valueAndLast(ctx, in.Conversation)
	if err != nil {
		return nil, err
	}
	out := schemas.ConversationStatus{Conversation: in.Conversation, Value: v, LastSeq: last}
	p, err := s.store.Queue().Pending(ctx, in.Conversation)
	if err != nil {
		return nil, internal(in.Conversation, err)
	}
	if p != nil {
		out.Pending, out.PendingRequestID = true, p.RequestID
	}
	return out, nil
}
