package proxy

import (
	"net"
	"path"
	"strings"
	"testing"
)

// Review: the request path is appended to the upstream's base without cleaning
// (upstream.target), and the handler is no ServeMux, so dot segments pass: a
// client reaches any path of the upstream's host outside its base path (a gateway's
// other routes), with the operator's key when one is configured, and a /c/ prefix
// followed by ../ turns a rewritten path into a passthrough. Every upstream request
// should stay under its base.
func TestReviewDotSegmentsStayUnderTheUpstreamBase(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, _ *Options) { c.UpstreamKey = "operator-key" })
	for _, raw := range []string{"/../admin/keys", "/c/x/../../admin/keys", "/v1/../../admin/keys"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(p.http.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte("GET " + raw + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
		buf := make([]byte, 4096)
		_, _ = conn.Read(buf)
		conn.Close()
	}
	for _, r := range up.requests() {
		if clean := path.Clean(r.path); !strings.HasPrefix(clean, "/base/") && !strings.HasPrefix(clean, "/anthropic/") && !strings.HasPrefix(clean, "/gemini/") {
			t.Fatalf("a request went to %s (%s) with %q", r.path, clean, r.header.Get("Authorization"))
		}
	}
	if len(up.requests()) == 0 {
		t.Skip("no request reached the upstream")
	}
}
