package main

import (
	"context"
	"strings"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// policyCmd reads and writes a conversation's policy through the compactor service
// (compactor.policy): the service checks a change against its own tiers (environment
// and profiles), the ones that will apply it, so the CLI's own configuration does not
// matter. It prints the service's answer (schemas.PolicyResponse).
func policyCmd(ctx context.Context, env Env, args []string, std stdio) error {
	if len(args) < 2 {
		return usagef("policy needs a verb (get, set or clear) and a conversation id")
	}
	verb, conv, pairs := args[0], args[1], args[2:]
	if err := schemas.ValidateConversationID(conv); err != nil {
		return usagef("%v", err)
	}
	req := schemas.PolicyRequest{Conversation: conv}
	switch verb {
	case "get":
		if len(pairs) > 0 {
			return usagef("policy %s takes no key=value pairs", verb)
		}
	case "clear":
		if len(pairs) > 0 {
			return usagef("policy %s takes no key=value pairs", verb)
		}
		req.Clear = true
	case "set":
		if len(pairs) == 0 {
			return usagef("policy set needs key=value pairs (keys: %s)", strings.Join(policy.ConversationKeys(), ", "))
		}
		req.Set = map[string]any{}
		for _, kv := range pairs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usagef("%q is not key=value", kv)
			}
			req.Set[k] = v
		}
	default:
		return usagef("unknown policy verb %q (get, set or clear)", verb)
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	resp, err := c.Policy(ctx, req)
	if err != nil {
		return err
	}
	return writeJSON(std.out, resp)
}
