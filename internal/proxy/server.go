package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/internal/telemetry"
)

// Response headers the proxy sets on every response of the two rewritten paths (and
// StatusHeader and PassthroughHeader on every other one).
const (
	// StatusHeader is StatusCompacted or StatusPassthrough.
	StatusHeader = "X-Compactor-Status"
	// PassthroughHeader says why a request was passed through unchanged.
	PassthroughHeader = "X-Compactor-Passthrough"
	GenerationHeader  = "X-Compactor-Generation"
	TokensSentHeader  = "X-Compactor-Tokens-Sent"
	TokensClientHead  = "X-Compactor-Tokens-Client"
	CutHeader         = "X-Compactor-Cut"
	BranchHeader      = "X-Compactor-Branch"
	// AnsweredHeader names the agent whose request to summarize its conversation the
	// proxy answered from Compactor's summary, without calling the model.
	AnsweredHeader = "X-Compactor-Answered"
	// SideHeader says the request was a side task of the agent's (a router, a
	// classifier: structured output asked for), sent with the compacted context but not
	// stored.
	SideHeader = "X-Compactor-Side"

	StatusCompacted   = "compacted"
	StatusPassthrough = "passthrough"
	// StatusShadow: shadow mode; the request went upstream as sent, and the ledger
	// booked what rewrite mode would have sent.
	StatusShadow = "shadow"

	// PassNoConversation: the request named no conversation.
	PassNoConversation = "no-conversation-id"
	// PassNATSDown: NATS was unreachable and the operator chose to pass requests on.
	PassNATSDown = "nats-unavailable"
	// PassNotRewritten: a path the proxy does not rewrite (models, embeddings...).
	PassNotRewritten = "not-rewritten-path"
	// PassNoSummary: an API's compaction endpoint asked before Compactor has a summary
	// of the conversation (or with COMPACTOR_PROXY_ANSWER_COMPACTIONS=false).
	PassNoSummary = "no-summary"
	// PassShadowUnread: shadow mode, and the request could not be read or its turn
	// prepared: forwarded as sent, not booked.
	PassShadowUnread = "shadow-not-booked"
)

// What COMPACTOR_PROXY_ON_NATS_DOWN chooses.
const (
	NATSDownFail = "fail"
	NATSDownPass = "pass"
)

// Config is the proxy's settings (COMPACTOR_PROXY_*).
type Config struct {
	// Listen is the host:port Run serves on ("": New binds nothing; use Handler).
	Listen string
	// Upstream is the OpenAI-compatible base URL (Chat Completions, Responses and
	// every other path); AnthropicUpstream gets every path under /v1/messages and
	// GeminiUpstream every Gemini path (/v1beta/...). The request path is appended to
	// each.
	Upstream, AnthropicUpstream, GeminiUpstream string
	// UpstreamKey, AnthropicUpstreamKey and GeminiUpstreamKey, when set, replace the
	// client's credential (Authorization, x-api-key, x-goog-api-key or ?key=) for their
	// upstream.
	UpstreamKey, AnthropicUpstreamKey, GeminiUpstreamKey string
	// SessionHeaders are the headers naming a session, looked at in order after
	// X-Compactor-Conversation.
	SessionHeaders []string
	// BodyField is a dotted path to a string field of the body naming the
	// conversation ("": none).
	BodyField string
	// RequireID refuses (400) a request that names no conversation, instead of
	// passing it through.
	RequireID bool
	// OnNATSDown is NATSDownFail (503) or NATSDownPass (the request forwarded as sent).
	OnNATSDown string
	// Mode is ModeRewrite ("" too: the compacted context goes upstream) or ModeShadow (the
	// client's request goes upstream as sent; the conversation is stored and compacted,
	// and the ledger books what rewrite mode would have sent).
	Mode string
	// Wait bounds the wait for a pending compaction; CacheTTL is how long the
	// provider's prompt cache is taken to live (see TurnOptions).
	Wait, CacheTTL time.Duration
	// MaxBody bounds a request body of the rewritten paths (413 over it).
	MaxBody int64
	// BindOwner binds each conversation to the credential that first wrote it; false
	// binds none (TurnOptions.Owner AnyOwner).
	BindOwner bool
	// OwnerKey keys the digest of the credential a conversation is bound to ("":
	// SHA-256 with a domain prefix).
	OwnerKey string
	// AnswerCompactions answers an agent's request to summarize its own conversation
	// from Compactor's summary, when one covers it (see DefaultCompactionPrompts);
	// false forwards such requests to the model like any other.
	AnswerCompactions bool
	// CompactionPrompts are texts, besides DefaultCompactionPrompts', whose presence in
	// a request's last user message makes it a compaction request.
	CompactionPrompts []string
	// MaxInFlight bounds the requests the proxy serves at once (every path): one more is
	// answered 503 with Retry-After at once, in its API's error shape.
	MaxInFlight int
	// ReadHeaderTimeout bounds the reading of a request's headers (the connection is
	// closed past it); ReadTimeout the reading of its body (408 past it). Both only
	// with Listen (Run's server); ReadTimeout also with Handler.
	ReadHeaderTimeout, ReadTimeout time.Duration
	// UpstreamHeaderTimeout bounds the wait for an upstream's response headers (502
	// past it); UpstreamIdleTimeout the wait for the next bytes of its body (a stream
	// that stalls past it ends with the API's error event; nothing is stored).
	UpstreamHeaderTimeout, UpstreamIdleTimeout time.Duration
}

// DefaultMaxInFlight is the default bound of the requests served at once: each may hold
// a request body of MaxBody and a reply of 64 MiB.
const DefaultMaxInFlight = 128

// DefaultConfig is the configuration of the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:            "127.0.0.1:8088",
		Upstream:          "https://api.openai.com",
		AnthropicUpstream: "https://api.anthropic.com",
		GeminiUpstream:    "https://generativelanguage.googleapis.com",
		SessionHeaders:    append([]string(nil), DefaultSessionHeaders...),
		OnNATSDown:        NATSDownFail,
		Mode:              ModeRewrite,
		Wait:              10 * time.Second,
		CacheTTL:          5 * time.Minute,
		MaxBody:           32 << 20,
		BindOwner:         true,
		AnswerCompactions: true,

		MaxInFlight:           DefaultMaxInFlight,
		ReadHeaderTimeout:     10 * time.Second,
		ReadTimeout:           2 * time.Minute,
		UpstreamHeaderTimeout: 10 * time.Minute,
		UpstreamIdleTimeout:   5 * time.Minute,
	}
}

// Validate reports what makes c unusable.
func (c Config) Validate() error {
	switch {
	case c.Mode != "" && c.Mode != ModeRewrite && c.Mode != ModeShadow:
		return fmt.Errorf("COMPACTOR_PROXY_MODE: %q is neither %q nor %q", c.Mode, ModeRewrite, ModeShadow)
	case c.OnNATSDown != NATSDownFail && c.OnNATSDown != NATSDownPass:
		return fmt.Errorf("COMPACTOR_PROXY_ON_NATS_DOWN: %q is neither %q nor %q", c.OnNATSDown, NATSDownFail, NATSDownPass)
	case c.MaxBody <= 0:
		return fmt.Errorf("COMPACTOR_PROXY_MAX_BODY: must be positive, not %d", c.MaxBody)
	case c.Wait < 0 || c.CacheTTL < 0:
		return errors.New("COMPACTOR_PROXY_WAIT and COMPACTOR_PROXY_CACHE_TTL must not be negative")
	case c.MaxInFlight <= 0:
		return fmt.Errorf("COMPACTOR_PROXY_MAX_IN_FLIGHT: must be positive, not %d", c.MaxInFlight)
	case c.ReadHeaderTimeout <= 0 || c.ReadTimeout <= 0 || c.UpstreamHeaderTimeout <= 0 || c.UpstreamIdleTimeout <= 0:
		return errors.New("COMPACTOR_PROXY_READ_HEADER_TIMEOUT, COMPACTOR_PROXY_READ_TIMEOUT, COMPACTOR_PROXY_UPSTREAM_HEADER_TIMEOUT and COMPACTOR_PROXY_UPSTREAM_IDLE_TIMEOUT must be positive")
	}
	_, err := c.upstreams()
	return err
}

// upstreams parses the upstream of each API.
func (c Config) upstreams() (map[string]upstream, error) {
	out := map[string]upstream{}
	for _, u := range []struct{ setting, raw, key, api string }{
		{"COMPACTOR_PROXY_UPSTREAM", c.Upstream, c.UpstreamKey, APIOpenAI},
		{"COMPACTOR_PROXY_ANTHROPIC_UPSTREAM", c.AnthropicUpstream, c.AnthropicUpstreamKey, APIAnthropic},
		{"COMPACTOR_PROXY_GEMINI_UPSTREAM", c.GeminiUpstream, c.GeminiUpstreamKey, APIGemini},
	} {
		up, err := parseUpstream(u.setting, u.raw, u.key, u.api)
		if err != nil {
			return nil, err
		}
		out[u.api] = up
	}
	return out, nil
}

// Options are what the proxy runs with besides its settings. Each zero value is off.
type Options struct {
	// NATS is the connection Conversations uses: while it is not connected, requests
	// are treated as OnNATSDown says without asking Conversations.
	NATS *nats.Conn
	// Logger logs requests' outcomes, never a credential or content.
	Logger zerolog.Logger
	// Observer is told of every request of the rewritten paths (metrics).
	Observer Observer
	// Tracer gives the span of each request of the rewritten paths.
	Tracer trace.TracerProvider
	// Transport sends the upstream requests (nil: http.DefaultTransport).
	Transport http.RoundTripper
	// Ledger books each exchange that reaches the upstream (the savings ledger; nil:
	// none is booked).
	Ledger Ledger
}

// Server is the proxy role: an HTTP server between an agent and its model.
type Server struct {
	cfg      Config
	wires    map[string]Wire
	convs    Conversations
	opts     Options
	log      zerolog.Logger
	ups      map[string]upstream
	client   *http.Client
	rp       *httputil.ReverseProxy
	ownerKey []byte
	tracer   trace.Tracer
	prompts  []CompactionPrompt

	// inFlight holds a token for each request served (MaxInFlight).
	inFlight chan struct{}

	// prefixes is what the ledger compares each request with; ledgerErrs counts the
	// entries it did not take.
	prefixes     *prefixMemo
	ledgerErrs   atomic.Int64
	ledgerLogged atomic.Int64 // when a ledger failure was last logged (Unix ns)
	// bg counts the done entries being booked (bookDone).
	bg sync.WaitGroup

	ln  net.Listener
	srv *http.Server
}

// New builds the proxy of cfg, rewriting the conversation of the APIs wires names
// ("openai", "anthropic"; an API without a wire passes through) with convs. When
// cfg.Listen is set it binds it now, so a port in use stops start-up.
func New(cfg Config, wires map[string]Wire, convs Conversations, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if convs == nil {
		return nil, errors.New("proxy: no Conversations")
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeRewrite
	}
	ups, _ := cfg.upstreams()
	transport := opts.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	transport = &boundedTransport{rt: transport, header: cfg.UpstreamHeaderTimeout, idle: cfg.UpstreamIdleTimeout}
	tp := opts.Tracer
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s := &Server{cfg: cfg, wires: wires, convs: convs, opts: opts, log: opts.Logger, ups: ups,
		client:   &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		ownerKey: []byte(cfg.OwnerKey), tracer: tp.Tracer("github.com/compactor/compactor/internal/proxy"),
		inFlight: make(chan struct{}, cfg.MaxInFlight), prefixes: newPrefixMemo(maxPrefixBytes)}
	s.prompts = append([]CompactionPrompt(nil), DefaultCompactionPrompts...)
	for _, t := range cfg.CompactionPrompts {
		if t = strings.TrimSpace(t); t != "" {
			s.prompts = append(s.prompts, CompactionPrompt{Agent: "operator", Text: t})
		}
	}
	s.rp = newReverseProxy(ups, transport, s.passthroughError)
	// What net/http itself reports goes to the process's log, not to stderr as text.
	errorLog := stdlog.New(s.log.With().Str("component", "proxy-http").Logger(), "", 0)
	s.rp.ErrorLog = errorLog
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("COMPACTOR_PROXY_LISTEN: %w", err)
		}
		s.ln = ln
		s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
			ErrorLog: errorLog}
	}
	return s, nil
}

// Handler is the proxy's HTTP handler: a POST of an API's conversation path (see
// routeOf) whose wire the proxy has is rewritten, every other request passes through
// unchanged. A path under /c/<conversation>/ names the conversation, and is routed
// and forwarded without that prefix.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
	default:
		cleanPath(r)
		_ = stripConversationPath(r)
		s.log.Debug().Int("max_in_flight", s.cfg.MaxInFlight).Msg("proxy: over the requests in flight; refused")
		w.Header().Set("Retry-After", "1")
		w.Header().Set(StatusHeader, StatusPassthrough)
		rt := routeOf(r)
		s.writeError(w, rt.api, http.StatusServiceUnavailable, "api_error",
			"compactor proxy: too many requests in flight (COMPACTOR_PROXY_MAX_IN_FLIGHT); retry shortly")
		if o := s.opts.Observer; o != nil && rt.rewrite && s.wires[rt.api] != nil {
			o.ProxyRequest((&Report{API: s.wires[rt.api].Name(), Outcome: OutcomeOverloaded}).metrics())
		}
		return
	}
	r = s.boundBodyRead(w, r)
	cleanPath(r)
	if err := stripConversationPath(r); err != nil {
		w.Header().Set(StatusHeader, StatusPassthrough)
		s.writeError(w, routeOf(r).api, http.StatusBadRequest, "invalid_request_error", "compactor proxy: "+err.Error())
		return
	}
	rt := routeOf(r)
	if _, ok := s.wires[rt.api].(wire.CompactAnswerer); rt.compact && !ok {
		rt.rewrite = false // no wire answers this API's compaction endpoint: passed through
	}
	if wire := s.wires[rt.api]; wire != nil && rt.rewrite {
		s.rewrite(w, r, wire, rt)
		return
	}
	s.rp.ServeHTTP(w, r)
}

// Addr is the address Run serves on ("" when New bound none).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Run serves on the address New bound until ctx is done, then lets the requests in
// flight finish for a few seconds (a stream still open then is cut).
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil {
		return errors.New("proxy: no listen address")
	}
	s.logUpstreams()
	err := telemetry.ServeUntilDone(ctx, s.srv, s.ln, "proxy")
	s.waitLedger()
	return err
}

// logUpstreams logs where each API's requests go (without credentials), and warns of
// each upstream that is the public API the proxy defaults to.
func (s *Server) logUpstreams() {
	var defaults []string
	for _, api := range []string{APIOpenAI, APIAnthropic, APIGemini} {
		if s.ups[api].String() == defaultUpstreams[api] {
			defaults = append(defaults, upstreamSettings[api])
		}
	}
	s.log.Info().Str("addr", s.Addr()).Str("mode", s.cfg.Mode).Str("upstream", s.ups[APIOpenAI].String()).
		Str("anthropic_upstream", s.ups[APIAnthropic].String()).Str("gemini_upstream", s.ups[APIGemini].String()).
		Str("default", strings.Join(defaults, ",")).Msg("proxy listening")
	if len(defaults) > 0 {
		s.log.Warn().Str("default", strings.Join(defaults, ",")).
			Msg("proxy: no upstream set for these: their requests go to the public API (set them to your model's endpoint, e.g. a local server)")
	}
}

// readBody reads a bounded request body: an error matching *http.MaxBytesError over
// the bound.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// setTurnHeaders sets the headers that tell the client what its request became.
func setTurnHeaders(h http.Header, t *Turn) {
	h.Set(ConversationHeader, t.Conv)
	h.Set(StatusHeader, StatusCompacted)
	if cx := t.Context; cx != nil {
		h.Set(GenerationHeader, strconv.FormatUint(cx.Generation, 10))
		h.Set(TokensSentHeader, strconv.Itoa(cx.Tokens))
	}
	h.Set(TokensClientHead, strconv.Itoa(t.ClientTokens))
	if t.Cut {
		h.Set(CutHeader, "true")
	}
	if t.Branch != "" {
		h.Set(BranchHeader, t.Branch)
	}
}
