package view_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/compactor/compactor/pipeline/view"
)

// Without a token the view trusts a loopback Host. A reverse proxy on the same machine
// (the README's advice for reaching the view from elsewhere) forwards requests from
// anywhere with Host 127.0.0.1:<port> (nginx's default proxy_set_header Host
// $proxy_host) and says so in its forwarding headers: such a request comes from off the
// machine and must not be answered without the token.
func TestWithoutTokenProxiedRequestsAreRefused(t *testing.T) {
	f := newFixture(t, view.DefaultConfig())
	f.publish(t, "c1", `{"role":"user","content":"secret text"}`)
	for name, set := range map[string]func(*http.Request){
		"X-Forwarded-For": func(r *http.Request) { r.Header.Set("X-Forwarded-For", "203.0.113.7") },
		"Forwarded":       func(r *http.Request) { r.Header.Set("Forwarded", "for=203.0.113.7;proto=https") },
		"X-Real-IP":       func(r *http.Request) { r.Header.Set("X-Real-IP", "203.0.113.7") },
	} {
		code, _, body := f.do(t, http.MethodGet, "/c/c1", func(r *http.Request) {
			r.Host = "127.0.0.1:8080"
			set(r)
		})
		if code == http.StatusOK || strings.Contains(body, "secret text") {
			t.Errorf("%s: a proxied request without the token got %d and the conversation's content", name, code)
		}
	}
}
