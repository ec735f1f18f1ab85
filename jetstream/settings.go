package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// policyMetadataPrefix starts the CHAT stream metadata keys under which the processes
// of a deployment record the policy defaults of each role they run (the environment
// tier and profiles of the conversation keys, which the trigger and the workers must
// agree on): compactor_policy.trigger, .worker, .api.
const policyMetadataPrefix = "compactor_policy."

// RolePolicies are the policy defaults recorded per role: role → key → value.
type RolePolicies map[string]map[string]string

// RecordPolicy records own, this process's policy defaults, under each of its roles in
// CHAT's metadata (the last process of a role to start wins), and returns what the roles
// had recorded before, to compare own with: a process that starts with other defaults
// than the running ones says so. A process without the right to update the stream (a
// least-privilege user) records nothing and still gets what the others recorded: the
// error then says why it recorded nothing.
func (s *Store) RecordPolicy(ctx context.Context, roles []string, own map[string]string) (before RolePolicies, err error) {
	st, err := s.js.Stream(ctx, s.cfg.ChatStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.cfg.ChatStream, err)
	}
	cfg := st.CachedInfo().Config
	before = rolePolicies(cfg.Metadata)
	data, err := json.Marshal(own)
	if err != nil {
		return before, err
	}
	meta := maps.Clone(cfg.Metadata)
	if meta == nil {
		meta = map[string]string{}
	}
	changed := false
	for _, r := range roles {
		if meta[policyMetadataPrefix+r] != string(data) {
			meta[policyMetadataPrefix+r], changed = string(data), true
		}
	}
	if !changed {
		return before, nil
	}
	cfg.Metadata = meta
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		return before, fmt.Errorf("record the policy defaults in %s's metadata: %w", s.cfg.ChatStream, err)
	}
	return before, nil
}

// rolePolicies reads the recorded policy defaults out of a stream's metadata; a value
// that does not decode is left out.
func rolePolicies(meta map[string]string) RolePolicies {
	out := RolePolicies{}
	for k, v := range meta {
		role, ok := strings.CutPrefix(k, policyMetadataPrefix)
		if !ok {
			continue
		}
		var m map[string]string
		if json.Unmarshal([]byte(v), &m) == nil {
			out[role] = m
		}
	}
	return out
}

// PolicyDisagreements lists the keys on which the recorded roles disagree, one line
// each naming every role's value ("context_window: trigger 8000, worker 128000"),
// sorted; none when they agree. A key one role records and another does not counts
// as a disagreement (the other runs the default).
func PolicyDisagreements(rp RolePolicies) []string {
	roles := slices.Sorted(maps.Keys(rp))
	keys := map[string]bool{}
	for _, m := range rp {
		for k := range m {
			keys[k] = true
		}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		var parts []string
		same := true
		for i, r := range roles {
			v, ok := rp[r][k]
			if !ok {
				v = "(not set)"
			}
			if i > 0 {
				if w, ok2 := rp[roles[0]][k]; w != v || ok2 != ok {
					same = false
				}
			}
			parts = append(parts, r+" "+v)
		}
		if !same {
			out = append(out, k+": "+strings.Join(parts, ", "))
		}
	}
	return out
}
