package policy

import (
	"net/url"
	"time"
)

// ConversationKeys are the keys a conversation's policy may set: "profile" and every
// key of scope Conversation, in Keys order.
func ConversationKeys() []string {
	keys := []string{ProfileKey}
	for _, k := range Keys {
		if k.Scope == Conversation {
			keys = append(keys, k.Name)
		}
	}
	return keys
}

// ByKey shows the settings the way policies and profiles name them: every key of Keys
// by its snake_case name, plus "profile" (the profile applied, "" for none). Integers
// and numbers stay numbers, durations are text ("2m0s"), and the endpoint URL loses
// its credentials and query. The compactor service (compactor.policy) and `compactor
// policy` both show settings with it.
func (s Settings) ByKey() map[string]any {
	out := make(map[string]any, len(Keys)+1)
	out[ProfileKey] = s.Profile
	for _, k := range Keys {
		v := s.value(k.Name)
		if d, ok := v.(time.Duration); ok {
			v = d.String()
		}
		out[k.Name] = v
	}
	out["llm_base_url"] = RedactURL(s.LLMBaseURL)
	return out
}

// value returns the field of key name: the reverse of set.
func (s Settings) value(name string) any {
	switch name {
	case "context_window":
		return s.ContextWindow
	case "threshold":
		return s.Threshold
	case "target":
		return s.Target
	case "hard_limit":
		return s.HardLimit
	case "soft_threshold":
		return s.SoftThreshold
	case "token_limit":
		return s.TokenLimit
	case "max_rounds":
		return s.MaxRounds
	case "tool_output_trigger_tokens":
		return s.ToolOutputTriggerTokens
	case "idle_after":
		return s.IdleAfter
	case "idle_threshold":
		return s.IdleThreshold
	case "max_summary_tokens":
		return s.MaxSummaryTokens
	case "evidence_budget":
		return s.EvidenceBudget
	case "strategy":
		return s.Strategy
	case "rungs":
		return s.Rungs
	case "keep_last_n":
		return s.KeepLastN
	case "tool_rounds":
		return s.ToolRounds
	case "user_message_tokens":
		return s.UserMessageTokens
	case "token_fraction":
		return s.TokenFraction
	case "recent_turns":
		return s.RecentTurns
	case "min_progress":
		return s.MinProgress
	case "tool_output_cap":
		return s.ToolOutputCap
	case "tool_output_budget":
		return s.ToolOutputBudget
	case "instructions":
		return s.Instructions
	case "summary_role":
		return s.SummaryRole
	case "tokenizer":
		return s.Tokenizer
	case PinsKey:
		return s.Pins
	case "summarizer_context_window":
		return s.SummarizerContextWindow
	case "llm_base_url":
		return s.LLMBaseURL
	case "llm_api_key_env":
		return s.LLMAPIKeyEnv
	case "llm_model":
		return s.LLMModel
	case "llm_max_tokens_field":
		return s.LLMMaxTokensField
	case "llm_request_shape":
		return s.LLMRequestShape
	case "llm_timeout":
		return s.LLMTimeout
	}
	return nil
}

// RedactURL drops the credentials and the query of an endpoint URL, for logs and
// answers.
func RedactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable url)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}
