package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"slices"
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
	// Questions are a probe file's (ReadProbes), asked after the three built-in ones.
	Questions []Probe
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
	// Dimensions is the mean score of the probe file's questions per dimension (absent:
	// no question of it applied to the conversation).
	Dimensions map[string]float64 `json:"dimensions,omitempty"`
}

// ProbeSummary is the mean of each score over the conversations it applies to.
type ProbeSummary struct {
	FilesRecall    float64 `json:"files_recall"`
	FilesPrecision float64 `json:"files_precision"`
	Decided        float64 `json:"decided"`
	Asked          float64 `json:"asked"`
	// Dimensions is the mean of each dimension of the probe file over the conversations
	// it applied to (-1 for a dimension that applied to none).
	Dimensions map[string]float64 `json:"dimensions,omitempty"`
	// Conversations is how many were probed; Failed how many probes failed (the
	// endpoint refused or failed).
	Conversations int `json:"conversations"`
	Failed        int `json:"failed"`
}

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 64 << 10

// Probe asks the three questions of the model given ctxMsgs, and scores the answers
// against truth (see ScoreFiles and ScoreTerms); then the questions of the probe file
// (Questions) that apply to the conversation of the file named file, each
// dimension's mean in Dimensions.
func (p *Prober) Probe(ctx context.Context, ctxMsgs []schemas.Message, truth Truth, file string) (ProbeScores, error) {
	var s ProbeScores
	base := make([]openai.ChatCompletionMessage, 0, len(ctxMsgs)+1)
	for i := range ctxMsgs {
		base = append(base, toOpenAI(&ctxMsgs[i]))
	}
	for i, q := range []string{QuestionFiles, QuestionDecided, QuestionAsked} {
		a, err := p.ask(ctx, base, q)
		if err != nil {
			return s, err
		}
		s.Answers[i] = a
	}
	s.FilesRecall, s.FilesPrecision = ScoreFiles(truth.Changed, s.Answers[0])
	s.Decided = ScoreTerms(truth.FinalTerms, s.Answers[1])
	s.Asked = ScoreTerms(truth.UserTerms, s.Answers[2])
	if len(p.Questions) > 0 {
		d, err := p.askFile(ctx, base, p.Questions, file)
		if err != nil {
			return s, err
		}
		s.Dimensions = d
	}
	return s, nil
}

// ask asks q of the model after base and returns its answer (at most maxAnswerBytes).
func (p *Prober) ask(ctx context.Context, base []openai.ChatCompletionMessage, q string) (string, error) {
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
		return "", fmt.Errorf("probe %q: %w", q, err)
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("probe %q: the model answered no choice", q)
	}
	a := resp.Choices[0].Message.Content
	if len(a) > maxAnswerBytes {
		a = a[:maxAnswerBytes]
	}
	return a, nil
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
	dims, dn := map[string]float64{}, map[string]int{}
	for _, p := range ps {
		for d, v := range p.Dimensions {
			dims[d] += v
			dn[d]++
		}
	}
	if len(dn) > 0 {
		out.Dimensions = map[string]float64{}
		for _, d := range Dimensions {
			out.Dimensions[d] = div(dims[d], dn[d])
		}
	}
	return out
}

// The dimensions of a probe file's questions (Factory's four): recall of a specific
// fact from early on, the artifacts (files) touched, continuation (what comes next)
// and the decisions made.
const (
	DimensionRecall       = "recall"
	DimensionArtifact     = "artifact"
	DimensionContinuation = "continuation"
	DimensionDecision     = "decision"
)

// Dimensions lists the probe dimensions, in the order the reports print them.
var Dimensions = []string{DimensionRecall, DimensionArtifact, DimensionContinuation, DimensionDecision}

// Probe is one question of a probe file: asked of the model after a final context,
// scored as the share of Expect's terms its answer holds (ScoreTerms, each term
// lower-cased, as words).
type Probe struct {
	// Dimension is one of Dimensions.
	Dimension string   `json:"dimension"`
	Question  string   `json:"question"`
	Expect    []string `json:"expect"`
	// File, when set, limits the probe to the conversation of that file name (its base
	// name, as the report names it); empty: every conversation.
	File string `json:"file,omitempty"`
}

// Bounds of a probe file.
const (
	MaxProbes          = 200
	maxProbeFileBytes  = 1 << 20
	maxProbeQuestion   = 4000
	maxProbeExpect     = 50
	maxProbeExpectTerm = 200
)

// ReadProbes reads and validates a probe file: a JSON object {"probes": [...]}.
func ReadProbes(path string) ([]Probe, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxProbeFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxProbeFileBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrConfig, path, maxProbeFileBytes)
	}
	ps, err := ParseProbes(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// ParseProbes decodes and validates a probe file's text: unknown fields, an unknown
// dimension, an empty question or expectation, and more than MaxProbes are refused.
func ParseProbes(data []byte) ([]Probe, error) {
	var raw struct {
		Note   string  `json:"note"`
		Probes []Probe `json:"probes"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: probe file: %w", ErrConfig, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: probe file: more than one JSON document", ErrConfig)
	}
	if len(raw.Probes) == 0 || len(raw.Probes) > MaxProbes {
		return nil, fmt.Errorf("%w: probe file: want 1 to %d probes, got %d", ErrConfig, MaxProbes, len(raw.Probes))
	}
	for i, p := range raw.Probes {
		bad := func(why string) error { return fmt.Errorf("%w: probe %d: %s", ErrConfig, i+1, why) }
		switch {
		case !slices.Contains(Dimensions, p.Dimension):
			return nil, bad(fmt.Sprintf("dimension %q: want one of %s", p.Dimension, strings.Join(Dimensions, ", ")))
		case strings.TrimSpace(p.Question) == "" || len(p.Question) > maxProbeQuestion:
			return nil, bad(fmt.Sprintf("want a question of 1 to %d bytes", maxProbeQuestion))
		case len(p.Expect) == 0 || len(p.Expect) > maxProbeExpect:
			return nil, bad(fmt.Sprintf("want 1 to %d expected terms", maxProbeExpect))
		}
		for k, e := range p.Expect {
			e = strings.ToLower(strings.TrimSpace(e))
			if e == "" || len(e) > maxProbeExpectTerm || strings.ContainsFunc(e, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }) {
				return nil, bad(fmt.Sprintf("expected term %q: want one word (letters, digits, _) of 1 to %d bytes", p.Expect[k], maxProbeExpectTerm))
			}
			raw.Probes[i].Expect[k] = e
		}
	}
	return raw.Probes, nil
}

// askFile asks the probes of a probe file that apply to the conversation named file,
// given base, and returns each dimension's mean score (absent: no probe of it applied).
func (p *Prober) askFile(ctx context.Context, base []openai.ChatCompletionMessage, probes []Probe, file string) (map[string]float64, error) {
	sums, ns := map[string]float64{}, map[string]int{}
	for _, pr := range probes {
		if pr.File != "" && pr.File != file {
			continue
		}
		a, err := p.ask(ctx, base, pr.Question)
		if err != nil {
			return nil, err
		}
		sums[pr.Dimension] += ScoreTerms(pr.Expect, a)
		ns[pr.Dimension]++
	}
	if len(ns) == 0 {
		return nil, nil
	}
	for d := range sums {
		sums[d] /= float64(ns[d])
	}
	return sums, nil
}
