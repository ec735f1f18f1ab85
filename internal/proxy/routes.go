package proxy

import (
	"errors"
	"fmt"
	"net/http"
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

// routeOf is r's httpRoute. A request an Anthropic client made (its x-api-key or
// anthropic-version header) goes to the Anthropic upstream whatever its path, and one
// with a Gemini key (x-goog-api-key) to the Gemini upstream: a key never goes to another
// provider.
func routeOf(r *http.Request) httpRoute {
	p, post := r.URL.Path, r.Method == http.MethodPost
	switch {
	case p == "/v1/messages" || strings.HasPrefix(p, "/v1/messages/"):
		return httpRoute{api: APIAnthropic, upstream: APIAnthropic, rewrite: post && p == "/v1/messages"}
	case isGeminiPath(p):
		return httpRoute{api: APIGemini, upstream: APIGemini, rewrite: post && geminiMethod(p) != ""}
	}
	up := APIOpenAI
	switch {
	case r.Header.Get("X-Api-Key") != "" || r.Header.Get("Anthropic-Version") != "":
		up = APIAnthropic
	case r.Header.Get("X-Goog-Api-Key") != "":
		up = APIGemini
	}
	switch {
	case p == "/v1/chat/completions":
		return httpRoute{api: APIOpenAI, upstream: up, rewrite: post}
	case p == "/v1/responses/compact":
		return httpRoute{api: APIResponses, upstream: up, rewrite: post, compact: post}
	case p == "/v1/responses" || strings.HasPrefix(p, "/v1/responses/"):
		return httpRoute{api: APIResponses, upstream: up, rewrite: post && p == "/v1/responses"}
	}
	return httpRoute{api: up, upstream: up}
}

// isGeminiPath says a path is the Gemini API's: under /v1beta/ or /v1alpha/, or a
// model's method under /v1/models/ (/v1/models/<model>:generateContent), which
// OpenAI's paths never are.
func isGeminiPath(p string) bool {
	if strings.HasPrefix(p, "/v1beta/") || strings.HasPrefix(p, "/v1alpha/") || strings.HasPrefix(p, "/upload/v1beta/") {
		return true
	}
	rest, ok := strings.CutPrefix(p, "/v1/models/")
	return ok && strings.Contains(rest, ":")
}

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
