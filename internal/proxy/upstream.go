package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
)

// upstream is one model endpoint the proxy forwards to: its base URL and the
// operator's key for it ("" forwards the client's own credential).
type upstream struct {
	base *url.URL
	key  string
	// api is the API whose credential the key replaces: APIAnthropic's goes in
	// x-api-key, APIGemini's in x-goog-api-key (and the ?key= query is dropped), any
	// other is a Bearer Authorization.
	api string
}

// parseUpstream checks an upstream base URL: http or https, with a host.
func parseUpstream(setting, raw, key, api string) (upstream, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return upstream{}, fmt.Errorf("%s: %q is not an http:// or https:// URL with a host", setting, raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return upstream{base: u, key: key, api: api}, nil
}

// String is the upstream's base URL as logged: without its user information (a
// credential) or query.
func (u upstream) String() string {
	t := *u.base
	t.User = nil
	return t.String()
}

// defaultUpstreams are the public APIs the proxy forwards to when no upstream is set.
var defaultUpstreams = map[string]string{APIOpenAI: "https://api.openai.com", APIAnthropic: "https://api.anthropic.com",
	APIGemini: "https://generativelanguage.googleapis.com"}

// upstreamSettings are the settings naming each API's upstream.
var upstreamSettings = map[string]string{APIOpenAI: "COMPACTOR_PROXY_UPSTREAM", APIAnthropic: "COMPACTOR_PROXY_ANTHROPIC_UPSTREAM",
	APIGemini: "COMPACTOR_PROXY_GEMINI_UPSTREAM"}

// causeOf is the text of an upstream request's error for a log line: the transport's
// cause (a refused connection, a timeout, a TLS failure) without the request URL, which
// may carry a key in its query, and with every secret of secrets taken out.
func causeOf(err error, secrets ...string) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	text := err.Error()
	for _, sec := range secrets {
		if len(sec) >= 4 {
			text = strings.ReplaceAll(text, sec, "[redacted]")
		}
	}
	return text
}

// requestSecrets are the credentials a client request carries (its headers' and its
// ?key=), to be kept out of log lines.
func requestSecrets(r *http.Request) []string {
	out := []string{r.URL.Query().Get("key")}
	for _, h := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key"} {
		v := r.Header.Get(h)
		out = append(out, v, strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")))
	}
	return out
}

// target is where a request for path and query goes: the base's path with the request
// path appended.
func (u upstream) target(path, rawQuery string) *url.URL {
	t := *u.base
	t.Path = u.base.Path + path
	t.RawPath = ""
	t.RawQuery = rawQuery
	return &t
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1), never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHop deletes the hop-by-hop headers of h, those its Connection header names
// included.
func removeHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// forwardHeaders is the header of a request sent to u: the client's headers (its
// credential, anthropic-version, anthropic-beta, OpenAI-Organization, OpenAI-Project,
// ...) less the hop-by-hop ones and the proxy's own, with the operator's key in place
// of the client's credential when one is configured.
func (u upstream) forwardHeaders(in http.Header) http.Header {
	h := in.Clone()
	removeHop(h)
	h.Del(ConversationHeader)
	h.Del("Host")
	h.Del("Content-Length")
	u.credentials(h)
	return h
}

// credentials replaces the client's credential in h with the operator's key, when
// one is configured for u.
func (u upstream) credentials(h http.Header) {
	if u.key == "" {
		return
	}
	h.Del("Authorization")
	h.Del("X-Api-Key")
	h.Del("X-Goog-Api-Key")
	switch u.api {
	case APIAnthropic:
		h.Set("X-Api-Key", u.key)
	case APIGemini:
		h.Set("X-Goog-Api-Key", u.key)
	default:
		h.Set("Authorization", "Bearer "+u.key)
	}
}

// query is the query a request with rawQuery is sent upstream with: as the client sent
// it, but a Gemini client's ?key= when the operator's key replaces it.
func (u upstream) query(rawQuery string) string {
	if u.key == "" || u.api != APIGemini || !strings.Contains(rawQuery, "key=") {
		return rawQuery
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return rawQuery
	}
	q.Del("key")
	return q.Encode()
}

// newRequest is the upstream request of a client request r, with body. It carries r's
// context: a client that goes away cancels it.
func (u upstream) newRequest(r *http.Request, body []byte) (*http.Request, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.target(r.URL.Path, u.query(r.URL.RawQuery)).String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header = u.forwardHeaders(r.Header)
	// The transport asks for gzip itself and decompresses, so the reply can be read.
	out.Header.Del("Accept-Encoding")
	out.ContentLength = int64(len(body))
	out.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return out, nil
}

// copyResponseHeaders copies an upstream response's headers to the client's (status
// text, retry-after, x-ratelimit-*, request ids...), less the hop-by-hop ones and the
// length, which the body written decides.
func copyResponseHeaders(dst, src http.Header) {
	h := src.Clone()
	removeHop(h)
	h.Del("Content-Length")
	for k, vs := range h {
		dst[k] = vs
	}
}

// passthroughKey is the context key of the reason a passed-through request is marked
// with.
type passthroughKey struct{}

// newReverseProxy forwards requests unchanged to the upstream of their route,
// flushing a streamed response as it arrives. The operator's key replaces the
// client's credential when configured.
func newReverseProxy(upstreams map[string]upstream, transport http.RoundTripper, onError func(http.ResponseWriter, *http.Request, error)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := upstreams[routeOf(pr.In).upstream]
			pr.Out.URL = u.target(pr.In.URL.Path, u.query(pr.In.URL.RawQuery))
			pr.Out.Host = ""
			pr.Out.Header.Del(ConversationHeader)
			u.credentials(pr.Out.Header)
		},
		Transport:     transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			reason, _ := resp.Request.Context().Value(passthroughKey{}).(string)
			if reason == "" {
				reason = PassNotRewritten
			}
			resp.Header.Set(StatusHeader, StatusPassthrough)
			resp.Header.Set(PassthroughHeader, reason)
			return nil
		},
		ErrorHandler: onError,
	}
}

// withPassthrough marks r's context with the reason it passes through.
func withPassthrough(r *http.Request, reason string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), passthroughKey{}, reason))
}
