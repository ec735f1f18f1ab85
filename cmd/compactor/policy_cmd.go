package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// policyCommand reads and writes a conversation's policy through the compactor service
// (compactor.policy): the service checks a change against its own tiers (environment
// and profiles), the ones that will apply it, so the CLI's own configuration does not
// matter. It prints the service's answer (schemas.PolicyResponse).
var policyCommand = &command{
	name: "policy", args: "get|set|clear <conv> [key=value...]", conn: fullConn, interruptible: true,
	summary: "show, change or clear a conversation's policy (through the compactor service)",
	about: `  get <conv>                the conversation's policy and the settings it resolves to
  set <conv> key=value...   set safe keys of its policy (an empty value removes a key);
                            profile=<name> picks a profile of the server's COMPACTOR_CONFIG
  clear <conv>              remove its policy

The service checks every change against its own environment and profiles: what this
prints is what the running compactor applies. Keys: ` + strings.Join(policy.ConversationKeys(), ", ") + `.`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		asJSON := fs.JSON()
		return func(ctx context.Context, c *call) error {
			if len(c.args) < 2 {
				return usagef("policy needs a verb (get, set or clear) and a conversation id")
			}
			verb, conv, pairs := c.args[0], c.args[1], c.args[2:]
			req := schemas.PolicyRequest{Conversation: conv}
			switch verb {
			case "get", "clear":
				if len(pairs) > 0 {
					return usagef("policy %s takes no key=value pairs", verb)
				}
				req.Clear = verb == "clear"
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
			if err := schemas.ValidateConversationID(conv); err != nil {
				return usagef("%v", err)
			}
			cl, nc, err := c.connect(ctx)
			if err != nil {
				return err
			}
			defer nc.Close()
			resp, err := cl.Policy(ctx, req)
			if err != nil {
				return serviceError(err)
			}
			if *asJSON {
				return writeJSON(c.std.out, resp)
			}
			tw := tabwriter.NewWriter(c.std.out, 2, 0, 3, ' ', 0)
			if len(resp.Policy) == 0 {
				fmt.Fprintf(tw, "%s has no policy of its own: the server's defaults and default profile apply\n", conv)
			} else {
				fmt.Fprintf(tw, "policy of %s:\n", conv)
				for _, k := range sortedKeys(resp.Policy) {
					fmt.Fprintf(tw, "  %s\t%s\n", k, resp.Policy[k])
				}
			}
			fmt.Fprintf(tw, "\nsettings it resolves to:\n")
			for _, k := range sortedKeys(resp.Settings) {
				fmt.Fprintf(tw, "  %s\t%v\n", k, resp.Settings[k])
			}
			return tw.Flush()
		}
	},
}
