package main

import (
	"context"
	"strings"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// policyCmd reads and writes a conversation's policy in KV compaction-policy. Values are
// checked against the tiers this process sees (its environment and COMPACTOR_CONFIG), so
// run it with the same configuration as the compactor.
func policyCmd(ctx context.Context, env Env, args []string, std stdio) error {
	if len(args) < 2 {
		return usagef("policy needs a verb (get, set or clear) and a conversation id")
	}
	verb, conv, pairs := args[0], args[1], args[2:]
	if err := schemas.ValidateConversationID(conv); err != nil {
		return usagef("%v", err)
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
	current := policy.Layer{}
	if data, _, err := st.GetPolicy(ctx, conv); err != nil {
		return err
	} else if data != nil {
		if current, err = policy.DecodeConversation(data); err != nil {
			return err
		}
	}
	switch verb {
	case "get":
		if len(pairs) > 0 {
			return usagef("policy get takes no key=value pairs")
		}
	case "clear":
		if len(pairs) > 0 {
			return usagef("policy clear takes no key=value pairs")
		}
		if err := st.PutPolicy(ctx, conv, nil); err != nil {
			return err
		}
		current = policy.Layer{}
	case "set":
		if len(pairs) == 0 {
			return usagef("policy set needs key=value pairs (keys: %s)", strings.Join(safeKeys(), ", "))
		}
		for _, kv := range pairs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usagef("%q is not key=value", kv)
			}
			if v == "" {
				delete(current, k)
			} else {
				current[k] = v
			}
		}
		if err := policy.CheckConversation(current); err != nil {
			return err
		}
		if _, err := r.Resolve(current); err != nil {
			return err
		}
		data, err := policy.EncodeConversation(current)
		if err != nil {
			return err
		}
		if err := st.PutPolicy(ctx, conv, data); err != nil {
			return err
		}
	default:
		return usagef("unknown policy verb %q (get, set or clear)", verb)
	}
	s, err := r.Resolve(current)
	if err != nil {
		return err
	}
	return writeJSON(std.out, map[string]any{"conversation": conv, "policy": current, "settings": redacted(s)})
}

// safeKeys are the keys a conversation may set.
func safeKeys() []string {
	keys := []string{policy.ProfileKey}
	for _, k := range policy.Keys {
		if k.Scope == policy.Conversation {
			keys = append(keys, k.Name)
		}
	}
	return keys
}

// redacted shows settings without anything secret (the key itself is never in
// Settings; the endpoint may carry credentials in its URL).
func redacted(s policy.Settings) policy.Settings {
	if s.LLMBaseURL != "" {
		s.LLMBaseURL = redactURL(s.LLMBaseURL)
	}
	return s
}
