package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
)

func TestBadVariableStopsStartUpNamingIt(t *testing.T) {
	tests := []struct {
		name, key, value string
	}{
		{"not a number", "COMPACTOR_WORKERS", "many"},
		{"zero workers", "COMPACTOR_WORKERS", "0"},
		{"threshold under target", "COMPACTOR_THRESHOLD", "0.3"},
		{"hard limit over one", "COMPACTOR_HARD_LIMIT", "1.5"},
		{"window too small", "COMPACTOR_CONTEXT_WINDOW", "10"},
		{"summary over target", "COMPACTOR_MAX_SUMMARY_TOKENS", "90000"},
		{"unknown role", "COMPACTOR_ROLES", "trigger,chef"},
		{"bad duration", "COMPACTOR_LLM_TIMEOUT", "soon"},
		{"bad log level", "COMPACTOR_LOG_LEVEL", "loud"},
		{"bad strategy", "COMPACTOR_STRATEGY", "magic"},
		{"bad summary role", "COMPACTOR_SUMMARY_ROLE", "tool"},
		{"backoff max under base", "COMPACTOR_BACKOFF_MAX", "1s"},
		{"object size too small", "COMPACTOR_MAX_OBJECT_SIZE", "100"},
		{"no api concurrency", "COMPACTOR_API_CONCURRENCY", "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testEnv(t, 128000) // clears the environment
			t.Setenv(tc.key, tc.value)
			err := run(t.Context(), []string{"serve"}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}}, os.LookupEnv)
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("got %v; want an error naming %s", err, tc.key)
			}
		})
	}
}

func TestHelpListsEveryVariable(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"help"}, stdio{out: &out, err: &out}, os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"COMPACTOR_NATS_URL", "COMPACTOR_LISTEN", "127.0.0.1:4222", "COMPACTOR_THRESHOLD", "0.75",
		"COMPACTOR_CONTEXT_WINDOW", "128000", "COMPACTOR_WORKERS", "COMPACTOR_KEEP_LAST_N", "COMPACTOR_LLM_BASE_URL",
		"COMPACTOR_LLM_API_KEY", "COMPACTOR_LLM_MODEL", "OPENAI_API_KEY", "publish <conv>", "compact <conv>", "COMPACTOR_UPDATE_STREAMS", "--update-streams"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}

func TestOpenAIVariablesAreHonoured(t *testing.T) {
	testEnv(t, 128000)
	env, err := loadEnv(func(k string) (string, bool) {
		return map[string]string{"OPENAI_BASE_URL": "http://llm.local/v1", "OPENAI_API_KEY": "sk-test"}[k], true
	})
	if err != nil {
		t.Fatal(err)
	}
	if env.Policy["llm_base_url"] != "http://llm.local/v1" {
		t.Fatalf("OPENAI_BASE_URL not used: %+v", env.Policy)
	}
	r, err := env.resolver()
	if err != nil {
		t.Fatal(err)
	}
	sums := node.NewSummarizers(node.Config{Resolver: r, Profiles: env.Profiles, Lookup: env.lookup, Logger: zerolog.Nop()}, extractive.New())
	s, err := sums.For(r.Base())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.(*llm.Summarizer).Config(); got.APIKey != "sk-test" || got.BaseURL != "http://llm.local/v1" {
		t.Fatalf("summarizer config = %+v; want OPENAI_API_KEY and OPENAI_BASE_URL", got)
	}
	env, _ = loadEnv(func(k string) (string, bool) {
		return map[string]string{"COMPACTOR_LLM_BASE_URL": "http://mine/v1", "OPENAI_BASE_URL": "http://other/v1"}[k], true
	})
	if env.Policy["llm_base_url"] != "http://mine/v1" {
		t.Fatalf("COMPACTOR_LLM_BASE_URL lost to OPENAI_BASE_URL: %q", env.Policy["llm_base_url"])
	}
}

// Every component stops within COMPACTOR_DRAIN_TIMEOUT: the drain, then two hand-back
// steps (a partition's last acks, then its unpin), leave time to spare, whatever d.
func TestStopBudgetsFitTheDrainTimeout(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		30 * time.Second, time.Minute, 3 * time.Minute, time.Hour} {
		drain, handBack := node.StopBudgets(d)
		if drain <= 0 || handBack <= 0 || drain+2*handBack >= d {
			t.Errorf("node.StopBudgets(%s) = drain %s, hand-back %s; want both positive and drain + 2×hand-back under %s", d, drain, handBack, d)
		}
		if d >= 10*time.Second && d-drain < 5*time.Second {
			t.Errorf("node.StopBudgets(%s): drain %s leaves %s to hand back; want at least 5 s", d, drain, d-drain)
		}
	}
}
