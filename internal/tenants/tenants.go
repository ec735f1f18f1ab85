// Package tenants reads the tenants file: which tenants a Compactor deployment serves,
// and each one's settings (policy defaults, profiles with their summarizer endpoints,
// models and key variables, quotas). docs/tenants.md describes the file.
package tenants

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas/policy"
)

// ErrFile is matched by every error of a tenants file that cannot be used.
var ErrFile = errors.New("tenants file")

// MaxFileSize bounds the tenants file read: it is configuration, not data.
const MaxFileSize = 1 << 20

// MaxTenants bounds the tenants of one deployment: each has streams, buckets, consumers
// and metrics series of its own.
const MaxTenants = 1000

// File is the tenants file.
type File struct {
	// Tenants maps a tenant's name (its NATS account's name, jetstream.ValidateTenant)
	// to its settings.
	Tenants map[string]Tenant `json:"tenants"`
}

// Tenant is one tenant's settings. Everything in it is the operator's.
type Tenant struct {
	// Policy is the tenant's tier of settings, over the deployment's environment: any
	// key (budget_tokens, llm_base_url, llm_model, llm_api_key_env, ...).
	Policy map[string]any `json:"policy,omitempty"`
	// DefaultProfile applies to the tenant's conversations whose policy names none.
	DefaultProfile string `json:"default_profile,omitempty"`
	// Profiles are the tenant's own profiles: its conversations can name only these.
	Profiles map[string]map[string]any `json:"profiles,omitempty"`
	// Quotas bound what the tenant may use (zero: no bound).
	Quotas Quotas `json:"quotas"`
	// ViewTokenEnv names the variable holding the tenant's own credential for the web
	// view, which then shows the tenant's conversations, and only those, to whoever
	// holds it ("": the tenant has no view of its own; the operator's token sees every
	// tenant). The token itself never goes in the file.
	ViewTokenEnv string `json:"view_token_env,omitempty"`
}

// Quotas bound one tenant. A zero field is no bound.
type Quotas struct {
	// Conversations bounds the conversations the tenant holds at once (CHAT's subjects).
	Conversations int64 `json:"conversations,omitempty"`
	// StoredBytes bounds the bytes the tenant's conversations store: the max_bytes of
	// its CHAT stream and of its objects bucket (the messages over the max payload),
	// each refusing a publish or an object over it. The server bounds each stream on
	// its own, so together they hold at most twice it; the gauge shows their sum.
	StoredBytes int64 `json:"stored_bytes,omitempty"`
	// SummarizerTokensPerDay bounds the LLM tokens (prompt and completion) the tenant's
	// compactions may use in a UTC day.
	SummarizerTokensPerDay int64 `json:"summarizer_tokens_per_day,omitempty"`
}

// Read reads and checks the tenants file at path.
func Read(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFile, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrFile, path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w %s: over %d bytes", ErrFile, path, MaxFileSize)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse reads a tenants file: JSON, unknown fields refused, every tenant's name checked.
// Settings are checked against a deployment's tiers by Check.
func Parse(data []byte) (*File, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFile, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON value", ErrFile)
	}
	if len(f.Tenants) > MaxTenants {
		return nil, fmt.Errorf("%w: %d tenants, over %d", ErrFile, len(f.Tenants), MaxTenants)
	}
	for name, t := range f.Tenants {
		if err := jetstream.ValidateTenant(name); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrFile, err)
		}
		q := t.Quotas
		if q.Conversations < 0 || q.StoredBytes < 0 || q.SummarizerTokensPerDay < 0 {
			return nil, fmt.Errorf("%w: tenant %q: a quota must not be negative", ErrFile, name)
		}
		if t.DefaultProfile != "" {
			if _, ok := t.Profiles[t.DefaultProfile]; !ok {
				return nil, fmt.Errorf("%w: tenant %q: default_profile %q is not one of its profiles", ErrFile, name, t.DefaultProfile)
			}
		}
	}
	return &f, nil
}

// Names returns the tenants' names, sorted.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.Tenants))
	for n := range f.Tenants {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Resolver returns tenant name's resolver over the deployment's (r): its policy over the
// environment, its profiles only (policy.Resolver.ForTenant).
func (t Tenant) Resolver(name string, r *policy.Resolver) (*policy.Resolver, error) {
	return r.ForTenant(name, t.Policy, t.ProfileFile())
}

// ProfileFile is the tenant's profiles as a profiles file (nil: none).
func (t Tenant) ProfileFile() *policy.File {
	if len(t.Profiles) == 0 && t.DefaultProfile == "" {
		return nil
	}
	return &policy.File{DefaultProfile: t.DefaultProfile, Profiles: t.Profiles}
}

// Check resolves every tenant's settings against the deployment's resolver r, so a
// tenants file with an unusable tenant is refused whole when it is first read.
func (f *File) Check(r *policy.Resolver) error {
	for _, name := range f.Names() {
		if _, err := f.Tenants[name].Resolver(name, r); err != nil {
			return fmt.Errorf("%w: %w", ErrFile, err)
		}
	}
	return nil
}

// Fingerprint identifies a tenant's settings: two equal fingerprints are the same
// settings (a serving process restarts a tenant's roles when it changes).
func (t Tenant) Fingerprint() string {
	b, err := json.Marshal(t) // maps marshal with sorted keys
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// JetStream is tenant name's streams' configuration in a deployment whose own is base:
// base's settings, the tenant's names (jetstream.Config.ForTenant), and its quota of
// stored bytes as the bound of CHAT and of the objects bucket.
func (t Tenant) JetStream(base jetstream.Config, name string) (jetstream.Config, error) {
	c, err := base.ForTenant(name)
	if err != nil {
		return jetstream.Config{}, err
	}
	c.ChatMaxBytes, c.ObjectsMaxBytes = t.Quotas.StoredBytes, t.Quotas.StoredBytes
	return c, nil
}
