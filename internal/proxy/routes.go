package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// The APIs the proxy speaks, by the Name of their wire.
const (
	// APIOpenAI is OpenAI Chat Completions: POST /v1/chat/completions.
	APIOpenAI = "openai"
	// APIAnthropic is Anthropic Messages: POST /v1/messages.
	APIAnthropic = "anthropic"
	// APIResponses is the OpenAI Responses API: POST /v1/responses.
	APIResponses = "responses"
	// APIGemini is the Gemini API: POST /v1beta/models/<model>:generateContent and
	// :streamGenerateContent.
	APIGemini = "gemini"
)

// ConversationPathPrefix starts a base URL that names the conversation for clients
// that send no id: http://proxy/c/<conversation>/... . The prefix is stripped before the
// request is routed and forwarded.
const ConversationPathPrefix = "/c/"

// httpRoute is where a request goes: the API whose wire rewrites it (rewrite says
// whether it does: a POST of the API's conversation path) and whose error shape it is
// answered in, and the upstream it is sent to. Every other request passes through
// unchanged.
type httpRoute struct {
	api, upstream string
	rewrite       bool
	// compact: the API's own compaction endpoint (POST /v1/responses/compact),
	// answered from Compactor's summary.
	compact bool
}

// routeOf is r's route: the API by the path, the upstream by the API, but for a request
// carrying another provider's credential: one with an Anthropic key (x-api-key) goes
// to the Anthropic upstream, one with a Gemini key (x-goog-api-key) to the Gemini
// upstream, whatever its path. An anthropic-version header, which is no credential,
// routes only a path of no API of its own (an Anthropic client's GET /v1/models): a
// Chat Completions or Responses request carrying one goes to the OpenAI-compatible
// upstream with its Authorization. A key never goes to another provider.
func routeOf(r *http.Request) httpRoute {
	p, post := r.URL.Path, r.Method == http.MethodPost
	var rt httpRoute
	switch {
	case p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/"):
		rt = httpRoute{api: APIAnthropic, rewrite: post && p == "/v1/messages"}
	case isGeminiPath(p):
		rt = httpRoute{api: APIGemini, rewrite: post && geminiMethod(p) != ""}
	case p == "/v1/chat/completions":
		rt = httpRoute{api: APIOpenAI, rewrite: post}
	case p == "/v1/responses/compact":
		rt = httpRoute{api: APIResponses, rewrite: post, compact: post}
	case p == "/v1/responses" || strings.HasPrefix(p, "/v1/responses/"):
		rt = httpRoute{api: APIResponses, rewrite: post && p == "/v1/responses"}
	default:
		rt = httpRoute{api: APIOpenAI}
	}
	// owned: the path is one API's own (its conversation path, or under it), so the
	// path, not a header that is no credential, says where it goes.
	owned := rt.rewrite || rt.api != APIOpenAI || p == "/v1/chat/completions"
	rt.upstream = rt.api
	if rt.api == APIResponses {
		rt.upstream = APIOpenAI
	}
	switch {
	case r.Header.Get("X-Api-Key") != "" || !owned && r.Header.Get("Anthropic-Version") != "":
		rt.upstream = APIAnthropic
	case r.Header.Get("X-Goog-Api-Key") != "":
		rt.upstream = APIGemini
	}
	switch {
	case (rt.api == APIAnthropic || rt.api == APIGemini) && rt.upstream != rt.api:
		// Another provider's key on this API's path: passed through to that provider.
		rt.rewrite, rt.compact = false, false
	case !rt.rewrite && rt.upstream != APIOpenAI:
		rt.api = rt.upstream // a passthrough is answered in its provider's error shape
	}
	return rt
}

// isGeminiPath says a path is the Gemini API's: under /v1beta/ or /v1alpha/, or one of
// Gemini's model methods under /v1/models/ (/v1/models/<model>:generateContent). An
// OpenAI path under /v1/models/ may hold colons too (a fine-tuned model's id,
// ft:<base>:<org>::<id>), but never ends in one of those methods.
func isGeminiPath(p string) bool {
	if strings.HasPrefix(p, "/v1beta/") || strings.HasPrefix(p, "/v1alpha/") || strings.HasPrefix(p, "/upload/v1beta/") {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/v1/models/")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, ':')
	return i >= 0 && geminiModelMethods[rest[i+1:]]
}

// geminiModelMethods are the Gemini API's methods of a model.
var geminiModelMethods = map[string]bool{"generateContent": true, "streamGenerateContent": true, "countTokens": true,
	"embedContent": true, "batchEmbedContents": true, "batchGenerateContent": true}

// geminiMethod is "generateContent" or "streamGenerateContent" for a path that calls a
// model's method of that name, "" otherwise.
func geminiMethod(p string) string {
	i := strings.LastIndexByte(p, ':')
	if i < 0 || !strings.Contains(p[:i], "/models/") {
		return ""
	}
	switch m := p[i+1:]; m {
	case "generateContent", "streamGenerateContent":
		return m
	}
	return ""
}

// errConversationPath is a /c/ prefix whose conversation is not a valid id, or one that
// differs from the request's ConversationHeader.
var errConversationPath = errors.New("bad conversation path")

// cleanPath resolves the dot segments of r's path (path.Clean, keeping a trailing
// slash), so that no request reaches the upstream's host outside the upstream's base
// path.
func cleanPath(r *http.Request) {
	p := r.URL.Path
	if !hasDotSegment(p) {
		return
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	r.URL.Path, r.URL.RawPath = c, ""
}

// hasDotSegment says p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// stripConversationPath takes the /c/<conversation> prefix off r's path: the
// conversation becomes r's ConversationHeader, and the rest of the path is routed and
// forwarded as if the prefix were not there (also when the prefix is refused, so that
// the refusal is in the shape of the API of the rest). A request without the prefix is
// left as it is.
func stripConversationPath(r *http.Request) error {
	rest, ok := strings.CutPrefix(r.URL.Path, ConversationPathPrefix)
	if !ok {
		return nil
	}
	conv, path, _ := strings.Cut(rest, "/")
	r.URL.Path = "/" + path
	r.URL.RawPath = ""
	if err := schemas.ValidateConversationID(conv); err != nil {
		return fmt.Errorf("%w: %s<conversation>: %v", errConversationPath, ConversationPathPrefix, err)
	}
	if h := r.Header.Get(ConversationHeader); h != "" && h != conv {
		return fmt.Errorf("%w: the path names conversation %q and the header %s names %q", errConversationPath, conv, ConversationHeader, h)
	}
	r.Header.Set(ConversationHeader, conv)
	return nil
}

// errorBody is the body of an error of the proxy's own in the shape of api's wire (the
// OpenAI shape when the proxy has no wire for it).
func (s *Server) errorBody(api string, status int, kind, msg string) []byte {
	if w := s.wires[api]; w != nil {
		return w.ErrorBody(status, kind, msg)
	}
	return fallbackWire{}.ErrorBody(status, kind, msg)
}

// fallbackWire gives the error shapes of the APIs the proxy has no wire for.
type fallbackWire struct{}

func (fallbackWire) ErrorBody(status int, kind, msg string) []byte {
	b, _ := wire.MarshalNoEscape(map[string]any{"error": map[string]any{"message": msg, "type": kind, "param": nil, "code": nil}})
	return b
}

// writeError writes an error of the proxy's own in api's shape.
func (s *Server) writeError(w http.ResponseWriter, api string, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(s.errorBody(api, status, kind, msg))
}
