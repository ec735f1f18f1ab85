package view

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
)

// Tenants serves the views of many tenants on one listener: tenant t's pages, assets
// and JSON twins under /t/<t>/ (TenantBase), and at / the list of the tenants served.
//
// Two kinds of credential open it. The operator's (the token given to NewTenants, or,
// without one, the loopback rule of Config.Token) opens every path. A tenant's own
// token opens that tenant's paths only. Anywhere else, and under a tenant that is not
// served, any other credential gets the answer a wrong token gets: the answer depends
// on the credential and on the shape of the path, never on which tenants exist. Only
// paths in their clean form count as a tenant's: one with a dot segment, an empty
// segment or an escaped character (%2F, %61, ...) is nobody's but the operator's.
type Tenants struct {
	renderer
	// token is the operator's credential ("": the loopback rule), opHash its hash.
	token  string
	opHash [sha256.Size]byte
	// dummy is compared in place of a tenant's token when the tenant has none or is
	// not served, so the time a refusal takes does not tell.
	dummy [sha256.Size]byte
	mux   *http.ServeMux

	// savingsSlot bounds the operator's savings pages built at once (each reads every
	// tenant's ledger).
	savingsSlot chan struct{}

	mu     sync.RWMutex
	views  map[string]tenantView
	reader SavingsReader
}

// tenantView is one tenant's view and the hash of its own token.
type tenantView struct {
	v     *View
	token [sha256.Size]byte
	own   bool
}

// TenantInfo is a tenant of the operator's list.
type TenantInfo struct {
	Name string `json:"name"`
	// OwnToken says whether the tenant's own token opens its view.
	OwnToken bool `json:"own_token"`
}

// TenantList is the operator's page at /, and its JSON twin /api/tenants.
type TenantList struct {
	Tenants []TenantInfo `json:"tenants"`
}

// NewTenants returns a handler serving no tenant yet. token is the operator's
// credential; "" follows Config.Token's loopback rule for the operator (a tenant's
// view always needs a credential).
func NewTenants(token string, log zerolog.Logger) (*Tenants, error) {
	if err := (Config{Token: token}).Validate(); err != nil {
		return nil, err
	}
	rd, err := newRenderer("", "", "Tenants", log.With().Str("component", "view").Logger())
	if err != nil {
		return nil, err
	}
	css, err := fs.ReadFile(assets, "static/view.css")
	if err != nil {
		return nil, err
	}
	ts := &Tenants{renderer: rd, token: token, opHash: sha256.Sum256([]byte(token)), mux: http.NewServeMux(), views: map[string]tenantView{},
		savingsSlot: make(chan struct{}, 1)}
	_, _ = rand.Read(ts.dummy[:])
	ts.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { ts.render(w, http.StatusOK, "tenants", ts.list()) })
	ts.mux.HandleFunc("GET /api/tenants", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, ts.list()) })
	ts.mux.HandleFunc("GET /savings", ts.savings("savings"))
	ts.mux.HandleFunc("GET /api/savings", ts.savings(""))
	ts.mux.HandleFunc("GET /static/view.css", serveCSS(css))
	ts.mux.HandleFunc("/", ts.notFound)
	return ts, nil
}

// Add serves v, the view of tenant v's Config.Tenant, opened by the operator's
// credential and by token, the tenant's own ("": none). It refuses a token that the
// operator's or another tenant's view takes (whoever holds it would open more than
// this tenant's view), and a tenant served already.
func (ts *Tenants) Add(v *View, token string) error {
	name := v.cfg.Tenant
	if name == "" {
		return fmt.Errorf("%w: the view is not a tenant's (Config.Tenant is empty)", ErrConfig)
	}
	tv := tenantView{v: v}
	if token != "" {
		if err := ValidateToken(token); err != nil {
			return fmt.Errorf("tenant %q's view token: %w", name, err)
		}
		tv.token, tv.own = sha256.Sum256([]byte(token)), true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.views[name]; ok {
		return fmt.Errorf("%w: tenant %q's view is served already", ErrConfig, name)
	}
	if tv.own && ts.token != "" && sameHash(tv.token, ts.opHash) {
		return fmt.Errorf("%w: tenant %q's view token is the operator's (COMPACTOR_VIEW_TOKEN): give the tenant a token of its own", ErrConfig, name)
	}
	for other, o := range ts.views {
		if tv.own && o.own && sameHash(tv.token, o.token) {
			return fmt.Errorf("%w: tenant %q's view token is tenant %q's too: give each tenant a token of its own", ErrConfig, name, other)
		}
	}
	ts.views[name] = tv
	return nil
}

// SetSavings sets the reader of the operator's savings page (nil: none). Each
// tenant's page reads with its view's Config.Savings.
func (ts *Tenants) SetSavings(read SavingsReader) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.reader = read
}

// savings serves the operator's savings page: every served tenant's ledger, read one
// tenant after the other within one bound of DefaultMaxLedgerEntries entries, as the
// template tmpl, or as JSON when tmpl is "". One such page is built at a time.
func (ts *Tenants) savings(tmpl string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		release, err := takeSlot(r.Context(), ts.savingsSlot, DefaultConfig().QueueWait)
		if err != nil {
			if r.Context().Err() == nil {
				w.Header().Set("Retry-After", "5")
				ts.fail(w, r, err)
			}
			return
		}
		defer release()
		ts.mu.RLock()
		read := ts.reader
		sources := make([]SavingsSource, 0, len(ts.views))
		for name, tv := range ts.views {
			sources = append(sources, SavingsSource{Tenant: name, Store: tv.v.store})
		}
		ts.mu.RUnlock()
		slices.SortFunc(sources, func(a, b SavingsSource) int { return strings.Compare(a.Tenant, b.Tenant) })
		ctx, cancel := context.WithTimeout(r.Context(), DefaultConfig().Timeout)
		defer cancel()
		data, err := savingsPage(ctx, r, read, sources, DefaultMaxLedgerEntries, true)
		if err != nil {
			ts.fail(w, r, err)
			return
		}
		if tmpl == "" {
			writeJSON(w, http.StatusOK, data)
			return
		}
		ts.render(w, http.StatusOK, tmpl, data)
	}
}

// Remove stops serving v (a view Add took; another view of the same tenant stays).
// Its tenant's paths then answer as a tenant that is not served.
func (ts *Tenants) Remove(v *View) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tv, ok := ts.views[v.cfg.Tenant]; ok && tv.v == v {
		delete(ts.views, v.cfg.Tenant)
	}
}

// Names returns the tenants served, sorted.
func (ts *Tenants) Names() []string {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	names := make([]string, 0, len(ts.views))
	for n := range ts.views {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (ts *Tenants) list() TenantList {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	out := TenantList{Tenants: make([]TenantInfo, 0, len(ts.views))}
	for n, tv := range ts.views {
		out.Tenants = append(out.Tenants, TenantInfo{Name: n, OwnToken: tv.own})
	}
	slices.SortFunc(out.Tenants, func(a, b TenantInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// pathKind is what a request's path addresses.
type pathKind int

const (
	pathNone   pathKind = iota // no page of anyone's: unclean, escaped, or /t/ without a tenant's name
	pathRoot                   // the operator's pages (/, /api/tenants, /static/view.css)
	pathTenant                 // /t/<tenant> and below
)

// route says what u's path addresses: for a tenant's, the tenant's name and the rest
// of the path ("" for /t/<tenant> itself).
func route(u *url.URL) (kind pathKind, name, rest string) {
	p := u.Path
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if u.RawPath != "" || clean != p || !strings.HasPrefix(p, "/") {
		return pathNone, "", ""
	}
	after, ok := strings.CutPrefix(p, "/t/")
	if !ok {
		if p == "/t" {
			return pathNone, "", ""
		}
		return pathRoot, "", ""
	}
	name, rest, slash := strings.Cut(after, "/")
	if jetstream.ValidateTenant(name) != nil {
		return pathNone, "", ""
	}
	if slash {
		rest = "/" + rest
	}
	return pathTenant, name, rest
}

// Handler returns the handler of every tenant's view: security headers on every
// answer, GET and HEAD only, the credential checked before anything is read.
func (ts *Tenants) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ts.guard(w, r) {
			return
		}
		kind, name, rest := route(r.URL)
		var tv tenantView
		if kind == pathTenant {
			ts.mu.RLock()
			tv = ts.views[name]
			ts.mu.RUnlock()
		}
		api := strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(rest, "/api/")
		op, own := ts.authorize(r, tv)
		switch {
		case !op && !own:
			w.Header().Set("WWW-Authenticate", authRealm)
			ts.failAs(w, r, &httpError{http.StatusUnauthorized, ts.refusal()}, api)
		case kind == pathRoot:
			ts.mux.ServeHTTP(w, r)
		case kind == pathNone:
			ts.failAs(w, r, &httpError{http.StatusNotFound, "no such page"}, api)
		case tv.v == nil:
			ts.failAs(w, r, &httpError{http.StatusNotFound, fmt.Sprintf("no tenant %q is served here: the tenants served are those of the tenants file whose roles run (see /)", name)}, api)
		case rest == "":
			http.Redirect(w, r, TenantBase(name)+"/", http.StatusMovedPermanently)
		default:
			r2 := r.WithContext(r.Context()) // a shallow copy, whose URL is changed below
			u := *r.URL
			u.Path = rest
			r2.URL = &u
			tv.v.mux.ServeHTTP(w, r2)
		}
	})
}

// authorize reports whether r carries the operator's credential (or, without one,
// comes to a loopback host unforwarded), and whether it carries tv's own token. Both
// comparisons are made whatever the tenant, in constant time.
func (ts *Tenants) authorize(r *http.Request, tv tenantView) (op, own bool) {
	got, has := credential(r)
	want := ts.dummy
	if tv.own {
		want = tv.token
	}
	own = has && sameHash(got, want) && tv.own
	if ts.token == "" {
		return loopbackHost(r.Host) && forwardedBy(r) == "", own
	}
	return has && sameHash(got, ts.opHash), own
}

// refusal is the message of every refusal: the same for every path.
func (ts *Tenants) refusal() string {
	msg := "a credential is required: the operator's token (COMPACTOR_VIEW_TOKEN), or a tenant's own token under /t/<tenant>/, as a bearer token or as the basic-auth password"
	if ts.token == "" {
		msg += "; without COMPACTOR_VIEW_TOKEN, the operator's view answers only requests to localhost, 127.0.0.1 or [::1] that no proxy forwarded"
	}
	return msg
}
