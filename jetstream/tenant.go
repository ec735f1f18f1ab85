package jetstream

import (
	"errors"
	"fmt"
)

// A tenant is one team served by a shared Compactor: a NATS account of its own, whose
// conversations Compactor keeps in streams and buckets of their own (docs/tenants.md).
// Its names are the deployment's names with the tenant added (TenantNames), so every
// component works inside one tenant unchanged, and nothing of one tenant's is in a
// stream, bucket or subject of another's.

// MaxTenantLength bounds a tenant's name: it is a token of subjects and part of stream
// and bucket names.
const MaxTenantLength = 32

// ErrTenant is matched by the errors of ValidateTenant.
var ErrTenant = errors.New("invalid tenant name")

// ValidateTenant checks the tenant name rule: 1 to 32 lower-case ASCII letters, digits
// and dashes, starting with a letter or digit. The rule keeps a tenant's name one
// subject token, a valid part of stream and bucket names, and free of the underscore
// that joins it to them (TenantNames), so no two tenants' names can meet.
func ValidateTenant(t string) error {
	if t == "" || len(t) > MaxTenantLength {
		return fmt.Errorf("%w %q: 1 to %d characters", ErrTenant, t, MaxTenantLength)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return fmt.Errorf("%w %q: only a-z, 0-9 and '-' (not first)", ErrTenant, t)
		}
	}
	return nil
}

// TenantNames returns tenant t's names in a deployment whose names are base: each
// stream and bucket name with "_<t>" appended, and each subject prefix with the token
// "<t>" appended, so t's messages are on chat.<t>.<conv>.msg in stream CHAT_<t>.
// Consumer names and the trigger's priority group are per stream and stay as they are.
// A tenant's subjects have one token more than the deployment's own (chat.<conv>.msg),
// so the two layouts never match each other's subjects.
func TenantNames(base Names, t string) (Names, error) {
	if err := ValidateTenant(t); err != nil {
		return Names{}, err
	}
	stream := func(s string) string { return s + "_" + t }
	prefix := func(s string) string { return s + "." + t }
	n := base
	n.ChatStream, n.ChatPrefix = stream(base.ChatStream), prefix(base.ChatPrefix)
	n.RequestsStream, n.RequestPrefix = stream(base.RequestsStream), prefix(base.RequestPrefix)
	n.EventsStream, n.EventPrefix = stream(base.EventsStream), prefix(base.EventPrefix)
	n.DeadStream, n.DeadPrefix = stream(base.DeadStream), prefix(base.DeadPrefix)
	n.ActivityStream, n.ActivityPrefix = stream(base.ActivityStream), prefix(base.ActivityPrefix)
	n.ResultsBucket, n.PolicyBucket = stream(base.ResultsBucket), stream(base.PolicyBucket)
	n.ObjectsBucket, n.ForgetBucket = stream(base.ObjectsBucket), stream(base.ForgetBucket)
	n.TriggersBucket, n.WindowsBucket = stream(base.TriggersBucket), stream(base.WindowsBucket)
	n.DeploymentBucket = stream(base.DeploymentBucket)
	if base.LedgerStream != "" {
		n.LedgerStream, n.LedgerPrefix = stream(base.LedgerStream), prefix(base.LedgerPrefix)
	}
	return n, nil
}

// ForTenant returns c for tenant t: its names are TenantNames of c's, and Tenant is t.
// A store opened with it holds only t's conversations. c must be a deployment's config,
// not already a tenant's.
func (c Config) ForTenant(t string) (Config, error) {
	if c.Tenant != "" {
		return Config{}, fmt.Errorf("%w: already the config of tenant %q", ErrConfig, c.Tenant)
	}
	n, err := TenantNames(c.Names, t)
	if err != nil {
		return Config{}, err
	}
	c.Names, c.Tenant = n, t
	return c, nil
}
