package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Backoff is the delay between attempts: Base, doubling up to Max, each delay with
// ±25% jitter so processes started together do not retry in step. Attempt bounds one
// attempt of ProvisionRetrying (0: ProvisionAttemptTimeout).
type Backoff struct {
	Base    time.Duration
	Max     time.Duration
	Attempt time.Duration
}

// DefaultBackoff is the start-up backoff of serve: 500ms doubling to 30s.
func DefaultBackoff() Backoff { return Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second} }

// Delay is the jittered delay before retry n (1 = the first retry).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// ProvisionAttemptTimeout bounds one attempt of ProvisionRetrying: a request that gets
// no answer (a cluster still electing the new stream's leader, a request lost while a
// server starts) is asked again instead of taking the caller's whole deadline.
const ProvisionAttemptTimeout = 20 * time.Second

// ProvisionRetrying is Provision for a service: while JetStream is not ready (no
// responders, JetStream not enabled yet, no meta leader, too few peers for the replicas,
// timeouts), it logs the error and tries again after b's delay, until it succeeds, ctx
// is done or the error is permanent. Each attempt is bounded by b.Attempt;
// asking again is safe, as creating what exists with the same settings changes nothing. Permanent errors are returned at once: an invalid
// config (ErrConfig), a conflict with existing settings (ErrConflict), a closed
// connection, and requests JetStream refuses for what they ask. Differences applied
// with cfg.UpdateExisting are logged, one line each.
func ProvisionRetrying(ctx context.Context, nc *nats.Conn, cfg Config, b Backoff, log zerolog.Logger) (*Store, error) {
	for attempt := 1; ; attempt++ {
		bound := b.Attempt
		if bound <= 0 {
			bound = ProvisionAttemptTimeout
		}
		actx, cancel := context.WithTimeout(ctx, bound)
		st, applied, err := provision(actx, nc, cfg)
		cancel()
		if err == nil {
			for _, d := range applied {
				log.Warn().Str(d.Kind, d.Name).Str("setting", d.Setting).Str("was", d.Existing).Str("now", d.Wanted).
					Msg("changed an existing setting (update of existing streams requested)")
			}
			for _, d := range st.PendingUpgrades() {
				log.Warn().Str(d.Kind, d.Name).Str("setting", d.Setting).Str("is", d.Existing).Str("upgrade_to", d.Wanted).
					Msg("upgrade step pending: the objects bucket allows roll-ups, so any user that may store objects can erase it; " +
						"once every client is of this version, apply it with compactor provision --update-streams as admin")
			}
			for _, b := range st.MissingBuckets() {
				log.Warn().Str("bucket", b).Msg("optional bucket missing and this user may not create it: what it holds " +
					"(learned summarizer windows, or the roles' policy records) is off until an admin provisions")
			}
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("provision stopped: %w (last error: %v)", ctx.Err(), err)
		}
		if !transient(err) {
			return nil, err
		}
		wait := b.Delay(attempt)
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg("jetstream not ready; retrying provisioning")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("provision stopped: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// Retry calls fn until it succeeds, ctx is done, or it fails with an error that is not
// transient (as in ProvisionRetrying): a component that binds its consumers while its
// cluster is still electing their leaders, or while its server restarts, waits for them
// instead of failing its process. Each failure is logged once, as "<what>; retrying".
// The last error is returned when ctx is done.
func Retry[T any](ctx context.Context, b Backoff, log zerolog.Logger, what string, fn func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := fn()
		if err == nil || ctx.Err() != nil || !transient(err) {
			return v, err
		}
		wait := b.Delay(attempt)
		log.Warn().Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg(what + "; retrying")
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(wait):
		}
	}
}

// transientCodes are JetStream API errors that go away when the cluster is ready.
var transientCodes = map[natsjs.ErrorCode]bool{
	10005:                               true, // no suitable peers for placement (peers still joining)
	10008:                               true, // JetStream system temporarily unavailable
	10009:                               true, // JetStream cluster can not handle request (no leader yet)
	10023:                               true, // insufficient resources (peers still joining)
	natsjs.JSErrCodeJetStreamNotEnabled: true,
	natsjs.JSErrCodeJetStreamNotEnabledForAccount: true,
}

// transient reports whether err, from Provision, may go away by itself: JetStream not
// (yet) answering or not ready. Config errors, conflicts, a closed connection and
// requests JetStream refuses for their content are not.
func transient(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, ErrConfig),
		errors.Is(err, ErrConflict),
		errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrConnectionClosed):
		return false
	}
	var jsErr natsjs.JetStreamError
	if errors.As(err, &jsErr) && jsErr.APIError() != nil {
		api := jsErr.APIError()
		return api.Code == 503 || transientCodes[api.ErrorCode]
	}
	// Not an answer of the JetStream API: a timeout, no responders, a connection that is
	// not (yet) up.
	return true
}
