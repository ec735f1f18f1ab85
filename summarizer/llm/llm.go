package llm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer"
)

// DefaultMaxSummaryTokens is the cap used when Input.MaxSummaryTokens is not positive.
const DefaultMaxSummaryTokens = 2048

// reasoningHeadroom is added to the completion cap of reasoning models (o1, o3, o4,
// gpt-5, …), whose cap counts their hidden reasoning as well as the summary.
const reasoningHeadroom = 8192

// chatCompleter is the one call Summarizer makes; *openai.Client has it.
type chatCompleter interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Summarizer summarizes with a language model. It is safe for concurrent use.
type Summarizer struct {
	cfg    Config
	client chatCompleter
}

var _ summarizer.Summarizer = (*Summarizer)(nil)

// New returns a summarizer for cfg, after WithDefaults and Validate. It makes no
// request: an endpoint that is down shows in the first Summarize.
func New(cfg Config) (*Summarizer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	endpoint, err := cfg.endpoint()
	if err != nil {
		return nil, err
	}
	cc := openai.DefaultConfig(cfg.APIKey)
	cc.BaseURL = endpoint
	cfg.BaseURL = endpoint
	return &Summarizer{cfg: cfg, client: openai.NewClientWithConfig(cc)}, nil
}

// Config returns the configuration in use, with defaults applied and BaseURL as it is
// called (with "/v1" added when it had no path).
func (s *Summarizer) Config() Config { return s.cfg }

// Summarize asks the model for a summary of in.PreviousSummary and in.Messages, with
// in.SystemPrompt as context and in.Instructions as the operator's wishes, capped at
// in.MaxSummaryTokens (DefaultMaxSummaryTokens when not positive) completion tokens.
// The call is bounded by ctx and by Config.Timeout.
//
// The output's Model is the model the endpoint says answered (Config.Model when it does
// not say), PromptHash is PromptHash(cap, in.Instructions), and Usage is what the
// endpoint reported (nil when it reported nothing). A leading <think> block and a code
// fence around the whole answer are removed. An answer without text fails with
// ErrEmptySummary, an answer cut off at the token cap with ErrSummaryTruncated, and a
// request the endpoint refuses as too long for the model with ErrContextLength.
func (s *Summarizer) Summarize(ctx context.Context, in summarizer.Input) (summarizer.Output, error) {
	maxTokens := in.MaxSummaryTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxSummaryTokens
	}
	req := openai.ChatCompletionRequest{
		Model: s.cfg.Model,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: systemMessage(maxTokens)},
			{Role: openai.ChatMessageRoleUser, Content: userMessage(in, maxTokens)},
		},
		MaxTokens:   maxTokens,
		Temperature: s.cfg.Temperature,
	}
	if errors.Is(openai.NewReasoningValidator().Validate(req), openai.ErrReasoningModelMaxTokensDeprecated) {
		// Reasoning models refuse max_tokens; their max_completion_tokens also counts
		// the reasoning, so it gets headroom. The summary's own cap is in the prompt.
		req.MaxTokens, req.MaxCompletionTokens = 0, maxTokens+reasoningHeadroom
	}

	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	resp, err := s.client.CreateChatCompletion(ctx, req)
	if err != nil {
		if isContextLength(err) {
			return summarizer.Output{}, fmt.Errorf("llm: model %s: %w: %w", s.cfg.Model, ErrContextLength, err)
		}
		return summarizer.Output{}, fmt.Errorf("llm: model %s: %w", s.cfg.Model, err)
	}
	if len(resp.Choices) == 0 {
		return summarizer.Output{}, fmt.Errorf("llm: model %s: %w: no choices in the response", s.cfg.Model, ErrEmptySummary)
	}
	choice := resp.Choices[0]
	summary := clean(choice.Message.Content)
	if summary == "" {
		why := "empty content"
		if choice.Message.Refusal != "" {
			why = "refusal: " + choice.Message.Refusal
		}
		if choice.FinishReason != "" {
			why += ", finish reason " + string(choice.FinishReason)
		}
		return summarizer.Output{}, fmt.Errorf("llm: model %s: %w: %s", s.cfg.Model, ErrEmptySummary, why)
	}
	if choice.FinishReason == openai.FinishReasonLength {
		return summarizer.Output{}, fmt.Errorf("llm: model %s: %w (%d characters written)",
			s.cfg.Model, ErrSummaryTruncated, utf8.RuneCountInString(summary))
	}
	out := summarizer.Output{
		Summary:    summary,
		Model:      resp.Model,
		PromptHash: PromptHash(maxTokens, in.Instructions),
	}
	if out.Model == "" {
		out.Model = s.cfg.Model
	}
	if u := resp.Usage; u.PromptTokens != 0 || u.CompletionTokens != 0 || u.TotalTokens != 0 {
		out.Usage = &schemas.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	}
	return out, nil
}

var (
	thinkRE = regexp.MustCompile(`(?is)^\s*<think>.*?</think>`)
	fenceRE = regexp.MustCompile("(?s)^```[a-zA-Z]*[ \t]*\n(.*)\n```$")
)

// clean removes what some models wrap a summary in: a leading <think> block and a code
// fence around the whole answer.
func clean(s string) string {
	s = thinkRE.ReplaceAllString(s, "")
	s = strings.TrimSpace(s)
	if m := fenceRE.FindStringSubmatch(s); m != nil {
		s = strings.TrimSpace(m[1])
	}
	return s
}
