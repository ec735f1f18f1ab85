package view_test

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/savings/savingsview"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline/view"
)

const (
	operatorToken = "operator-token-0123456789"
	acmeToken     = "acme-token-0123456789abcdef"
	globexToken   = "globex-token-0123456789abcd"
)

// tenantsFixture is one Tenants handler serving acme and globex, each on its own
// streams of one in-process NATS server.
type tenantsFixture struct {
	ts     *view.Tenants
	views  map[string]*view.View
	stores map[string]*jetstream.Store
	fix    map[string]*fixture
}

func newTenantsFixture(t *testing.T, operator string) *tenantsFixture {
	t.Helper()
	ns := jstest.Server(t)
	nc := jstest.Conn(t, ns)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	ts, err := view.NewTenants(operator, log)
	if err != nil {
		t.Fatal(err)
	}
	ts.SetSavings(savingsview.Reader(nil))
	f := &tenantsFixture{ts: ts, views: map[string]*view.View{}, stores: map[string]*jetstream.Store{}, fix: map[string]*fixture{}}
	for name, tok := range map[string]string{"acme": acmeToken, "globex": globexToken} {
		jcfg, err := jetstream.DefaultConfig().ForTenant(name)
		if err != nil {
			t.Fatal(err)
		}
		st, err := jetstream.Provision(ctxT(t), nc, jcfg)
		if err != nil {
			t.Fatal(err)
		}
		vcfg := view.DefaultConfig()
		vcfg.Tenant, vcfg.Savings = name, savingsview.Reader(nil)
		v, err := view.New(vcfg, st, testSettings(t), nil, log)
		if err != nil {
			t.Fatal(err)
		}
		if err := ts.Add(v, tok); err != nil {
			t.Fatal(err)
		}
		f.views[name], f.stores[name], f.fix[name] = v, st, &fixture{nc: nc, st: st}
	}
	return f
}

// answer is one answer of the handler.
type answer struct {
	code int
	h    http.Header
	body string
}

// serve sends target (a request-URI, parsed as the server parses it) with the token
// ("": none) to the handler.
func (f *tenantsFixture) serve(t *testing.T, method, target, token string, prepare ...func(*http.Request)) answer {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	req.Host = "view.example:8080"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, p := range prepare {
		p(req)
	}
	rec := httptest.NewRecorder()
	f.ts.Handler().ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{res.StatusCode, res.Header, string(b)}
}

func (f *tenantsFixture) get(t *testing.T, target, token string) answer {
	t.Helper()
	return f.serve(t, http.MethodGet, target, token)
}

// seedTenants gives acme and globex a conversation c1 each: acme's compacted twice
// (seed), globex's one message of its own.
func seedTenants(t *testing.T, f *tenantsFixture) {
	t.Helper()
	seed(t, f.fix["acme"], "c1")
	f.fix["globex"].publish(t, "c1", `{"role":"user","content":"globex-only secret"}`)
}

// The same conversation id in two tenants is two conversations: each tenant's pages
// show its own, the operator reads both.
func TestTenantsSameConversationTwoTenants(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	seedTenants(t, f)
	for _, tc := range []struct{ tenant, token, has, hasNot string }{
		{"acme", acmeToken, "You are a careful agent.", "globex-only secret"},
		{"acme", operatorToken, "You are a careful agent.", "globex-only secret"},
		{"globex", globexToken, "globex-only secret", "careful agent"},
		{"globex", operatorToken, "globex-only secret", "careful agent"},
	} {
		for _, p := range []string{"/c/c1", "/api/c/c1", "/c/c1/messages?from=1"} {
			a := f.get(t, "/t/"+tc.tenant+p, tc.token)
			if a.code != http.StatusOK || !strings.Contains(a.body, tc.has) || strings.Contains(a.body, tc.hasNot) {
				t.Errorf("%s%s: %d; want 200 with %q and without %q\n%s", tc.tenant, p, a.code, tc.has, tc.hasNot, a.body)
			}
		}
	}
	var l view.List
	a := f.get(t, "/t/globex/api/conversations", globexToken)
	if err := jsonUnmarshal(a.body, &l); err != nil || len(l.Conversations) != 1 || l.Conversations[0].Conversation != "c1" || l.Conversations[0].Generation != 0 {
		t.Errorf("globex's list %+v (%v); want c1 alone, never compacted", l, err)
	}
	a = f.get(t, "/", operatorToken)
	if a.code != http.StatusOK || !strings.Contains(a.body, `href="/t/acme/"`) || !strings.Contains(a.body, `href="/t/globex/"`) {
		t.Errorf("the operator's list: %d\n%s", a.code, a.body)
	}
	var tl view.TenantList
	if err := jsonUnmarshal(f.get(t, "/api/tenants", operatorToken).body, &tl); err != nil ||
		!slices.Equal(tl.Tenants, []view.TenantInfo{{Name: "acme", OwnToken: true}, {Name: "globex", OwnToken: true}}) {
		t.Errorf("/api/tenants %+v (%v)", tl, err)
	}
}

// globexPaths are paths that reach, or try to reach, globex's data (or the operator's).
var globexPaths = []string{
	"/", "/api/tenants", "/static/view.css", "/nothing",
	"/t/globex/", "/t/globex", "/t/globex/api/conversations", "/t/globex/?page=1",
	"/t/globex/c/c1", "/t/globex/api/c/c1", "/t/globex/c/c1/messages?from=1&through=9", "/t/globex/api/c/c1/messages?from=1",
	"/t/globex/c?conversation=c1", "/t/globex/static/view.css", "/t/globex/nothing",
	"/t/acme/../globex/c/c1", "/t/acme/%2E%2E/globex/c/c1", "/t/acme/c/../../globex/api/c/c1", "/t/./globex/", "/t//globex/",
	"//t/globex/c/c1", "/t/acme%2F..%2Fglobex/c/c1", "/t%2Fglobex/c/c1", "/t/globex%2Fc%2Fc1", "/t/acme/..%2Fglobex/c/c1",
	"/t/%67lobex/c/c1", "/t/GLOBEX/c/c1", "/t/Globex/", "/T/globex/", "/t/globex./", "/t/globex%00/",
	"/t/initech/", "/t/initech/c/c1", "/t/", "/t",
}

// acme's token opens acme's view only: every other path, globex's and the operator's,
// however spelt, gets the answer a wrong token gets, which names no tenant.
func TestTenantTokenOpensItsTenantOnly(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	seedTenants(t, f)
	if a := f.get(t, "/t/acme/c/c1", acmeToken); a.code != http.StatusOK {
		t.Fatalf("acme's token on acme's page: %d\n%s", a.code, a.body)
	}
	refusals := map[string]string{} // body of the refusal, by whether the path is an API one
	for _, p := range globexPaths {
		a := f.get(t, p, acmeToken)
		wrong := f.get(t, p, "a-wrong-token-0123456789")
		none := f.get(t, p, "")
		for what, x := range map[string]answer{"acme's token": a, "a wrong token": wrong, "no token": none} {
			if x.code != http.StatusUnauthorized || !strings.HasPrefix(x.h.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s on %s: %d %q; want 401 with a basic-auth challenge", what, p, x.code, x.h.Get("WWW-Authenticate"))
			}
			if strings.Contains(x.body, "globex") || strings.Contains(x.body, "initech") || strings.Contains(x.body, "acme") {
				t.Errorf("%s on %s: the refusal names a tenant\n%s", what, p, x.body)
			}
			checkSecurityHeaders(t, what+" "+p, x.h)
		}
		if a.body != wrong.body || a.body != none.body || a.h.Get("Content-Type") != wrong.h.Get("Content-Type") {
			t.Errorf("%s: acme's token is told apart from a wrong one\n%s\n%s", p, a.body, wrong.body)
		}
		api := strings.Contains(p, "/api/")
		if prev, ok := refusals[a.h.Get("Content-Type")]; ok && prev != a.body {
			t.Errorf("%s: a refusal unlike the others (api %v)\n%s\n%s", p, api, a.body, prev)
		}
		refusals[a.h.Get("Content-Type")] = a.body
	}
	// globex's token likewise on acme's conversation, and an unknown tenant answers as
	// one it may not open.
	if a, b := f.get(t, "/t/acme/c/c1", globexToken), f.get(t, "/t/initech/c/c1", globexToken); a.code != http.StatusUnauthorized || a.body != b.body {
		t.Errorf("globex's token on acme's page: %d; on an unknown tenant's: %d", a.code, b.code)
	}
	// Other methods are refused before anything else, on every path.
	for _, p := range []string{"/t/acme/c/c1", "/t/globex/c/c1", "/"} {
		if a := f.serve(t, http.MethodPost, p, acmeToken); a.code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d; want 405", p, a.code)
		}
	}
}

// The operator's token opens every tenant and the list; a tenant that is not served
// is 404 to it, and /t/<tenant> leads to /t/<tenant>/.
func TestOperatorTokenOpensEveryTenant(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	seedTenants(t, f)
	for p, want := range map[string]int{
		"/": 200, "/api/tenants": 200, "/static/view.css": 200, "/nothing": 404,
		"/t/acme/": 200, "/t/globex/": 200, "/t/globex/c/c1": 200, "/t/acme/static/view.css": 200,
		"/t/initech/": 404, "/t/GLOBEX/": 404, "/t/acme/../globex/": 404, "/t/acme%2Fc/c1": 404, "/t/": 404,
		"/t/acme": 301, "/t/acme/c?conversation=c1": 303, "/t/acme/c/a.b": 400,
	} {
		a := f.get(t, p, operatorToken)
		if a.code != want {
			t.Errorf("operator on %s: %d; want %d\n%s", p, a.code, want, a.body)
		}
		checkSecurityHeaders(t, "operator "+p, a.h)
	}
	if loc := f.get(t, "/t/acme", operatorToken).h.Get("Location"); loc != "/t/acme/" {
		t.Errorf("/t/acme redirects to %q", loc)
	}
	if loc := f.get(t, "/t/acme/c?conversation=c1", acmeToken).h.Get("Location"); loc != "/t/acme/c/c1" {
		t.Errorf("the open-by-id form of acme redirects to %q", loc)
	}
	if a := f.get(t, "/t/initech/api/c/c1", operatorToken); a.code != 404 || a.h.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("an unknown tenant's API path: %d %s", a.code, a.h.Get("Content-Type"))
	}
}

// links are the URLs of a page's href, src and action attributes.
var links = regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)

// Every link, form and asset of a tenant's pages is under the tenant's path, and opens
// with the tenant's token; those of the operator's list open with the operator's.
func TestTenantPagesLinkUnderTheirPrefix(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	seedTenants(t, f)
	crawl := func(start, prefix, token string) int {
		seen := map[string]bool{start: true}
		queue := []string{start}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			a := f.get(t, p, token)
			if a.code != http.StatusOK {
				t.Errorf("%s (linked): %d\n%s", p, a.code, a.body)
				continue
			}
			if !strings.HasPrefix(a.h.Get("Content-Type"), "text/html") {
				continue
			}
			for _, m := range links.FindAllStringSubmatch(a.body, -1) {
				l := html.UnescapeString(m[1])
				if !strings.HasPrefix(l, prefix) {
					t.Errorf("%s links to %q, not under %s", p, l, prefix)
					continue
				}
				if strings.HasSuffix(l, "/c") { // the open-by-id form
					if a := f.get(t, l+"?conversation=c1", token); a.code != http.StatusSeeOther || !strings.HasPrefix(a.h.Get("Location"), prefix) {
						t.Errorf("form %s: %d to %q", l, a.code, a.h.Get("Location"))
					}
					continue
				}
				if !seen[l] {
					seen[l] = true
					queue = append(queue, l)
				}
			}
		}
		return len(seen)
	}
	if n := crawl("/t/acme/", "/t/acme/", acmeToken); n < 8 {
		t.Errorf("acme's pages link to %d pages; want the list, c1, its folded ranges, the JSON twins and the style sheet", n)
	}
	if a := f.get(t, "/t/acme/nothing", acmeToken); a.code != 404 || !strings.Contains(a.body, `href="/t/acme/"`) ||
		!strings.Contains(a.body, `href="/t/acme/static/view.css"`) {
		t.Errorf("acme's 404 page: %d\n%s", a.code, a.body)
	}
	if n := crawl("/", "/", operatorToken); n < 5 {
		t.Errorf("the operator's list links to %d pages", n)
	}
}

// A tenant removed answers as one never served: 404 to the operator, the refusal to
// its own token; added again, it is served again.
func TestRemovedTenantIsUnknown(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	seedTenants(t, f)
	unknown := f.get(t, "/t/initech/c/c1", globexToken)
	f.ts.Remove(f.views["globex"])
	if a := f.get(t, "/t/globex/c/c1", operatorToken); a.code != http.StatusNotFound {
		t.Errorf("operator on a removed tenant: %d", a.code)
	}
	if a := f.get(t, "/t/globex/c/c1", globexToken); a.code != http.StatusUnauthorized || a.body != unknown.body {
		t.Errorf("a removed tenant's token: %d; want the refusal of an unknown tenant\n%s", a.code, a.body)
	}
	if names := f.ts.Names(); !slices.Equal(names, []string{"acme"}) {
		t.Errorf("served %v", names)
	}
	if err := f.ts.Add(f.views["globex"], globexToken); err != nil {
		t.Fatal(err)
	}
	if a := f.get(t, "/t/globex/c/c1", globexToken); a.code != http.StatusOK {
		t.Errorf("globex added again: %d", a.code)
	}
}

// A tenant's token must be one of its own: not the operator's, not another tenant's,
// and as long as the operator's must be.
func TestTenantTokensMustBeTheirOwn(t *testing.T) {
	f := newTenantsFixture(t, operatorToken)
	vcfg := view.DefaultConfig()
	vcfg.Tenant = "initech"
	v, err := view.New(vcfg, f.stores["acme"], testSettings(t), nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{operatorToken: "the operator's", acmeToken: `tenant "acme"'s too`, "short": "at least 16"} {
		if err := f.ts.Add(v, token); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Add with token %q = %v; want it refused (%s)", token, err, want)
		}
	}
	if err := f.ts.Add(f.views["acme"], "another-acme-token-0123456"); err == nil {
		t.Error("a tenant served twice")
	}
	if v, err := view.New(view.DefaultConfig(), f.stores["acme"], testSettings(t), nil, zerolog.Nop()); err != nil || f.ts.Add(v, "") == nil {
		t.Errorf("a view of no tenant added (%v)", err)
	}
	vcfg.Tenant = "Initech"
	if _, err := view.New(vcfg, f.stores["acme"], testSettings(t), nil, zerolog.Nop()); err == nil {
		t.Error("a view of an invalid tenant name built")
	}
}

// Without the operator's token, the loopback rule opens the operator's view (every
// tenant) to unforwarded requests addressed to a loopback host; a tenant's view still
// opens with its own token from anywhere, and nothing else does.
func TestTenantsWithoutOperatorToken(t *testing.T) {
	f := newTenantsFixture(t, "")
	seedTenants(t, f)
	loopback := func(r *http.Request) { r.Host = "127.0.0.1:8080" }
	forwarded := func(r *http.Request) { r.Header.Set("X-Forwarded-For", "203.0.113.9") }
	for _, tc := range []struct {
		what, path, token string
		prepare           []func(*http.Request)
		want              int
	}{
		{"loopback, no token", "/", "", []func(*http.Request){loopback}, 200},
		{"loopback, no token", "/t/globex/c/c1", "", []func(*http.Request){loopback}, 200},
		{"elsewhere, no token", "/t/globex/c/c1", "", nil, 401},
		{"elsewhere, acme's token", "/t/acme/c/c1", acmeToken, nil, 200},
		{"elsewhere, acme's token", "/t/globex/c/c1", acmeToken, nil, 401},
		{"elsewhere, acme's token", "/", acmeToken, nil, 401},
		{"forwarded to loopback, no token", "/t/acme/c/c1", "", []func(*http.Request){loopback, forwarded}, 401},
		{"forwarded to loopback, acme's token", "/t/acme/c/c1", acmeToken, []func(*http.Request){loopback, forwarded}, 200},
	} {
		if a := f.serve(t, http.MethodGet, tc.path, tc.token, tc.prepare...); a.code != tc.want {
			t.Errorf("%s on %s: %d; want %d", tc.what, tc.path, a.code, tc.want)
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
