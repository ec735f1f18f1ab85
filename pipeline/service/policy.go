package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

const policyExample = `{"conversation":"c1","set":{"threshold":0.7,"strategy":"tool-rounds"}}`

// onPolicy reads, merges into or clears a conversation's policy.
func (s *Service) onPolicy(ctx context.Context, req micro.Request) (any, error) {
	var in schemas.PolicyRequest
	if err := decode(req.Data(), &in, false, policyExample); err != nil {
		return nil, err
	}
	if err := in.Validate(); err != nil {
		return nil, badRequest(err)
	}
	conv := in.Conversation
	set, err := policyChange(in.Set)
	if err != nil {
		return nil, err
	}
	var resp schemas.PolicyResponse
	err = s.store.Policies().Update(ctx, conv, func(data []byte) ([]byte, bool, error) {
		r, next, write, err := s.applyPolicy(conv, data, in.Clear, set)
		resp = r
		return next, write, err
	})
	switch {
	case err == nil:
		if in.Clear || len(set) > 0 {
			s.log.Info().Str("conversation", conv).Bool("cleared", in.Clear).Strs("keys", slices.Sorted(maps.Keys(set))).Msg("conversation policy changed through the service")
		}
		return resp, nil
	case errors.Is(err, jetstream.ErrRevisionMismatch):
		return nil, &apiError{code: 409, msg: "policy: " + err.Error()}
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return nil, ae
	}
	return nil, internal(conv, err)
}

// policyChange checks the keys of a policy request's set (its values are checked by
// schemas.PolicyRequest.Validate) and returns them as text.
func policyChange(in map[string]any) (policy.Layer, error) {
	set := policy.Layer{}
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field := "set." + k
		if k != policy.ProfileKey {
			key, ok := policy.Lookup(k)
			switch {
			case !ok:
				return nil, invalid(field, "unknown key; a conversation may set %s", strings.Join(policy.ConversationKeys(), ", "))
			case key.Scope != policy.Conversation:
				return nil, invalid(field, "cannot be set per conversation: endpoints, models and keys come only from the operator's profiles")
			}
		}
		switch v := in[k].(type) {
		case string:
			set[k] = v
		case json.Number:
			set[k] = v.String()
		default: // another number type (Validate refused the rest)
			set[k] = fmt.Sprint(v)
		}
	}
	return set, nil
}

// applyPolicy applies clear and set to the stored policy data and checks the result
// against the server's tiers. It returns the answer, the data to write (nil: delete)
// and whether to write at all.
func (s *Service) applyPolicy(conv string, data []byte, clear bool, set policy.Layer) (schemas.PolicyResponse, []byte, bool, error) {
	var none schemas.PolicyResponse
	current := policy.Layer{}
	if data != nil && !clear {
		var err error
		if current, err = policy.DecodeConversation(data); err != nil {
			return none, nil, false, &apiError{code: 409, msg: fmt.Sprintf("policy: the stored policy of %s is invalid (%v); send \"clear\": true (with \"set\" to replace it)", conv, err)}
		}
	}
	changed := clear || len(set) > 0
	next, err := policy.Merge(current, clear, set)
	if err != nil {
		return none, nil, false, invalid("set", "%v", err)
	}
	settings, err := s.check(next)
	if err != nil {
		if !errors.Is(err, policy.ErrPolicy) {
			return none, nil, false, err
		}
		if changed {
			return none, nil, false, invalid("set", "%v", err)
		}
		return none, nil, false, &apiError{code: 409, msg: fmt.Sprintf("policy: the stored policy of %s does not resolve (%v); change it with \"set\" or \"clear\"", conv, err)}
	}
	var out []byte
	if changed && len(next) > 0 {
		if out, err = policy.EncodeConversation(next); err != nil {
			return none, nil, false, invalid("set", "%v", err)
		}
	}
	return schemas.PolicyResponse{Conversation: conv, Policy: next, Settings: settings.ByKey()}, out, changed, nil
}
