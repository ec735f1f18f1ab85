package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas/policy"
)

// PolicyDefaults are the policy settings the processes of a deployment must agree on,
// by key: those of scope Conversation (context window, threshold, tokenizer, ...) that
// a conversation without a policy gets, which the trigger counts against and the
// workers compact to, and for each profile "profile <name>.<key>" where it differs from
// them. The operator keys (the summarizer's endpoint and model) are a worker's own.
func PolicyDefaults(r *policy.Resolver) map[string]string {
	out := map[string]string{}
	base, err := r.Resolve(nil)
	if err != nil {
		out["defaults"] = "invalid: " + err.Error()
		return out
	}
	conv := policy.ConversationKeys()
	bk := base.ByKey()
	for _, k := range conv {
		out[k] = fmt.Sprint(bk[k])
	}
	for _, p := range r.Profiles() {
		s, err := r.Resolve(policy.Layer{policy.ProfileKey: p})
		if err != nil {
			out["profile "+p] = "invalid: " + err.Error()
			continue
		}
		pk := s.ByKey()
		for _, k := range conv {
			if v := fmt.Sprint(pk[k]); v != out[k] && k != policy.ProfileKey {
				out["profile "+p+"."+k] = v
			}
		}
	}
	return out
}

// CheckPolicy compares this process's policy defaults with those the roles of the
// deployment recorded in the deployment bucket (see jetstream.Store.RecordPolicy),
// records its own under its roles, and logs a warning for each key on which they
// differ: a worker at a 128,000-token window beside a trigger at 8,000 would otherwise
// leave conversations over the agent's window without a word. `compactor status` lists
// what the roles recorded differently. It returns the differences it logged. A process
// with a fixed policy source (no resolver) has nothing to compare, nor has one whose
// deployment has no such bucket yet (provisioned by an earlier version).
func CheckPolicy(ctx context.Context, cfg Config, st *jetstream.Store) []string {
	if cfg.Resolver == nil {
		return nil
	}
	log := cfg.Logger
	own := PolicyDefaults(cfg.Resolver)
	before, err := st.RecordPolicy(ctx, cfg.Roles.names(), own)
	switch {
	case errors.Is(err, jetstream.ErrNoDeploymentBucket):
		log.Info().Err(err).Msg("the policy defaults of this process's roles are neither recorded nor compared with the other processes'")
		return nil
	case err != nil:
		log.Warn().Err(err).Msg("the policy defaults of this process's roles are not recorded; processes that start later cannot compare theirs with them")
	}
	before["this process"] = own
	diffs := jetstream.PolicyDisagreements(before)
	for _, d := range diffs {
		log.Warn().Str("differs", d).Msg("this process's policy defaults differ from those another running process of the deployment recorded: " +
			"the trigger counts against its settings and the workers compact to theirs, so set the same COMPACTOR_ policy variables and profiles on every process")
	}
	if len(diffs) == 0 {
		log.Debug().Msg("this process's policy defaults are recorded and agree with the other running processes'")
	}
	return diffs
}

// AnnouncePolicy checks and records this process's policy defaults (CheckPolicy), then
// records them again every jetstream.PolicyRefresh until ctx is done, and withdraws
// them then: a process that stops leaves the comparison at once, and one that is killed
// when its record grows stale (jetstream.PolicyStaleAfter).
func AnnouncePolicy(ctx context.Context, cfg Config, st *jetstream.Store) {
	if cfg.Resolver == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	CheckPolicy(cctx, cfg, st)
	cancel()
	own, roles := PolicyDefaults(cfg.Resolver), cfg.Roles.names()
	tick := time.NewTicker(jetstream.PolicyRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := st.WithdrawPolicy(wctx, roles, own); err != nil && !errors.Is(err, jetstream.ErrNoDeploymentBucket) {
				cfg.Logger.Debug().Err(err).Msg("the policy defaults of this process's roles were not withdrawn; they drop out when stale")
			}
			return
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := st.RecordPolicy(rctx, roles, own); err != nil && ctx.Err() == nil {
				cfg.Logger.Debug().Err(err).Msg("the policy defaults of this process's roles were not recorded again")
			}
			cancel()
		}
	}
}

// names lists the roles, sorted.
func (r Roles) names() []string {
	var out []string
	for name, on := range map[string]bool{"trigger": r.Trigger, "worker": r.Worker, "api": r.API} {
		if on {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
