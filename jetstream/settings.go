package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// policyKeyPrefix starts the keys of the deployment bucket under which the processes of
// a deployment record the policy defaults of each role they run (the environment tier
// and profiles of the conversation keys, which the trigger and the workers must agree
// on): policy.trigger, policy.worker, policy.api. Each role's process writes its own key
// with a plain put, so recording touches no stream's config and needs no more than the
// right to publish that one subject.
const policyKeyPrefix = "policy."

// ErrNoDeploymentBucket is matched by the errors of RecordPolicy and RolePolicies when
// the deployment bucket is not there (provisioned by an earlier version, and this
// process may not create it): nothing is recorded or compared.
var ErrNoDeploymentBucket = errors.New("the deployment bucket is not there (provision once as admin to create it)")

// policyReadTimeout bounds status's read of the records: a user without the right to read
// them gets no answer, and status does not wait long for one.
const policyReadTimeout = 2 * time.Second

// RolePolicies are the policy defaults recorded per role: role → key → value.
type RolePolicies map[string]map[string]string

func (s *Store) deploymentStream() string { return "KV_" + s.cfg.DeploymentBucket }

func (s *Store) policySubject(role string) string {
	return "$KV." + s.cfg.DeploymentBucket + "." + policyKeyPrefix + role
}

// PolicyRefresh is how often a running process records its policy defaults again
// (RecordPolicy), and PolicyStaleAfter how old a record may be before readers leave it
// out: its process stopped without withdrawing it (WithdrawPolicy), killed or cut off.
var (
	PolicyRefresh    = time.Minute
	PolicyStaleAfter = 5 * time.Minute
)

// RolePolicies reads what the roles of the deployment recorded (see RecordPolicy); a
// record that does not decode, or older than PolicyStaleAfter (its process is gone),
// is left out.
func (s *Store) RolePolicies(ctx context.Context) (RolePolicies, error) {
	subj := s.policySubject("*")
	msgs, _, err := s.directRequest(ctx, s.deploymentStream(), map[string]any{"multi_last": []string{subj}, "batch": DirectBatchSize}, subj)
	if errors.Is(err, nats.ErrNoResponders) {
		return RolePolicies{}, fmt.Errorf("policy records: %w", ErrNoDeploymentBucket)
	}
	if err != nil {
		return RolePolicies{}, fmt.Errorf("policy records: %w", err)
	}
	out := RolePolicies{}
	prefix := "$KV." + s.cfg.DeploymentBucket + "." + policyKeyPrefix
	for _, m := range msgs {
		role, ok := strings.CutPrefix(m.Subject, prefix)
		if !ok || m.Header.Get("KV-Operation") != "" || len(m.Data) == 0 || !m.Time.IsZero() && time.Since(m.Time) > PolicyStaleAfter {
			continue
		}
		var p map[string]string
		if json.Unmarshal(m.Data, &p) == nil {
			out[role] = p
		}
	}
	return out, nil
}

// RecordPolicy records own, this process's policy defaults, under each of its roles in
// the deployment bucket (the last process of a role to start wins), and returns what the
// roles had recorded before, to compare own with: a process that starts with other
// defaults than the running ones says so. A running process records again every
// PolicyRefresh, so that its record stays fresh. A process that may not write a role's key records nothing for it and
// still gets what the others recorded: the error then says why. Without the bucket it
// records and returns nothing, with an error matching ErrNoDeploymentBucket.
func (s *Store) RecordPolicy(ctx context.Context, roles []string, own map[string]string) (before RolePolicies, err error) {
	before, err = s.RolePolicies(ctx)
	if err != nil {
		return before, err
	}
	data, err := json.Marshal(own)
	if err != nil {
		return before, err
	}
	var errs []error
	for _, r := range roles {
		if _, err := s.js.Publish(ctx, s.policySubject(r), data, natsjs.WithExpectStream(s.deploymentStream())); err != nil {
			errs = append(errs, fmt.Errorf("record the policy defaults of the %s role in %s: %w", r, s.cfg.DeploymentBucket, err))
		}
	}
	return before, errors.Join(errs...)
}

// WithdrawPolicy deletes the records of roles that hold own, as a process that stops
// does: a stopped process leaves the comparison at once. A record another process
// wrote since, with other defaults, stays; one with the same defaults goes, and that
// process records it again within PolicyRefresh.
func (s *Store) WithdrawPolicy(ctx context.Context, roles []string, own map[string]string) error {
	subj := s.policySubject("*")
	msgs, _, err := s.directRequest(ctx, s.deploymentStream(), map[string]any{"multi_last": []string{subj}, "batch": DirectBatchSize}, subj)
	if err != nil {
		return fmt.Errorf("policy records: %w", err)
	}
	var errs []error
	for _, m := range msgs {
		var p map[string]string
		if m.Header.Get("KV-Operation") != "" || json.Unmarshal(m.Data, &p) != nil || !maps.Equal(p, own) {
			continue
		}
		for _, r := range roles {
			if m.Subject != s.policySubject(r) {
				continue
			}
			del := nats.NewMsg(m.Subject)
			del.Header.Set("KV-Operation", "DEL")
			// Only the record read: a newer one is another process's.
			del.Header.Set("Nats-Expected-Last-Subject-Sequence", fmt.Sprint(m.Seq))
			if _, err := s.js.PublishMsg(ctx, del, natsjs.WithExpectStream(s.deploymentStream())); err != nil {
				errs = append(errs, fmt.Errorf("withdraw the policy defaults of the %s role: %w", r, err))
			}
		}
	}
	return errors.Join(errs...)
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
