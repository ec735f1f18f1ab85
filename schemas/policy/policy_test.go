package policy

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultsAreValid(t *testing.T) {
	s := Defaults()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ContextWindow != 128000 || s.Threshold != 0.75 || s.Strategy != "keep-last-n" || s.LLMTimeout != 2*time.Minute ||
		s.ToolOutputBudget != 50000 || s.Tokenizer != "chars4" || s.SummarizerContextWindow != 128000 ||
		s.LLMMaxTokensField != "max_tokens" || s.Rungs != RungsSummary {
		t.Fatalf("defaults = %+v", s)
	}
	for _, k := range Keys {
		if k.Doc == "" {
			t.Errorf("key %s has no doc", k.Name)
		}
	}
}

func TestTiersLaterWins(t *testing.T) {
	f, err := ParseFile([]byte(`{
		"default_profile": "standard",
		"profiles": {
			"standard": {"threshold": 0.7, "keep_last_n": 30},
			"cheap": {"llm_model": "small-model", "llm_base_url": "http://cheap/v1", "context_window": 32000, "threshold": "0.8"}
		}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewResolver(Layer{"threshold": "0.6", "keep_last_n": "10", "min_progress": "0.2"}, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		conv Layer
		want func(s Settings) bool
	}{
		{"environment over defaults", nil, func(s Settings) bool { return s.MinProgress == 0.2 }},
		{"default profile over environment", nil, func(s Settings) bool { return s.Threshold == 0.7 && s.KeepLastN == 30 && s.Profile == "standard" }},
		{"a chosen profile", Layer{"profile": "cheap"}, func(s Settings) bool {
			return s.LLMModel == "small-model" && s.ContextWindow == 32000 && s.Threshold == 0.8 && s.KeepLastN == 10
		}},
		{"conversation over profile", Layer{"profile": "cheap", "threshold": "0.85", "strategy": "all"}, func(s Settings) bool {
			return s.Threshold == 0.85 && s.Strategy == "all" && s.LLMModel == "small-model"
		}},
		{"a conversation chooses its rungs", Layer{"rungs": " mask-then-summary "}, func(s Settings) bool {
			return s.Rungs == RungsMaskThenSummary && s.ByKey()["rungs"] == RungsMaskThenSummary
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := r.Resolve(tc.conv)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(s) {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

func TestErrorsNameTheTierAndKey(t *testing.T) {
	tests := []struct {
		name    string
		env     Layer
		file    string
		conv    Layer
		wantErr string
	}{
		{"bad env number", Layer{"threshold": "high"}, "", nil, `environment: threshold: "high" is not a number`},
		{"bad env range", Layer{"keep_last_n": "0"}, "", nil, "environment: invalid policy: keep_last_n must be at least 1"},
		{"unknown max tokens field", Layer{"llm_max_tokens_field": "max_new_tokens"}, "", nil, "llm_max_tokens_field must be one of max_tokens, max_completion_tokens"},
		{"unknown request shape", Layer{"llm_request_shape": "tagged"}, "", nil, "llm_request_shape must be one of prefix, transcript"},
		{"unknown rungs", nil, "", Layer{"rungs": "mask-only"}, "rungs must be one of summary, mask, mask-then-summary"},
		{"unknown env key", Layer{"nope": "1"}, "", nil, `unknown key "nope"`},
		{"bad profile", nil, `{"profiles":{"p":{"target":0.9}}}`, nil, `profile "p"`},
		{"profile naming a profile", nil, `{"profiles":{"p":{"profile":"q"}}}`, nil, "cannot name another profile"},
		{"unknown default profile", nil, `{"default_profile":"x","profiles":{}}`, nil, `default_profile "x"`},
		{"unknown file field", nil, `{"profilez":{}}`, nil, "config file"},
		{"endpoint per conversation", nil, "", Layer{"llm_base_url": "http://evil"}, "endpoints, models and keys come only from the operator's profiles"},
		{"key env per conversation", nil, "", Layer{"llm_api_key_env": "HOME"}, "cannot be set per conversation"},
		{"unknown conversation key", nil, "", Layer{"colour": "red"}, `unknown key "colour"`},
		{"unknown profile", nil, "", Layer{"profile": "gold"}, `profile "gold" does not exist`},
		{"bad conversation range", nil, "", Layer{"threshold": "0.2"}, "threshold must be above target"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f *File
			var err error
			if tc.file != "" {
				f, err = ParseFile([]byte(tc.file))
			}
			var r *Resolver
			if err == nil {
				r, err = NewResolver(tc.env, f, nil)
			}
			if err == nil {
				_, err = r.Resolve(tc.conv)
			}
			if err == nil || !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v; want an ErrPolicy containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckHookRuns(t *testing.T) {
	check := func(s Settings) error {
		if s.Strategy != "keep-last-n" && s.Strategy != "all" {
			return errors.New("strategy: unknown")
		}
		return nil
	}
	r, err := NewResolver(nil, nil, check)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(Layer{"strategy": "magic"}); err == nil || !strings.Contains(err.Error(), "strategy: unknown") {
		t.Fatalf("got %v", err)
	}
}

func TestConversationRoundTrip(t *testing.T) {
	l := Layer{"profile": "cheap", "threshold": "0.8", "keep_last_n": "12", "instructions": "keep paths"}
	b, err := EncodeConversation(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"threshold":0.8`) || !strings.Contains(string(b), `"keep_last_n":12`) {
		t.Fatalf("numbers not encoded as numbers: %s", b)
	}
	got, err := DecodeConversation(b)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range l {
		if got[k] != v {
			t.Errorf("%s = %q; want %q", k, got[k], v)
		}
	}
	if _, err := DecodeConversation([]byte(`{"llm_model":"x"}`)); err == nil {
		t.Fatal("an operator key was accepted in a conversation policy")
	}
	if _, err := DecodeConversation([]byte(`[1]`)); err == nil {
		t.Fatal("a non-object was accepted")
	}
}

// TestEncodeConversationStoresWhatResolves: a number the resolver reads that is not a
// JSON number (".7", "+20", "020") is stored as the number it means, so a policy that
// resolves can always be written (found by FuzzDecodeConversation: compactor.policy
// refused such a value with "invalid number literal" after resolving it).
func TestEncodeConversationStoresWhatResolves(t *testing.T) {
	r, err := NewResolver(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		give Layer
		want string // in the JSON written
	}{
		{"leading dot", Layer{"threshold": ".7"}, `"threshold":0.7`},
		{"plus sign", Layer{"keep_last_n": "+20"}, `"keep_last_n":20`},
		{"leading zero", Layer{"keep_last_n": "020"}, `"keep_last_n":20`},
		{"spaces", Layer{"target": " 0.4 "}, `"target":0.4`},
		{"JSON numbers as written", Layer{"target": "0.40", "token_limit": "100000"}, `"target":0.40`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, err := r.Resolve(tc.give)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			b, err := EncodeConversation(tc.give)
			if err != nil {
				t.Fatalf("EncodeConversation: %v; want a policy that resolves stored", err)
			}
			if !strings.Contains(string(b), tc.want) {
				t.Fatalf("wrote %s; want it to hold %s", b, tc.want)
			}
			back, err := DecodeConversation(b)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := r.Resolve(back); err != nil || got != want {
				t.Fatalf("read back as %v, resolves to %+v (%v); want %+v", back, got, err, want)
			}
		})
	}
	if _, err := EncodeConversation(Layer{"threshold": "high"}); !errors.Is(err, ErrPolicy) || !strings.Contains(err.Error(), "threshold") {
		t.Fatalf("got %v; want an ErrPolicy naming threshold", err)
	}
}
