package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/schemas/budget"
)

// ErrPolicy is matched by every policy error.
var ErrPolicy = errors.New("invalid policy")

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, args...))
}

// Layer is one tier's values: key → value as it would be written in the environment.
type Layer map[string]string

// conversationTier names a conversation's own policy in errors; only it may set PinsKey.
const conversationTier = "conversation policy"

// ProfileKey is the conversation-policy key that chooses a profile.
const ProfileKey = "profile"

// Tokenizers lists the values of the tokenizer key.
var Tokenizers = []string{"chars4", "cl100k_base", "o200k_base"}

// MaxTokensFields lists the values of the llm_max_tokens_field key: the request field
// that carries the summary's token cap.
var MaxTokensFields = []string{"max_tokens", "max_completion_tokens"}

// RequestShapes lists the values of the llm_request_shape key: how a summarization
// request is laid out.
var RequestShapes = []string{"prefix", "transcript"}

// The values of the rungs key: what a compaction does.
const (
	// RungsSummary summarizes the messages the split strategy covers (the default).
	RungsSummary = "summary"
	// RungsMask masks the tool outputs the split strategy would summarize: each is
	// replaced by a placeholder that says how to recall it, with no LLM call. It
	// summarizes only when the context is still past the hard limit after masking.
	RungsMask = "mask"
	// RungsMaskThenSummary masks first, and summarizes only when masking cannot bring
	// the context to the target.
	RungsMaskThenSummary = "mask-then-summary"
)

// Rungs lists the values of the rungs key.
var Rungs = []string{RungsSummary, RungsMask, RungsMaskThenSummary}

// Validate checks every value's range.
func (s Settings) Validate() error {
	if err := s.Budget().Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrPolicy, err)
	}
	checks := []struct {
		ok  bool
		key string
		msg string
	}{
		{s.SoftThreshold == 0 || (s.SoftThreshold > s.Target && s.SoftThreshold < s.Threshold), "soft_threshold", "must be 0 (off) or between target and threshold"},
		{s.TokenLimit >= 0, "token_limit", "must not be negative"},
		{s.TokenLimit == 0 || s.TokenLimit > s.Budget().TargetTokens(), "token_limit", "must be above the target (target × context_window), or compactions could not get under it"},
		{s.MaxRounds >= 0, "max_rounds", "must not be negative"},
		{s.ToolOutputTriggerTokens >= 0, "tool_output_trigger_tokens", "must not be negative"},
		{s.IdleAfter == 0 || s.IdleAfter >= time.Second, "idle_after", "must be 0s (off) or at least 1s"},
		{s.IdleThreshold > 0 && s.IdleThreshold < 1, "idle_threshold", "must be between 0 and 1"},
		{s.Strategy != "", "strategy", "must not be empty"},
		{contains(Rungs, s.Rungs), "rungs", "must be one of " + strings.Join(Rungs, ", ")},
		{s.KeepLastN >= 1, "keep_last_n", "must be at least 1"},
		{s.ToolRounds >= 1, "tool_rounds", "must be at least 1"},
		{s.UserMessageTokens >= 0, "user_message_tokens", "must not be negative"},
		{s.TokenFraction > 0 && s.TokenFraction < 1, "token_fraction", "must be between 0 and 1"},
		{s.RecentTurns >= 1, "recent_turns", "must be at least 1"},
		{s.MinProgress >= 0 && s.MinProgress < 1, "min_progress", "must be in [0, 1)"},
		{s.ToolOutputCap >= 0, "tool_output_cap", "must not be negative"},
		{s.ToolOutputBudget >= 0, "tool_output_budget", "must not be negative"},
		{s.SummaryRole == "user" || s.SummaryRole == "system" || s.SummaryRole == "assistant", "summary_role", "must be user, system or assistant"},
		{contains(Tokenizers, s.Tokenizer), "tokenizer", "must be one of " + strings.Join(Tokenizers, ", ")},
		{s.SummarizerContextWindow >= 1000, "summarizer_context_window", "must be at least 1000 tokens"},
		{s.LLMModel != "", "llm_model", "must not be empty"},
		{contains(MaxTokensFields, s.LLMMaxTokensField), "llm_max_tokens_field", "must be one of " + strings.Join(MaxTokensFields, ", ")},
		{contains(RequestShapes, s.LLMRequestShape), "llm_request_shape", "must be one of " + strings.Join(RequestShapes, ", ")},
		{s.LLMTimeout > 0, "llm_timeout", "must be positive"},
	}
	for _, c := range checks {
		if !c.ok {
			return bad("%s %s", c.key, c.msg)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Budget returns the settings' budget.
func (s Settings) Budget() budget.Budget {
	return budget.Budget{ContextWindow: s.ContextWindow, Threshold: s.Threshold, Target: s.Target,
		HardLimit: s.HardLimit, MaxSummaryTokens: s.MaxSummaryTokens, Evidence: s.EvidenceBudget, SummarizerContextWindow: s.SummarizerContextWindow}
}

// apply sets every key of l, in Keys order (so errors are stable).
func (s *Settings) apply(l Layer, tier string) error {
	for _, k := range Keys {
		v, ok := l[k.Name]
		if !ok {
			continue
		}
		if k.Name == PinsKey && tier != conversationTier {
			return bad("%s: %s names messages of one conversation: set it in that conversation's policy only", tier, PinsKey)
		}
		if err := s.set(k, v); err != nil {
			return bad("%s: %v", tier, err)
		}
	}
	for name := range l {
		if _, ok := Lookup(name); !ok && name != ProfileKey {
			return bad("%s: unknown key %q", tier, name)
		}
	}
	return nil
}

// Defaults returns the built-in defaults.
func Defaults() Settings {
	var s Settings
	for _, k := range Keys {
		if err := s.set(k, k.Default); err != nil && k.Default != "" {
			panic(err) // a broken default is a bug caught by the tests
		}
	}
	return s
}

// Resolver resolves conversations' settings from the lower tiers it was built with.
type Resolver struct {
	env            Layer
	profiles       map[string]Layer
	defaultProfile string
	check          func(Settings) error
	base           Settings
}

// File is the operator's config file: named profiles of settings (any key, endpoints
// and models included; keys only by the name of the variable holding them).
type File struct {
	// DefaultProfile applies to conversations whose policy names none.
	DefaultProfile string `json:"default_profile,omitempty"`
	// Profiles maps a name to key → value.
	Profiles map[string]map[string]any `json:"profiles"`
}

// ParseFile reads a JSON config file.
func ParseFile(data []byte) (*File, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, bad("config file: %v", err)
	}
	if f.DefaultProfile != "" {
		if _, ok := f.Profiles[f.DefaultProfile]; !ok {
			return nil, bad("config file: default_profile %q is not a profile", f.DefaultProfile)
		}
	}
	return &f, nil
}

// NewResolver checks the environment tier and every profile; check (optional) adds
// checks the caller knows, such as the strategy names. Errors name the tier and key.
func NewResolver(env Layer, f *File, check func(Settings) error) (*Resolver, error) {
	r := &Resolver{env: env, profiles: map[string]Layer{}, check: check}
	base := Defaults()
	if err := base.apply(env, "environment"); err != nil {
		return nil, err
	}
	if err := r.validate(base, "environment"); err != nil {
		return nil, err
	}
	r.base = base
	if f != nil {
		r.defaultProfile = f.DefaultProfile
		for name, values := range f.Profiles {
			l := Layer{}
			for k, v := range values {
				s, err := text(v)
				if err != nil {
					return nil, bad("profile %q: %s: %v", name, k, err)
				}
				l[k] = s
			}
			if _, ok := l[ProfileKey]; ok {
				return nil, bad("profile %q: a profile cannot name another profile", name)
			}
			r.profiles[name] = l
			if _, err := r.resolve(name, nil); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

func (r *Resolver) validate(s Settings, tier string) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%s: %w", tier, err)
	}
	if r.check != nil {
		if err := r.check(s); err != nil {
			return bad("%s: %v", tier, err)
		}
	}
	return nil
}

// Base returns the settings of a conversation without a policy and without a profile
// (defaults and environment).
func (r *Resolver) Base() Settings { return r.base }

// Profiles returns the profile names, sorted.
func (r *Resolver) Profiles() []string {
	names := make([]string, 0, len(r.profiles))
	for n := range r.profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Resolve returns the settings of a conversation whose policy is conv (nil: none).
func (r *Resolver) Resolve(conv Layer) (Settings, error) {
	profile := r.defaultProfile
	if p, ok := conv[ProfileKey]; ok && p != "" {
		profile = p
	}
	return r.resolve(profile, conv)
}

func (r *Resolver) resolve(profile string, conv Layer) (Settings, error) {
	s := r.base
	if profile != "" {
		l, ok := r.profiles[profile]
		if !ok {
			return Settings{}, bad("profile %q does not exist (profiles: %s)", profile, strings.Join(r.Profiles(), ", "))
		}
		if err := s.apply(l, fmt.Sprintf("profile %q", profile)); err != nil {
			return Settings{}, err
		}
		s.Profile = profile
	}
	if conv != nil {
		if err := CheckConversation(conv); err != nil {
			return Settings{}, err
		}
		rest := Layer{}
		for k, v := range conv {
			if k != ProfileKey {
				rest[k] = v
			}
		}
		if err := s.apply(rest, conversationTier); err != nil {
			return Settings{}, err
		}
	}
	tier := conversationTier
	if conv == nil {
		tier = fmt.Sprintf("profile %q", profile)
	}
	if err := r.validate(s, tier); err != nil {
		return Settings{}, err
	}
	return s, nil
}

// CheckConversation refuses keys a conversation may not set.
func CheckConversation(conv Layer) error {
	for name := range conv {
		if name == ProfileKey {
			continue
		}
		k, ok := Lookup(name)
		if !ok {
			return bad("unknown key %q", name)
		}
		if k.Scope != Conversation {
			return bad("%s cannot be set per conversation: endpoints, models and keys come only from the operator's profiles", name)
		}
	}
	return nil
}

// text turns a JSON value of a config file or policy into its text form.
func text(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case bool:
		return "", errors.New("booleans are not used by any key")
	case nil:
		return "", errors.New("null is not a value; leave the key out")
	}
	return "", fmt.Errorf("must be a string or a number, not %T", v)
}

// DecodeConversation reads a conversation policy (a JSON object of key → value, the
// value of KV compaction-policy) and checks its keys.
func DecodeConversation(data []byte) (Layer, error) {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, bad("policy must be a JSON object: %v", err)
	}
	l := Layer{}
	for k, v := range raw {
		if k == "schema_version" {
			continue
		}
		s, err := text(v)
		if err != nil {
			return nil, bad("%s: %v", k, err)
		}
		l[k] = s
	}
	if err := CheckConversation(l); err != nil {
		return nil, err
	}
	return l, nil
}

// EncodeConversation writes a conversation policy as JSON, numbers as numbers.
func EncodeConversation(l Layer) ([]byte, error) {
	out := map[string]any{"schema_version": 1}
	for name, v := range l {
		k, ok := Lookup(name)
		switch {
		case name == ProfileKey || (ok && (k.Kind == String || k.Kind == Duration)):
			out[name] = v
		case ok:
			n, err := jsonNumber(k, v)
			if err != nil {
				return nil, bad("%s: %v", name, err)
			}
			out[name] = n
		default:
			return nil, bad("unknown key %q", name)
		}
	}
	return json.Marshal(out)
}

// jsonNumber returns the value of a number key as a JSON number: as written when it is
// one, else the number it parses to (".7" is 0.7, "+20" is 20), so every value the
// resolver reads can be stored.
func jsonNumber(k Key, v string) (json.Number, error) {
	s := strings.TrimSpace(v)
	if s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && json.Valid([]byte(s)) {
		return json.Number(s), nil
	}
	if k.Kind == Int {
		i, err := strconv.Atoi(s)
		if err != nil {
			return "", fmt.Errorf("%q is not an integer", v)
		}
		return json.Number(strconv.Itoa(i)), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("%q is not a number", v)
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// Merge applies a change to a conversation policy: clear empties it first, then every
// key of set is set (an empty value removes the key). It refuses keys a conversation may
// not set; the values are checked by resolving the result.
func Merge(current Layer, clear bool, set Layer) (Layer, error) {
	next := Layer{}
	if !clear {
		for k, v := range current {
			next[k] = v
		}
	}
	for k, v := range set {
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	if err := CheckConversation(next); err != nil {
		return nil, err
	}
	return next, nil
}

// ForTenant returns the resolver of a tenant's conversations (docs/tenants.md): the
// tiers of r's environment with the tenant's own settings over them (tenant: any key, as
// the environment; the operator writes both), and the tenant's profiles f (nil: none)
// instead of r's. A tenant's conversation can name only its tenant's profiles, so it
// never reaches another tenant's endpoint or key.
func (r *Resolver) ForTenant(name string, tenant map[string]any, f *File) (*Resolver, error) {
	env := Layer{}
	for k, v := range r.env {
		env[k] = v
	}
	for k, v := range tenant {
		if k == ProfileKey {
			return nil, bad("tenant %q: name a default profile with default_profile, not %s", name, ProfileKey)
		}
		if _, ok := Lookup(k); !ok {
			return nil, bad("tenant %q: unknown key %q", name, k)
		}
		s, err := text(v)
		if err != nil {
			return nil, bad("tenant %q: %s: %v", name, k, err)
		}
		env[k] = s
	}
	out, err := NewResolver(env, f, r.check)
	if err != nil {
		return nil, fmt.Errorf("tenant %q: %w", name, err)
	}
	return out, nil
}
