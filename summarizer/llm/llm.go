package llm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/summary"
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
	// secrets are cut from the text of every error (see callError).
	secrets []string
	// compact sends CompactPrompt in the transcript shape (see Compact).
	compact bool
	// usage hears what every answered call spent (nil: nobody; see WithUsage).
	usage func(context.Context, schemas.Usage)
}

var _ summary.Summarizer = (*Summarizer)(nil)

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
	cc.HTTPClient = retryAfterDoer{client: &http.Client{}}
	cfg.BaseURL = endpoint
	return &Summarizer{cfg: cfg, client: openai.NewClientWithConfig(cc), secrets: secrets(cfg)}, nil
}

// secrets are what of cfg must never show in an error: the key, and the base URL's
// password as itself and as the basic authentication Go sends for it without a key.
func secrets(cfg Config) []string {
	var out []string
	if cfg.APIKey != "" {
		out = append(out, cfg.APIKey)
	}
	if u, err := url.Parse(cfg.BaseURL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p, base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+p)))
		}
	}
	return out
}

// Compact returns a summarizer of the same endpoint and model whose requests are as
// short as this package makes them: the transcript shape (no chat message per agent
// message) with CompactPrompt, a quarter of Prompt. The worker uses it for a model
// whose window is too small for the full prompt beside the summary and the input it
// must merge. Its outputs' PromptHash is CompactPromptHash.
func (s *Summarizer) Compact() summary.Summarizer {
	c := *s
	c.cfg.RequestShape = ShapeTranscript
	c.compact = true
	return &c
}

// WithUsage returns a summarizer of the same endpoint and model that tells fn what
// every call the endpoint answered spent, whatever becomes of the answer (a summary over
// its cap, cut off or empty costs its tokens too): the usage the endpoint reported, or
// the request's estimate as prompt tokens when it reported none. A tenant's quota counts
// its spending with it. fn gets the call's context, which carries the compaction's
// quota reservation (summary.ChargeOf).
func (s *Summarizer) WithUsage(fn func(context.Context, schemas.Usage)) *Summarizer {
	c := *s
	c.usage = fn
	return &c
}

// Endpoint names what answers this summarizer's requests, for the window the worker
// learns of it: the base URL without credentials, query or fragment, and the model.
func (s *Summarizer) Endpoint() (baseURL, model string) {
	return redactURL(s.cfg.BaseURL), s.cfg.Model
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
// not say), PromptHash is PrefixPromptHash(cap, in.Instructions) (PromptHash in the
// transcript shape), and Usage is what the endpoint reported (nil when it reported
// nothing), with the cached part of the prompt where the endpoint reports it
// (usage.prompt_tokens_details.cached_tokens). A leading <think> block and a code
// fence around the whole answer are removed. An answer without text fails with
// ErrEmptySummary, an answer cut off at the token cap with ErrSummaryTruncated, and a
// request the endpoint refuses as too long for the model with ErrContextLength.
//
// The text of an error never shows the key or the base URL's password, and an endpoint
// that said when to ask again (Retry-After) is heard: see RetryAfter.
func (s *Summarizer) Summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	var retryAfter time.Duration
	out, err := s.summarize(context.WithValue(ctx, retryAfterKey{}, &retryAfter), in)
	if err != nil {
		ce := &callError{err: err, secrets: s.secrets, retryAfter: retryAfter}
		if errors.Is(err, ErrContextLength) {
			ce.window, ce.requested = contextLimit(err)
		}
		return summary.Output{}, ce
	}
	return out, nil
}

func (s *Summarizer) summarize(ctx context.Context, in summary.Input) (summary.Output, error) {
	req, maxTokens := s.request(in)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	resp, err := s.client.CreateChatCompletion(ctx, req)
	if err != nil {
		if isContextLength(err) {
			return summary.Output{}, fmt.Errorf("llm: model %s: %w: %w", s.cfg.Model, ErrContextLength, err)
		}
		return summary.Output{}, fmt.Errorf("llm: model %s: %w", s.cfg.Model, err)
	}
	s.spent(ctx, resp.Usage, in)
	if len(resp.Choices) == 0 {
		return summary.Output{}, fmt.Errorf("llm: model %s: %w: no choices in the response", s.cfg.Model, ErrEmptySummary)
	}
	choice := resp.Choices[0]
	text := clean(choice.Message.Content)
	if text == "" {
		why := "empty content"
		if choice.Message.Refusal != "" {
			why = "refusal: " + choice.Message.Refusal
		}
		if choice.FinishReason != "" {
			why += ", finish reason " + string(choice.FinishReason)
		}
		return summary.Output{}, fmt.Errorf("llm: model %s: %w: %s", s.cfg.Model, ErrEmptySummary, why)
	}
	if choice.FinishReason == openai.FinishReasonLength {
		return summary.Output{}, fmt.Errorf("llm: model %s: %w (%d characters written)",
			s.cfg.Model, ErrSummaryTruncated, utf8.RuneCountInString(text))
	}
	out := summary.Output{
		Summary:    text,
		Model:      resp.Model,
		PromptHash: s.promptHash(maxTokens, in.Instructions),
	}
	if out.Model == "" {
		out.Model = s.cfg.Model
	}
	if u := resp.Usage; u.PromptTokens != 0 || u.CompletionTokens != 0 || u.TotalTokens != 0 {
		out.Usage = &schemas.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens > 0 {
			// Bounded by the prompt: a count over it is the endpoint's error, not a fact.
			out.Usage.CachedTokens = min(d.CachedTokens, max(u.PromptTokens, 0))
		}
	}
	return out, nil
}

// spent tells the usage hook what an answered call spent.
func (s *Summarizer) spent(ctx context.Context, u openai.Usage, in summary.Input) {
	if s.usage == nil {
		return
	}
	if u.PromptTokens > 0 || u.CompletionTokens > 0 {
		s.usage(ctx, schemas.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens})
		return
	}
	n := s.RequestTokens(in)
	s.usage(ctx, schemas.Usage{PromptTokens: n, TotalTokens: n})
}

// promptHash is PromptHash or PrefixPromptHash, after the request shape.
func (s *Summarizer) promptHash(maxTokens int, instructions string) string {
	if s.compact {
		return CompactPromptHash(maxTokens, instructions)
	}
	if s.cfg.RequestShape == ShapeTranscript {
		return PromptHash(maxTokens, instructions)
	}
	return PrefixPromptHash(maxTokens, instructions)
}

// request is the chat completion Summarize sends for in, and the summary's cap. Its
// messages are laid out as Config.RequestShape says (see ShapePrefix, ShapeTranscript).
//
// The completion cap goes in the field Config.MaxTokensField names. go-openai marks
// max_tokens deprecated, but vLLM, llama.cpp, Ollama and older Azure deployments read
// only max_tokens, so it stays the default. Models go-openai knows as reasoning models
// refuse max_tokens; they always get max_completion_tokens, with headroom, because it
// also counts their hidden reasoning (the summary's own cap is in the prompt).
func (s *Summarizer) request(in summary.Input) (openai.ChatCompletionRequest, int) {
	maxTokens := in.MaxSummaryTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxSummaryTokens
	}
	req := openai.ChatCompletionRequest{Model: s.cfg.Model, Temperature: s.cfg.Temperature}
	if s.cfg.RequestShape == ShapeTranscript {
		system := systemMessage(maxTokens)
		if s.compact {
			system = compactSystemMessage(maxTokens)
		}
		req.Messages = []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: system},
			{Role: openai.ChatMessageRoleUser, Content: userMessage(in, maxTokens)},
		}
	} else {
		req.Messages = prefixRequest(in, maxTokens)
	}
	switch {
	case s.reasoning():
		req.MaxCompletionTokens = maxTokens + reasoningHeadroom
	case s.cfg.MaxTokensField == FieldMaxCompletionTokens:
		req.MaxCompletionTokens = maxTokens
	default:
		//lint:ignore SA1019 deliberate: OpenAI-compatible servers (vLLM, llama.cpp, older Azure) read only max_tokens; Config.MaxTokensField chooses.
		req.MaxTokens = maxTokens
	}
	return req, maxTokens
}

// reasoning reports whether go-openai knows the model as a reasoning model, which
// refuses max_tokens.
func (s *Summarizer) reasoning() bool {
	//lint:ignore SA1019 probes go-openai's own check for the models that refuse max_tokens
	probe := openai.ChatCompletionRequest{Model: s.cfg.Model, MaxTokens: 1}
	return errors.Is(openai.NewReasoningValidator().Validate(probe), openai.ErrReasoningModelMaxTokensDeprecated)
}

// Chat-format costs besides the text: per message (role and separators), and the
// priming of the reply. What OpenAI documents for its chat models; other servers' chat
// templates cost about as much.
const (
	tokensPerMessage = 4
	tokensPerReply   = 3
)

// RequestTokens is what the request Summarize sends for in takes of the model's
// window: every message of it, in either shape (the prompt, the agent's messages with
// their names, tool calls and tool call ids, or the blocks, the tags and each
// transcript message's markup, counted as chars/4 like every estimate of Compactor),
// the chat format's overhead, and the completion tokens the request reserves. The pool's
// map-reduce sizes chunks with it, so a chunk's "part i of n" line, instructions and
// previous summary are counted too.
func (s *Summarizer) RequestTokens(in summary.Input) int {
	req, _ := s.request(in)
	//lint:ignore SA1019 reads back the cap request set, in whichever field it went
	n := tokensPerReply + req.MaxCompletionTokens + req.MaxTokens
	for i := range req.Messages {
		n += messageTokens(&req.Messages[i])
	}
	return n
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
