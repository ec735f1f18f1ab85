package view

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

// ErrConfig is matched by every configuration error of this package.
var ErrConfig = errors.New("invalid view config")

// MinTokenLength is the shortest credential a view takes.
const MinTokenLength = 16

// Config sets up the view.
type Config struct {
	// Token is the credential every request must carry, as "Authorization: Bearer
	// <token>" or as the password of HTTP basic authentication (any user name). Empty:
	// no credential, and only requests addressed to a loopback host (localhost,
	// 127.0.0.1, [::1]) are answered, so a web page cannot reach the view through a
	// name it points at 127.0.0.1 (DNS rebinding). The caller must then bind the view
	// to a loopback address.
	Token string
	// PageSize is how many conversations the list shows per page. 0: 25.
	PageSize int
	// MaxMessages bounds the messages one page shows: the newest of a tail, the pinned
	// messages, a page of a range. 0: 200.
	MaxMessages int
	// MaxChars bounds the characters shown of each text of a message. 0: 4,000.
	MaxChars int
	// MaxConcurrent bounds the pages built at once; one more waits up to QueueWait, then
	// is answered 503. 0: 4.
	MaxConcurrent int
	// QueueWait is how long a page waits for one of the MaxConcurrent slots. 0: 5s.
	QueueWait time.Duration
	// Timeout bounds the NATS reads of one page. 0: 30s.
	Timeout time.Duration
	// Tenant is the tenant whose store the view reads ("": the deployment's own). Its
	// pages are then served under TenantBase(Tenant) by a Tenants handler, and every
	// link, form, redirect and asset of theirs points under it.
	Tenant string
	// Savings reads the savings ledger for the savings page (internal/node gives the
	// reader of compactor savings, priced with COMPACTOR_PRICES); nil: no savings page.
	Savings SavingsReader
	// MaxLedgerEntries bounds the ledger entries one savings page reads; past it the
	// page says its figures are cut. 0: DefaultMaxLedgerEntries.
	MaxLedgerEntries int
}

// TenantBase is the path under which tenant's view is served: /t/<tenant>.
func TenantBase(tenant string) string { return "/t/" + tenant }

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{PageSize: 25, MaxMessages: 200, MaxChars: 4000, MaxConcurrent: 4, QueueWait: 5 * time.Second, Timeout: 30 * time.Second,
		MaxLedgerEntries: DefaultMaxLedgerEntries}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	for _, f := range []struct{ v, d *int }{{&c.PageSize, &d.PageSize}, {&c.MaxMessages, &d.MaxMessages},
		{&c.MaxChars, &d.MaxChars}, {&c.MaxConcurrent, &d.MaxConcurrent}, {&c.MaxLedgerEntries, &d.MaxLedgerEntries}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *time.Duration }{{&c.Timeout, &d.Timeout}, {&c.QueueWait, &d.QueueWait}} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	return c
}

// Validate checks the config (zero fields mean the defaults).
func (c Config) Validate() error {
	if err := ValidateToken(c.Token); c.Token != "" && err != nil {
		return err
	}
	if c.Tenant != "" {
		if err := jetstream.ValidateTenant(c.Tenant); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.PageSize < 0 || c.PageSize > 100:
		return bad("page size must be 1 to 100, got %d", c.PageSize)
	case c.MaxMessages < 0 || c.MaxMessages >= jetstream.DirectBatchSize:
		return bad("max messages must be 1 to %d, got %d", jetstream.DirectBatchSize-1, c.MaxMessages)
	case c.MaxChars < 0:
		return bad("max chars must not be negative")
	case c.MaxConcurrent < 0:
		return bad("max concurrent must not be negative")
	case c.MaxLedgerEntries < 0 || c.MaxLedgerEntries > jetstream.MaxLedgerRead:
		return bad("max ledger entries must be 1 to %d, got %d", jetstream.MaxLedgerRead, c.MaxLedgerEntries)
	case c.Timeout < 0 || c.QueueWait < 0:
		return bad("timeout and queue wait must not be negative")
	}
	return nil
}

// ValidateToken checks a credential: at least MinTokenLength characters, printable,
// without spaces (it travels in an HTTP header).
func ValidateToken(token string) error {
	if len(token) < MinTokenLength {
		return fmt.Errorf("%w: the token must be at least %d characters (e.g. openssl rand -hex 24)", ErrConfig, MinTokenLength)
	}
	for _, r := range token {
		if r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' {
			return fmt.Errorf("%w: the token must be printable ASCII without spaces", ErrConfig)
		}
	}
	return nil
}

// PolicySource resolves a conversation's settings. When the conversation's policy is
// invalid, it returns settings without it and an error matching policy.ErrPolicy.
type PolicySource interface {
	Settings(ctx context.Context, conv string) (policy.Settings, error)
}

// View serves the pages.
type View struct {
	renderer
	cfg      Config
	store    *jetstream.Store
	policies PolicySource
	counter  func(tokenizer string) (tokens.Counter, error)
	pages    chan struct{} // one token per page being built
	// savingsSlot is held by the one savings page built at a time: it holds up to
	// MaxLedgerEntries entries in memory.
	savingsSlot chan struct{}
	css         []byte
	mux         *http.ServeMux
	// base is the path the pages are served under ("" at the root).
	base string
}

// New returns a view reading store. counter returns the token counter of a tokenizer
// name (the policy key tokenizer); nil counts chars/4 for every conversation.
func New(cfg Config, store *jetstream.Store, policies PolicySource,
	counter func(tokenizer string) (tokens.Counter, error), log zerolog.Logger) (*View, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || policies == nil {
		return nil, fmt.Errorf("%w: a store and a policy source are required", ErrConfig)
	}
	if counter == nil {
		counter = func(string) (tokens.Counter, error) { return tokens.Chars4{}, nil }
	}
	base, lctx := "", log.With().Str("component", "view")
	if cfg.Tenant != "" {
		base, lctx = TenantBase(cfg.Tenant), lctx.Str("tenant", cfg.Tenant)
	}
	rd, err := newRenderer(base, cfg.Tenant, "Conversations", lctx.Logger())
	if err != nil {
		return nil, err
	}
	css, err := fs.ReadFile(assets, "static/view.css")
	if err != nil {
		return nil, err
	}
	v := &View{renderer: rd, cfg: cfg, store: store, policies: policies, counter: counter,
		pages: make(chan struct{}, cfg.MaxConcurrent), savingsSlot: make(chan struct{}, 1), css: css, mux: http.NewServeMux(), base: base}
	v.routes()
	return v, nil
}

func (v *View) routes() {
	v.mux.HandleFunc("GET /{$}", v.page("list", v.list))
	v.mux.HandleFunc("GET /api/conversations", v.page("", v.list))
	v.mux.HandleFunc("GET /c", v.open)
	v.mux.HandleFunc("GET /c/{conv}", v.page("conversation", v.conversation))
	v.mux.HandleFunc("GET /api/c/{conv}", v.page("", v.conversation))
	v.mux.HandleFunc("GET /c/{conv}/messages", v.page("messages", v.messages))
	v.mux.HandleFunc("GET /api/c/{conv}/messages", v.page("", v.messages))
	v.mux.HandleFunc("GET /savings", v.page("savings", v.savings))
	v.mux.HandleFunc("GET /api/savings", v.page("", v.savings))
	v.mux.HandleFunc("GET /static/view.css", serveCSS(v.css))
	v.mux.HandleFunc("/", v.notFound)
}

// serveCSS serves the style sheet css.
func serveCSS(css []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(css)
	}
}

// Handler returns the view's handler: security headers on every answer, GET and HEAD
// only, the credential checked before anything is read. A tenant's view
// (Config.Tenant) is served by a Tenants handler instead, under its tenant's path.
func (v *View) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !v.guard(w, r) {
			return
		}
		h := w.Header()
		if v.cfg.Token == "" {
			if !loopbackHost(r.Host) {
				v.fail(w, r, &httpError{http.StatusForbidden, "without COMPACTOR_VIEW_TOKEN the view answers only requests to localhost, 127.0.0.1 or [::1]"})
				return
			}
			// A proxy on this machine forwards requests from anywhere to a loopback Host;
			// one that says so is refused. (One that does not, nginx by default, cannot be
			// told apart: the README says a proxied view needs the token.)
			if h := forwardedBy(r); h != "" {
				v.fail(w, r, &httpError{http.StatusForbidden, "a request forwarded by a proxy (" + h + ") needs COMPACTOR_VIEW_TOKEN: without it the view is for this machine only"})
				return
			}
		} else if !v.authorized(r) {
			h.Set("WWW-Authenticate", authRealm)
			v.fail(w, r, &httpError{http.StatusUnauthorized, "a credential is required: the view's token as a bearer token or as the basic-auth password"})
			return
		}
		v.mux.ServeHTTP(w, r)
	})
}

// authRealm is the WWW-Authenticate of a refusal: a browser asks for the token with
// its basic-authentication prompt.
const authRealm = `Basic realm="compactor view", charset="UTF-8"`

// guard sets the security headers of every answer and refuses any method but GET and
// HEAD; it reports whether the request goes on.
func (rd renderer) guard(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	// No script, no frame, nothing from elsewhere: the style sheet is the page's
	// only resource.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	// Conversations are private: no cache keeps a copy.
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		rd.fail(w, r, &httpError{http.StatusMethodNotAllowed, "the view is read-only: GET and HEAD only"})
		return false
	}
	return true
}

// forwardedBy names the first header by which a proxy says it forwarded r, or "".
func forwardedBy(r *http.Request) string {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip", "Via"} {
		if _, ok := r.Header[h]; ok {
			return h
		}
	}
	return ""
}

// authorized reports whether r carries the token. The comparison takes the same time
// whatever the guess (hashes of equal length, compared in constant time).
func (v *View) authorized(r *http.Request) bool {
	got, ok := credential(r)
	return ok && sameHash(got, sha256.Sum256([]byte(v.cfg.Token)))
}

// credential is the hash of the token r carries, as a bearer token or as the
// basic-auth password; false when it carries none.
func credential(r *http.Request) ([sha256.Size]byte, bool) {
	var got string
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = tok
	} else if _, pw, ok := r.BasicAuth(); ok {
		got = pw
	} else {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256([]byte(got)), true
}

// sameHash compares two hashes in constant time.
func sameHash(a, b [sha256.Size]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// loopbackHost reports whether a request's Host names the loopback interface.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpError is an answer other than the page.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// builder builds the data of one page.
type builder func(ctx context.Context, r *http.Request) (any, error)

// page serves what build returns: as the template tmpl, or as JSON when tmpl is "".
// Pages are built a few at a time: each reads NATS, and nothing else bounds how many
// a client asks for.
func (v *View) page(tmpl string, build builder) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wait := time.NewTimer(v.cfg.QueueWait)
		defer wait.Stop()
		select {
		case v.pages <- struct{}{}:
			defer func() { <-v.pages }()
		case <-wait.C:
			w.Header().Set("Retry-After", "5")
			v.fail(w, r, &httpError{http.StatusServiceUnavailable, "too many pages are being built; try again in a few seconds"})
			return
		case <-r.Context().Done():
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), v.cfg.Timeout)
		defer cancel()
		data, err := build(ctx, r)
		if err != nil {
			v.fail(w, r, err)
			return
		}
		if tmpl == "" {
			writeJSON(w, http.StatusOK, data)
			return
		}
		v.render(w, http.StatusOK, tmpl, data)
	}
}

// renderer answers with the templates: pages, and errors as a page or as JSON.
type renderer struct {
	tmpl *template.Template
	log  zerolog.Logger
}

// newRenderer parses the templates for pages served under base, of tenant ("": the
// deployment's own), whose page at base/ is home.
func newRenderer(base, tenant, home string, log zerolog.Logger) (renderer, error) {
	tmpl, err := parseTemplates(base, tenant, home)
	if err != nil {
		return renderer{}, err
	}
	return renderer{tmpl: tmpl, log: log}, nil
}

// notFound answers a path that is no page.
func (rd renderer) notFound(w http.ResponseWriter, r *http.Request) {
	rd.fail(w, r, &httpError{http.StatusNotFound, "no such page"})
}

// fail answers err: its own status for an *httpError, 502 for a read that failed; as
// JSON under /api/, else as a page.
func (rd renderer) fail(w http.ResponseWriter, r *http.Request, err error) {
	rd.failAs(w, r, err, strings.HasPrefix(r.URL.Path, "/api/"))
}

// failAs is fail, answering as JSON when api is set.
func (rd renderer) failAs(w http.ResponseWriter, r *http.Request, err error, api bool) {
	var he *httpError
	if !errors.As(err, &he) {
		rd.log.Warn().Err(err).Str("path", r.URL.Path).Msg("view: read failed")
		he = &httpError{http.StatusBadGateway, "reading from NATS failed: " + err.Error()}
	}
	if api {
		writeJSON(w, he.code, map[string]string{"error": he.msg})
		return
	}
	rd.render(w, he.code, "error", map[string]any{"Code": he.code, "Status": http.StatusText(he.code), "Message": he.msg})
}

func writeJSON(w http.ResponseWriter, code int, data any) {
	b, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// render executes a template into a buffer first, so a failure answers 500 instead of
// half a page.
func (rd renderer) render(w http.ResponseWriter, code int, name string, data any) {
	var buf bytes.Buffer
	if err := rd.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		rd.log.Error().Err(err).Str("template", name).Msg("view: render")
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// open sends the form of the list (?conversation=<id>) to the conversation's page.
func (v *View) open(w http.ResponseWriter, r *http.Request) {
	conv := r.URL.Query().Get("conversation")
	if err := schemas.ValidateConversationID(conv); err != nil {
		v.fail(w, r, badRequest("%v", err))
		return
	}
	http.Redirect(w, r, v.base+"/c/"+conv, http.StatusSeeOther)
}

// conversationOf is the conversation id of the request's path, checked before anything
// is read.
func conversationOf(r *http.Request) (string, error) {
	conv := r.PathValue("conv")
	if err := schemas.ValidateConversationID(conv); err != nil {
		return "", badRequest("%v", err)
	}
	return conv, nil
}

// uintParam parses query parameter name (def when absent) within [lo, hi].
func uintParam(r *http.Request, name string, def, lo, hi uint64) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s must be a whole number from %d to %d, got %q", name, lo, hi, s)
	}
	return n, nil
}
