// Package policy resolves the settings of one conversation from four tiers, later
// winning: built-in defaults ← the environment (COMPACTOR_<KEY>) ← a named profile of the
// operator's config file ← the conversation's own policy in KV compaction-policy.
//
// Every key is listed once, in Keys, with its type, default and whether a conversation
// may set it. A conversation may choose a profile and the safe knobs only: endpoints,
// models and keys come from the operator's profiles.
package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind is a key's value type.
type Kind int

// The kinds of values.
const (
	Int Kind = iota
	Float
	String
	Duration
)

func (k Kind) String() string {
	return [...]string{"integer", "number", "string", "duration"}[k]
}

// Scope says which tiers may set a key.
type Scope int

const (
	// Conversation keys may be set in every tier, the conversation's policy included.
	Conversation Scope = iota
	// Operator keys may be set by the environment and the profiles only.
	Operator
)

// Key describes one setting.
type Key struct {
	Name    string // snake_case, as in policies and profiles
	Kind    Kind
	Default string // as it would be written in the environment; "" = empty/off
	Scope   Scope
	Doc     string
}

// Env is the environment variable that sets the key.
func (k Key) Env() string { return "COMPACTOR_" + strings.ToUpper(k.Name) }

// Keys lists every key, in the order the README documents them.
var Keys = []Key{
	{"context_window", Int, "128000", Conversation, "the agent model's context window W, in tokens"},
	{"threshold", Float, "0.75", Conversation, "compact when the context reaches this fraction of W"},
	{"target", Float, "0.5", Conversation, "a compaction brings the context to at most this fraction of W"},
	{"hard_limit", Float, "0.95", Conversation, "past this fraction of W with the LLM failing, a fallback summary keeps the bound"},
	{"soft_threshold", Float, "0", Conversation, "start compaction early at this fraction of W (between target and threshold), so a result is ready before the threshold; 0 = off"},
	{"token_limit", Int, "0", Conversation, "also compact when the context reaches this many tokens; 0 = off"},
	{"max_rounds", Int, "0", Conversation, "also compact after this many assistant rounds since the last compaction; 0 = off"},
	{"tool_output_trigger_tokens", Int, "0", Conversation, "compact early after a tool output larger than this many tokens; 0 = off"},
	{"idle_after", Duration, "0s", Conversation, "compact a conversation idle this long (e.g. 10m) and over idle_threshold; 0s = off"},
	{"idle_threshold", Float, "0.4", Conversation, "idle compaction only above this fraction of W"},
	{"max_summary_tokens", Int, "0", Conversation, "summary cap; 0 = 2048, scaled up for windows over 128k, at most W/8; never more than summarizer_context_window/8"},
	{"evidence_budget", Float, "0.075", Conversation, "share of W for the evidence section after the summary (files, commands, URLs, ids, numbers); never more than 15% of target × W; 0 = off"},
	{"strategy", String, "keep-last-n", Conversation, "split strategy: keep-last-n, tool-rounds, user-messages, token-fraction, recent-turns or all"},
	{"rungs", String, "summary", Conversation, "what a compaction does: summary (summarize), mask (replace old tool outputs by a placeholder that says how to recall them, no LLM call; summarize only past the hard limit) or mask-then-summary (mask, and summarize only when masking cannot reach the target)"},
	{"keep_last_n", Int, "20", Conversation, "keep-last-n: messages kept verbatim"},
	{"tool_rounds", Int, "2", Conversation, "tool-rounds: complete rounds kept verbatim"},
	{"user_message_tokens", Int, "20000", Conversation, "user-messages: tokens of user messages kept verbatim"},
	{"token_fraction", Float, "0.3", Conversation, "token-fraction: share of the tokens kept verbatim"},
	{"recent_turns", Int, "2", Conversation, "recent-turns: turns kept verbatim"},
	{"min_progress", Float, "0.1", Conversation, "a result must shrink the context by this fraction, or it is declined"},
	{"tool_output_cap", Int, "2000", Conversation, "tokens of each tool output the summarizer sees (head and tail kept)"},
	{"tool_output_budget", Int, "50000", Conversation, "tokens of all tool output the summarizer sees, newest first"},
	{"instructions", String, "", Conversation, "extra wishes for every summary of the conversation (data, never overriding the prompt)"},
	{"summary_role", String, "user", Conversation, "role of the summary message: user, system or assistant"},
	{"tokenizer", String, "chars4", Conversation, "token counting: chars4, cl100k_base or o200k_base"},
	{PinsKey, String, "", Conversation, "messages pinned after they were published: their CHAT sequences, comma-separated (e.g. 811,812), at most 64; kept verbatim from the next compaction on (one already summarized comes back); a conversation's own policy only"},
	{"summarizer_context_window", Int, "128000", Operator, "the summarizer model's context window; larger inputs are summarized in chunks, then merged"},
	{"llm_base_url", String, "", Operator, "OpenAI-compatible endpoint of the summarizer (falls back to OPENAI_BASE_URL); empty with no key = extractive summaries"},
	{"llm_api_key_env", String, "COMPACTOR_LLM_API_KEY", Operator, "name of the variable that holds the summarizer's key (falls back to OPENAI_API_KEY); the key itself never goes in a file"},
	{"llm_model", String, "gpt-4o-mini", Operator, "summarizer model"},
	{"llm_max_tokens_field", String, "max_tokens", Operator, "request field of the summary's token cap: max_tokens (vLLM, llama.cpp, Ollama, older Azure) or max_completion_tokens (newer OpenAI models); reasoning models always get max_completion_tokens"},
	{"llm_request_shape", String, "prefix", Operator, "layout of a summarization request: prefix (the agent's own messages, then the instruction last, so a prefix cache hits) or transcript (the prompt as system message and everything to summarize in one tagged user message, for endpoints that refuse tool messages without tool definitions)"},
	{"llm_timeout", Duration, "2m", Operator, "timeout of one summarization call"},
}

// Lookup returns the key with that name.
func Lookup(name string) (Key, bool) {
	for _, k := range Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Settings are the resolved values of every key for one conversation.
type Settings struct {
	Profile                 string // the profile applied, "" for none
	ContextWindow           int
	Threshold               float64
	Target                  float64
	HardLimit               float64
	SoftThreshold           float64
	TokenLimit              int
	MaxRounds               int
	ToolOutputTriggerTokens int
	IdleAfter               time.Duration
	IdleThreshold           float64
	MaxSummaryTokens        int
	EvidenceBudget          float64
	Strategy                string
	Rungs                   string
	KeepLastN               int
	ToolRounds              int
	UserMessageTokens       int
	TokenFraction           float64
	RecentTurns             int
	MinProgress             float64
	ToolOutputCap           int
	ToolOutputBudget        int
	Instructions            string
	SummaryRole             string
	Tokenizer               string
	Pins                    string // the pins key, as checked: sequences, comma-separated
	SummarizerContextWindow int
	LLMBaseURL              string
	LLMAPIKeyEnv            string
	LLMModel                string
	LLMMaxTokensField       string
	LLMRequestShape         string
	LLMTimeout              time.Duration
}

// set parses v into the field of key k.
// It stays whole (over 80 lines): one case a key, read as the table of Keys.
func (s *Settings) set(k Key, v string) error {
	var (
		i   int
		f   float64
		d   time.Duration
		err error
	)
	switch k.Kind {
	case Int:
		i, err = strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%s: %q is not an integer", k.Name, v)
		}
	case Float:
		f, err = strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", k.Name, v)
		}
	case Duration:
		d, err = time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration (e.g. 90s, 2m)", k.Name, v)
		}
	}
	switch k.Name {
	case "context_window":
		s.ContextWindow = i
	case "threshold":
		s.Threshold = f
	case "target":
		s.Target = f
	case "hard_limit":
		s.HardLimit = f
	case "soft_threshold":
		s.SoftThreshold = f
	case "token_limit":
		s.TokenLimit = i
	case "max_rounds":
		s.MaxRounds = i
	case "tool_output_trigger_tokens":
		s.ToolOutputTriggerTokens = i
	case "idle_after":
		s.IdleAfter = d
	case "idle_threshold":
		s.IdleThreshold = f
	case "max_summary_tokens":
		s.MaxSummaryTokens = i
	case "evidence_budget":
		s.EvidenceBudget = f
	case "strategy":
		s.Strategy = strings.TrimSpace(v)
	case "rungs":
		s.Rungs = strings.TrimSpace(v)
	case "keep_last_n":
		s.KeepLastN = i
	case "tool_rounds":
		s.ToolRounds = i
	case "user_message_tokens":
		s.UserMessageTokens = i
	case "token_fraction":
		s.TokenFraction = f
	case "recent_turns":
		s.RecentTurns = i
	case "min_progress":
		s.MinProgress = f
	case "tool_output_cap":
		s.ToolOutputCap = i
	case "tool_output_budget":
		s.ToolOutputBudget = i
	case "instructions":
		s.Instructions = v
	case "summary_role":
		s.SummaryRole = strings.TrimSpace(v)
	case "tokenizer":
		s.Tokenizer = strings.TrimSpace(v)
	case PinsKey:
		seqs, err := ParsePins(v)
		if err != nil {
			return err
		}
		s.Pins = FormatPins(seqs)
	case "summarizer_context_window":
		s.SummarizerContextWindow = i
	case "llm_base_url":
		s.LLMBaseURL = strings.TrimSpace(v)
	case "llm_api_key_env":
		s.LLMAPIKeyEnv = strings.TrimSpace(v)
	case "llm_model":
		s.LLMModel = strings.TrimSpace(v)
	case "llm_max_tokens_field":
		s.LLMMaxTokensField = strings.TrimSpace(v)
	case "llm_request_shape":
		s.LLMRequestShape = strings.TrimSpace(v)
	case "llm_timeout":
		s.LLMTimeout = d
	default:
		return fmt.Errorf("unknown key %q", k.Name)
	}
	return nil
}
