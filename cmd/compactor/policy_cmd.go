package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// policyCmd reads and writes a conversation's policy in KV compaction-policy. Values are
// checked against the tiers this process sees (its environment and COMPACTOR_CONFIG), so
// run it with the same configuration as the compactor. It prints what compactor.policy
// answers (schemas.PolicyResponse).
func policyCmd(ctx context.Context, env Env, args []string, std stdio) error {
	if len(args) < 2 {
		return usagef("policy needs a verb (get, set or clear) and a conversation id")
	}
	verb, conv, pairs := args[0], args[1], args[2:]
	if err := schemas.ValidateConversationID(conv); err != nil {
		return usagef("%v", err)
	}
	set := policy.Layer{}
	switch verb {
	case "get", "clear":
		if len(pairs) > 0 {
			return usagef("policy %s takes no key=value pairs", verb)
		}
	case "set":
		if len(pairs) == 0 {
			return usagef("policy set needs key=value pairs (keys: %s)", strings.Join(policy.ConversationKeys(), ", "))
		}
		for _, kv := range pairs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usagef("%q is not key=value", kv)
			}
			set[k] = v
		}
	default:
		return usagef("unknown policy verb %q (get, set or clear)", verb)
	}
	r, err := env.resolver()
	if err != nil {
		return err
	}
	_, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := jetstream.Open(ctx, nc, env.jetstream())
	if err != nil {
		return err
	}
	var next policy.Layer
	err = st.UpdatePolicy(ctx, conv, func(data []byte) ([]byte, bool, error) {
		current := policy.Layer{}
		if data != nil && verb != "clear" {
			var err error
			if current, err = policy.DecodeConversation(data); err != nil {
				return nil, false, fmt.Errorf("the stored policy of %s is invalid (%w); use policy clear", conv, err)
			}
		}
		var err error
		if next, err = policy.Merge(current, verb == "clear", set); err != nil {
			return nil, false, err
		}
		if verb == "get" {
			return nil, false, nil
		}
		if _, err := r.Resolve(next); err != nil {
			return nil, false, err
		}
		var out []byte
		if len(next) > 0 {
			if out, err = policy.EncodeConversation(next); err != nil {
				return nil, false, err
			}
		}
		return out, true, nil
	})
	if err != nil {
		return err
	}
	s, err := r.Resolve(next)
	if err != nil {
		return err
	}
	return writeJSON(std.out, schemas.PolicyResponse{Conversation: conv, Policy: next, Settings: s.ByKey()})
}
