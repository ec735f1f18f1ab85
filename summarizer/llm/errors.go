package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/compactor/compactor/summarizer/summary"
)

var (
	// ErrConfig is matched by every configuration error of this package.
	ErrConfig = errors.New("invalid llm summarizer config")
	// ErrEmptySummary means the endpoint answered without a summary (no choice, or empty
	// content). Such an answer is never a summary; asking again may give one.
	ErrEmptySummary = errors.New("llm returned an empty summary")
	// ErrSummaryTruncated means the model stopped at the token cap (finish reason
	// "length"): the answer is a cut-off summary, missing its last sections, and is
	// not returned as one. Asking again may give a shorter one.
	ErrSummaryTruncated = errors.New("llm summary cut off at the token cap")
	// ErrContextLength means the endpoint refused the request as longer than the model's
	// context window. Asking again with the same input cannot succeed: summarize fewer
	// messages or cut them further.
	ErrContextLength = summary.ErrContextLength
)

// Retryable reports whether asking again may succeed after err: true for network
// errors, timeouts, cancellations, HTTP 408, 409, 425, 429 and 5xx, ErrEmptySummary,
// ErrSummaryTruncated and errors it cannot classify (the worker's attempts are bounded); false for nil,
// ErrContextLength, ErrConfig, any other HTTP 4xx (400, 401, 403, 404, 422, …) and
// requests the go-openai client refuses before sending them.
func Retryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrContextLength), errors.Is(err, ErrConfig):
		return false
	case errors.Is(err, ErrEmptySummary), errors.Is(err, ErrSummaryTruncated):
		return true
	}
	if status := httpStatus(err); status != 0 {
		switch status {
		case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
			return true
		}
		return status >= 500
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.As(err, &netErr):
		return true
	case errors.Is(err, openai.ErrChatCompletionInvalidModel),
		errors.Is(err, openai.ErrChatCompletionStreamNotSupported),
		errors.Is(err, openai.ErrReasoningModelMaxTokensDeprecated),
		errors.Is(err, openai.ErrReasoningModelLimitationsLogprobs),
		errors.Is(err, openai.ErrReasoningModelLimitationsOther),
		errors.Is(err, openai.ErrReasoningEffortUnsupported),
		errors.Is(err, openai.ErrReasoningSamplingUnsupported),
		errors.Is(err, openai.ErrReasoningToolsRequireResponses):
		return false
	}
	return true
}

// httpStatus is the HTTP status of a failed call, or 0 when there was no response.
func httpStatus(err error) int {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0 {
		return apiErr.HTTPStatusCode
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		return reqErr.HTTPStatusCode
	}
	return 0
}

// isContextLength reports whether the endpoint refused the request for its length: an
// API error with code "context_length_exceeded", an HTTP 400 whose message or body says
// so in the words OpenAI, vLLM, llama.cpp and others use, or an HTTP 413 (the request
// body is too large).
func isContextLength(err error) bool {
	if httpStatus(err) == http.StatusRequestEntityTooLarge {
		return true
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		if code, ok := apiErr.Code.(string); ok && code == "context_length_exceeded" {
			return true
		}
		if s := apiErr.HTTPStatusCode; s == 0 || s == http.StatusBadRequest {
			if saysContextLength(apiErr.Message) || saysContextLength(apiErr.Type) {
				return true
			}
		}
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		if reqErr.HTTPStatusCode == http.StatusBadRequest {
			return saysContextLength(string(reqErr.Body))
		}
	}
	return false
}

var contextLengthPhrases = []string{
	"context_length_exceeded",
	"maximum context length",
	"context length exceeded",
	"exceeds the context length",
	"exceed_context_size",
	"exceeds the available context size",
	"context window",
	"prompt is too long",
	"input is too long",
}

func saysContextLength(s string) bool {
	s = strings.ToLower(s)
	for _, p := range contextLengthPhrases {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// MaxRetryAfter bounds the wait an endpoint may ask for: a longer Retry-After counts as
// this long.
const MaxRetryAfter = time.Hour

// callError is every error Summarize returns: err, with the summarizer's secrets (the
// key, the base URL's password) cut from its text, since that text reaches logs, events
// and dead letters, and an endpoint may echo what it was sent. errors.Is and errors.As
// see err as it is. retryAfter is the wait the endpoint asked for, 0 when it did not.
type callError struct {
	err        error
	secrets    []string
	retryAfter time.Duration
	// window and requested are what a refusal for length said of the model's window
	// and of the request, in the model's tokens (0 when it did not say).
	window, requested int
}

func (e *callError) Error() string {
	msg := e.err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	if e.retryAfter > 0 {
		msg += fmt.Sprintf(" (the endpoint asked to retry after %s)", e.retryAfter)
	}
	return msg
}

func (e *callError) Unwrap() error { return e.err }

// RetryAfter is how long the endpoint asked the caller to wait before asking again
// (its Retry-After or retry-after-ms header, at most MaxRetryAfter), 0 when it did not
// ask. The worker pool finds it through errors.As with an interface of this one method,
// and waits at least this long before the next attempt.
func (e *callError) RetryAfter() time.Duration { return e.retryAfter }

// ContextLimit is what the endpoint said when it refused a request as too long
// (ErrContextLength): the model's window and the size of the request, in the model's
// tokens; either is 0 when the refusal did not say. The worker pool finds it through
// errors.As with an interface of this one method, and sizes its next requests by it.
func (e *callError) ContextLimit() (window, requested int) { return e.window, e.requested }

// contextLimitPatterns read a refusal's numbers in the words OpenAI, vLLM, llama.cpp,
// Anthropic-compatible proxies and others use. Each names which of its groups is the
// window and which the request (0: none). Only counts said to be tokens are read.
var contextLimitPatterns = []struct {
	re                *regexp.Regexp
	window, requested int
}{
	// OpenAI, vLLM, LiteLLM: "This model's maximum context length is 8192 tokens.
	// However, you requested 9000 tokens (…)" or "… your messages resulted in 9000 tokens".
	{regexp.MustCompile(`(?i)maximum context length is (\d+) tokens`), 1, 0},
	{regexp.MustCompile(`(?i)(?:requested|resulted in) (\d+) tokens`), 0, 1},
	// llama.cpp: "request (9000 tokens) exceeds the available context size (8192 tokens)".
	{regexp.MustCompile(`(?i)request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)`), 2, 1},
	{regexp.MustCompile(`(?i)context size \((\d+) tokens\)`), 1, 0},
	// Anthropic's wording: "prompt is too long: 210000 tokens > 200000 maximum".
	{regexp.MustCompile(`(?i)(\d+) tokens > (\d+) maximum`), 2, 1},
}

// contextLimit reads the model's window and the request's size from the text of a
// refusal for length (its message, or the body of a response go-openai could not read
// as an error); 0 for what it does not say.
func contextLimit(err error) (window, requested int) {
	text := err.Error()
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		text += " " + string(reqErr.Body)
	}
	for _, p := range contextLimitPatterns {
		m := p.re.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		if p.window > 0 && window == 0 {
			window, _ = strconv.Atoi(m[p.window])
		}
		if p.requested > 0 && requested == 0 {
			requested, _ = strconv.Atoi(m[p.requested])
		}
	}
	return window, requested
}

// RetryAfter is the wait the endpoint asked for with a failed call's error (see
// callError.RetryAfter): ok is false when it asked for none.
func RetryAfter(err error) (d time.Duration, ok bool) {
	var hint interface{ RetryAfter() time.Duration }
	if errors.As(err, &hint) && hint.RetryAfter() > 0 {
		return hint.RetryAfter(), true
	}
	return 0, false
}

// retryAfterHeader reads the wait a failed response asks for: retry-after-ms (OpenAI,
// Azure; milliseconds), else Retry-After (seconds or an HTTP date), capped at
// MaxRetryAfter; 0 when neither is there or readable.
func retryAfterHeader(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			d = time.Duration(min(ms, float64(MaxRetryAfter/time.Millisecond)) * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); d == 0 && v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			if s > 0 {
				d = time.Duration(min(s, MaxRetryAfter.Seconds()) * float64(time.Second))
			}
		} else if at, err := http.ParseTime(v); err == nil {
			d = at.Sub(now)
		}
	}
	return min(max(d, 0), MaxRetryAfter)
}

// retryAfterKey keys the *time.Duration in a call's context where retryAfterDoer puts
// the wait a failed response asked for.
type retryAfterKey struct{}

// retryAfterDoer is the HTTP client of go-openai, which keeps no header of a failed
// response: it notes the wait such a response asks for in the request's context.
type retryAfterDoer struct {
	client *http.Client
}

func (d retryAfterDoer) Do(req *http.Request) (*http.Response, error) {
	resp, err := d.client.Do(req)
	if err == nil && resp.StatusCode >= http.StatusBadRequest {
		if p, ok := req.Context().Value(retryAfterKey{}).(*time.Duration); ok {
			*p = retryAfterHeader(resp.Header, time.Now())
		}
	}
	return resp, err
}

// The kinds of failed calls ErrorKind tells apart. The set is closed: metrics may use
// them as label values.
const (
	KindTimeout       = "timeout"        // the call's deadline passed, or HTTP 408 or 504
	KindCanceled      = "canceled"       // the caller gave up (a drain that timed out)
	KindRateLimited   = "rate_limited"   // HTTP 429
	KindAuth          = "auth"           // HTTP 401 or 403: the key is wrong or lacks the right
	KindNotFound      = "not_found"      // HTTP 404: a wrong base URL or model
	KindContextLength = "context_length" // the request is too long for the model (ErrContextLength)
	KindBadRequest    = "bad_request"    // any other HTTP 4xx, or a request the client refused to send
	KindServer        = "server"         // HTTP 5xx
	KindNetwork       = "network"        // no HTTP answer: refused, reset, DNS, TLS
	KindEmpty         = "empty"          // an answer without a summary (ErrEmptySummary)
	KindTruncated     = "truncated"      // a summary cut off at the token cap (ErrSummaryTruncated)
	KindOther         = "other"          // none of the above
)

// ErrorKinds lists every kind ErrorKind returns.
var ErrorKinds = []string{KindTimeout, KindCanceled, KindRateLimited, KindAuth, KindNotFound, KindContextLength,
	KindBadRequest, KindServer, KindNetwork, KindEmpty, KindTruncated, KindOther}

// ErrorKind says what kind of failure err, an error of Summarize, is: one of
// ErrorKinds. It is "" for nil.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrContextLength):
		return KindContextLength
	case errors.Is(err, ErrEmptySummary):
		return KindEmpty
	case errors.Is(err, ErrSummaryTruncated):
		return KindTruncated
	}
	switch status := httpStatus(err); {
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return KindTimeout
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return KindAuth
	case status == http.StatusNotFound:
		return KindNotFound
	case status >= 500:
		return KindServer
	case status >= 400:
		return KindBadRequest
	case status != 0:
		return KindOther
	}
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.As(err, &netErr) && netErr.Timeout():
		return KindTimeout
	case errors.As(err, &netErr):
		return KindNetwork
	case errors.Is(err, ErrConfig), !Retryable(err):
		return KindBadRequest // refused by the client before it was sent
	}
	return KindOther
}
