package eval

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/schemas"
)

// The probe questions, asked of the model after the compacted final context.
const (
	QuestionFiles   = "Which files were changed in this conversation? List every file path, one per line, and nothing else."
	QuestionDecided = "What was decided or concluded in this conversation? Answer in a few sentences."
	QuestionAsked   = "What did the user ask for in this conversation? Answer in a few sentences."
)

// chatCompleter is what the probes need of an LLM client; *openai.Client has it.
type chatCompleter interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Prober asks the probe questions of a model, given a final context.
type Prober struct {
	Client chatCompleter
	Model  string
	// MaxTokens caps each answer (0: 512).
	MaxTokens int
	// MaxCompletionTokens sends the cap as max_completion_tokens instead of max_tokens
	// (policy key llm_max_tokens_field); reasoning models always get it.
	MaxCompletionTokens bool
}

// reasoningModel reports whether go-openai knows model as one that refuses max_tokens.
func reasoningModel(model string) bool {
	//lint:ignore SA1019 probes go-openai's own check for the models that refuse max_tokens
	probe := openai.ChatCompletionRequest{Model: model, MaxTokens: 1}
	return errors.Is(openai.NewReasoningValidator().Validate(probe), openai.ErrReasoningModelMaxTokensDeprecated)
}

// NewProber returns a prober for the OpenAI-compatible endpoint at baseURL.
func NewProber(baseURL, apiKey, model string) *Prober {
	c := openai.DefaultConfig(apiKey)
	if baseURL != "" {
		c.BaseURL = apiBase(baseURL)
	}
	return &Prober{Client: openai.NewClientWithConfig(c), Model: model}
}

// apiBase reads an endpoint as the summarizer does (llm.Config.BaseURL): a URL without
// a path gets /v1, a pasted /chat/completions is cut.
func apiBase(base string) string {
	base = strings.TrimSuffix(strings.TrimRight(base, "/"), "/chat/completions")
	if u, err := url.Parse(base); err == nil && strings.Trim(u.Path, "/") == "" {
		return strings.TrimRight(base, "/") + "/v1"
	}
	return base
}

// ProbeScores are one conversation's probe scores, each 0 to 1 (-1: not applicable,
// e.g. files when the agent changed none).
type ProbeScores struct {
	FilesRecall    float64   `json:"files_recall"`
	FilesPrecision float64   `json:"files_precision"`
	Decided        float64   `json:"decided"`
	Asked          float64   `json:"asked"`
	Answers        [3]string `json:"answers"`
}

// ProbeSummary is the mean of each score over the conversations it applies to.
type ProbeSummary struct {
	FilesRecall    float64 `json:"files_recall"`
	FilesPrecision float64 `json:"files_precision"`
	Decided        float64 `json:"decided"`
	Asked          float64 `json:"asked"`
	// Conversations is how many were probed; Failed how many probes failed (the
	// endpoint refused or failed).
	Conversations int `json:"conversations"`
	Failed        int `json:"failed"`
}

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 64 << 10

// Probe asks the three questions of the model given ctxMsgs, and scores the answers
// against truth (see ScoreFiles and ScoreTerms).
func (p *Prober) Probe(ctx context.Context, ctxMsgs []schemas.Message, truth Truth) (ProbeScores, error) {
	var s ProbeScores
	base := make([]openai.ChatCompletionMessage, 0, len(ctxMsgs)+1)
	for i := range ctxMsgs {
		base = append(base, toOpenAI(&ctxMsgs[i]))
	}
	for i, q := range []string{QuestionFiles, QuestionDecided, QuestionAsked} {
		msgs := append(base[:len(base):len(base)], openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: q})
		maxTokens := p.MaxTokens
		if maxTokens == 0 {
			maxTokens = 512
		}
		req := openai.ChatCompletionRequest{Model: p.Model, Messages: msgs}
		if p.MaxCompletionTokens || reasoningModel(p.Model) {
			req.MaxCompletionTokens = maxTokens
		} else {
			//lint:ignore SA1019 deliberate, as the summarizer does: OpenAI-compatible servers (vLLM, llama.cpp, older Azure) read only max_tokens.
			req.MaxTokens = maxTokens
		}
		resp, err := p.Client.CreateChatCompletion(ctx, req)
		if err != nil {
			return s, fmt.Errorf("probe %q: %w", q, err)
		}
		if len(resp.Choices) == 0 {
			return s, fmt.Errorf("probe %q: the model answered no choice", q)
		}
		a := resp.Choices[0].Message.Content
		if len(a) > maxAnswerBytes {
			a = a[:maxAnswerBytes]
		}
		s.Answers[i] = a
	}
	s.FilesRecall, s.FilesPrecision = ScoreFiles(truth.Changed, s.Answers[0])
	s.Decided = ScoreTerms(truth.FinalTerms, s.Answers[1])
	s.Asked = ScoreTerms(truth.UserTerms, s.Answers[2])
	return s, nil
}

// toOpenAI is a context message as the chat API takes it.
func toOpenAI(m *schemas.Message) openai.ChatCompletionMessage {
	out := openai.ChatCompletionMessage{Role: string(m.Role), Content: m.Content.String(), Name: m.Name, ToolCallID: m.ToolCallID}
	for _, tc := range m.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, openai.ToolCall{ID: tc.ID, Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}})
	}
	return out
}

// ScoreFiles scores an answer naming the changed files: recall is the share of the
// changed paths the answer names (the path, or its base name when that is unique
// among the changed ones), precision the share of the paths in the answer that are
// changed ones (by the same match). Both are -1 when nothing was changed.
func ScoreFiles(changed []string, answer string) (recall, precision float64) {
	if len(changed) == 0 {
		return -1, -1
	}
	named := answerPaths(answer)
	bases := map[string]int{}
	for _, c := range changed {
		bases[path.Base(c)]++
	}
	match := func(c, a string) bool {
		if !strings.Contains(a, "/") {
			return path.Base(c) == a && bases[a] == 1
		}
		return c == a || strings.HasSuffix(c, "/"+a) || strings.HasSuffix(a, "/"+c)
	}
	hit := 0
	for _, c := range changed {
		for _, a := range named {
			if match(c, a) {
				hit++
				break
			}
		}
	}
	good := 0
	for _, a := range named {
		for _, c := range changed {
			if match(c, a) {
				good++
				break
			}
		}
	}
	recall = float64(hit) / float64(len(changed))
	if len(named) > 0 {
		precision = float64(good) / float64(len(named))
	}
	return recall, precision
}

// answerPaths are the path-like words of an answer, in order, distinct.
func answerPaths(answer string) []string {
	s := newSet()
	for _, w := range strings.FieldsFunc(answer, func(r rune) bool { return unicode.IsSpace(r) || r == '`' || r == '*' || r == '"' }) {
		if p := cleanPath(w); p != "" {
			s.add(p)
		}
	}
	return s.list
}

// ScoreTerms is the share of terms the answer holds as words (case-insensitive);
// -1 when there are no terms.
func ScoreTerms(terms []string, answer string) float64 {
	if len(terms) == 0 {
		return -1
	}
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(answer), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_'
	}) {
		words[w] = true
	}
	n := 0
	for _, t := range terms {
		if words[t] {
			n++
		}
	}
	return float64(n) / float64(len(terms))
}

// summarize is the mean of each applicable score.
func summarize(ps []ProbeScores) *ProbeSummary {
	out := &ProbeSummary{Conversations: len(ps)}
	var n [4]int
	for _, p := range ps {
		for i, v := range []float64{p.FilesRecall, p.FilesPrecision, p.Decided, p.Asked} {
			if v < 0 {
				continue
			}
			n[i]++
			switch i {
			case 0:
				out.FilesRecall += v
			case 1:
				out.FilesPrecision += v
			case 2:
				out.Decided += v
			case 3:
				out.Asked += v
			}
		}
	}
	div := func(v float64, k int) float64 {
		if k == 0 {
			return -1
		}
		return v / float64(k)
	}
	out.FilesRecall, out.FilesPrecision = div(out.FilesRecall, n[0]), div(out.FilesPrecision, n[1])
	out.Decided, out.Asked = div(out.Decided, n[2]), div(out.Asked, n[3])
	return out
}
