package llm

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/compactor/compactor/schemas/policy"
)

// Defaults of Config.
const (
	DefaultModel   = "gpt-4o-mini"
	DefaultTimeout = 2 * time.Minute
)

// The request fields that can carry the completion cap (Config.MaxTokensField).
const (
	// FieldMaxTokens is "max_tokens", which OpenAI deprecated but vLLM, llama.cpp,
	// Ollama, LiteLLM and older Azure deployments still read. The default.
	FieldMaxTokens = "max_tokens"
	// FieldMaxCompletionTokens is "max_completion_tokens", which OpenAI's newer models
	// want (and its reasoning models require).
	FieldMaxCompletionTokens = "max_completion_tokens"
)

// Config is the endpoint and model one Summarizer uses.
type Config struct {
	// BaseURL is the endpoint's root. Both "http://host:port" and "http://host:port/v1"
	// are accepted: a URL without a path gets "/v1" appended; any other path is used as
	// given (e.g. "https://api.groq.com/openai/v1"), without a trailing slash and without
	// a trailing "/chat/completions" if one was pasted. Required.
	BaseURL string
	// APIKey is sent as a bearer token; empty for endpoints without authentication.
	APIKey string
	// Model is the model asked for; default DefaultModel.
	Model string
	// Timeout bounds one summarization, on top of the caller's context; default
	// DefaultTimeout.
	Timeout time.Duration
	// Temperature is the sampling temperature, 0 to 2. Zero is not sent, so the
	// endpoint's default applies (reasoning models accept only that or 1).
	Temperature float32
	// MaxTokensField is the request field that carries the completion cap:
	// FieldMaxTokens (default; "" means it) or FieldMaxCompletionTokens. Models go-openai knows as
	// reasoning models (o1, o3, o4, gpt-5, …) get max_completion_tokens either way.
	MaxTokensField string
	// RequestShape is how a request is laid out: ShapePrefix (default; "" means it),
	// the agent's own messages then the instruction, so prefix caching applies; or
	// ShapeTranscript, the prompt as system message and everything to summarize in one
	// user message, for endpoints that refuse tool messages without tool definitions.
	RequestShape string
}

// WithDefaults returns c with its zero Model, Timeout, MaxTokensField and RequestShape
// set to the defaults.
func (c Config) WithDefaults() Config {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxTokensField == "" {
		c.MaxTokensField = FieldMaxTokens
	}
	if c.RequestShape == "" {
		c.RequestShape = ShapePrefix
	}
	return c
}

// Validate checks c as it is (New applies WithDefaults first). Errors match ErrConfig.
func (c Config) Validate() error {
	if _, err := c.endpoint(); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(c.Model) == "":
		return fmt.Errorf("%w: model must not be empty", ErrConfig)
	case c.Timeout < 0:
		return fmt.Errorf("%w: timeout must not be negative, got %s", ErrConfig, c.Timeout)
	case c.Temperature < 0 || c.Temperature > 2:
		return fmt.Errorf("%w: temperature must be between 0 and 2, got %g", ErrConfig, c.Temperature)
	case c.MaxTokensField != "" && c.MaxTokensField != FieldMaxTokens && c.MaxTokensField != FieldMaxCompletionTokens:
		return fmt.Errorf("%w: max tokens field must be %s or %s, got %q", ErrConfig, FieldMaxTokens, FieldMaxCompletionTokens, c.MaxTokensField)
	case c.RequestShape != "" && c.RequestShape != ShapePrefix && c.RequestShape != ShapeTranscript:
		return fmt.Errorf("%w: request shape must be %s or %s, got %q", ErrConfig, ShapePrefix, ShapeTranscript, c.RequestShape)
	}
	return nil
}

// String shows c without its secrets: the key only as set or not, the endpoint without
// its credentials, query and fragment. fmt uses it for every verb (GoString for %#v), so
// a Config in a log line or an error shows no secret.
func (c Config) String() string {
	key := "none"
	if c.APIKey != "" {
		key = "set"
	}
	return fmt.Sprintf("{base url %s, api key %s, model %s, timeout %s, temperature %g, max tokens field %s, request shape %s}",
		redactURL(c.BaseURL), key, c.Model, c.Timeout, c.Temperature, c.MaxTokensField, c.RequestShape)
}

// GoString is String, for %#v.
func (c Config) GoString() string { return "llm.Config" + c.String() }

// redactURL is s for logs and errors: policy.RedactURL (no credentials, no query),
// without a fragment either.
func redactURL(s string) string {
	r, _, _ := strings.Cut(policy.RedactURL(s), "#")
	return r
}

// endpoint is BaseURL as go-openai wants it: the URL its "/chat/completions" is
// appended to. Its errors show the URL only through RedactURL: a base URL may carry a
// password, or a key in its query.
func (c Config) endpoint() (string, error) {
	if c.BaseURL == "" {
		return "", fmt.Errorf("%w: base url is required (e.g. https://api.openai.com/v1)", ErrConfig)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		// url.Parse's error quotes the whole URL; its cause alone does not.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("%w: base url cannot be parsed: %v", ErrConfig, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w: base url %q must start with http:// or https://", ErrConfig, redactURL(c.BaseURL))
	case u.Host == "":
		return "", fmt.Errorf("%w: base url %q has no host", ErrConfig, redactURL(c.BaseURL))
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("%w: base url %q must not have a query or a fragment", ErrConfig, redactURL(c.BaseURL))
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/chat/completions")
	if p == "" {
		p = "/v1"
	}
	u.Path, u.RawPath = p, ""
	return u.String(), nil
}
