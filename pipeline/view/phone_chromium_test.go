//go:build unix

package view_test

import (
	"bytes"
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chromiumBinary is Debian's chromium (apt-get install chromium; .ci/run installs it).
// Without it the test skips, unless CI=true: then it fails.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); CI needs it for the web view's phone-width test")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// probe is a script the test adds to each page (the view itself runs none: its
// Content-Security-Policy forbids them), which the test shows in a 390 px frame
// (headless Chromium's window is at least 500 px wide): it writes into the framing
// page, for the page and each table, how far it reaches to the right of the viewport,
// and whether the table sits in a box that scrolls it within the viewport.
const probe = `<script>(function () {
  var vw = document.documentElement.clientWidth, out = ["viewport " + vw, "page " + document.documentElement.scrollWidth];
  document.querySelectorAll("table").forEach(function (t) {
    var scrolls = false;
    for (var p = t.parentElement; p; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") { scrolls = p.getBoundingClientRect().right <= vw + 0.5; break; }
    }
    out.push("table " + t.id + " " + Math.ceil(t.getBoundingClientRect().right) + " " + scrolls);
  });
  var top = parent.document, pre = top.createElement("pre");
  pre.id = "probe"; pre.textContent = out.join("\n"); top.body.appendChild(pre);
})();</script>`

// At a phone's width (390 px) no page of the view is wider than the screen: a table
// wider than it scrolls inside a box of the screen's width (Chromium renders the list,
// the conversation, the messages and the savings pages, the last with an empty ledger;
// a test proxy adds the measuring script).
func TestViewTablesFitAPhone(t *testing.T) {
	bin := chromiumBinary(t)
	f := newFixture(t, tokenConfig())
	seed(t, f, "a-rather-long-conversation-id-of-an-agent-run-0042")

	proxy := framingProxy(t, f, probe)

	line := regexp.MustCompile(`(?m)^(viewport|page) (\d+)$|^table (\S*) (\d+) (true|false)$`)
	for _, path := range []string{"/", "/c/a-rather-long-conversation-id-of-an-agent-run-0042",
		"/c/a-rather-long-conversation-id-of-an-agent-run-0042/messages?from=1&through=20", "/savings"} {
		dom := chromiumDOM(t, bin, proxy.URL+"/__frame?width=390&path="+url.QueryEscape(path), "--window-size=800,900")
		_, rest, ok := strings.Cut(dom, `<pre id="probe">`)
		if !ok {
			t.Fatalf("%s: the probe did not run:\n%.2000s", path, dom)
		}
		rest, _, _ = strings.Cut(rest, "</pre>")
		var viewport, page, tables int
		for _, m := range line.FindAllStringSubmatch(rest, -1) {
			switch m[1] {
			case "viewport":
				viewport, _ = strconv.Atoi(m[2])
			case "page":
				page, _ = strconv.Atoi(m[2])
			default:
				tables++
				right, _ := strconv.Atoi(m[4])
				if right > viewport && m[5] != "true" {
					t.Errorf("%s: table %q reaches %d px on a %d px screen and does not scroll within it", path, m[3], right, viewport)
				}
			}
		}
		if viewport == 0 || viewport > 400 {
			t.Fatalf("%s: viewport %d px; want a phone's 390:\n%s", path, viewport, rest)
		}
		if page > viewport {
			t.Errorf("%s: the page is %d px wide on a %d px screen: cut off at the right", path, page, viewport)
		}
		if path != "/c/a-rather-long-conversation-id-of-an-agent-run-0042/messages?from=1&through=20" && tables == 0 {
			t.Errorf("%s: no table measured:\n%s", path, rest)
		}
		t.Logf("%s at 390 px: %s", path, strings.ReplaceAll(rest, "\n", "; "))
	}
}

// framingProxy serves f's view with the token, without the headers that forbid
// scripts and frames, with script added at the end of each page, and at
// /__frame?width=W&path=P a page showing P in a frame W px wide (headless Chromium's
// window is at least 500 px wide).
func framingProxy(t *testing.T, f *fixture, script string) *httptest.Server {
	t.Helper()
	target, _ := url.Parse(f.srv.URL)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = target.Host
		r.Out.Header.Set("Authorization", "Bearer "+testToken)
		r.Out.Header.Del("Accept-Encoding")
	}}
	rp.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Del("Content-Security-Policy")
		resp.Header.Del("X-Frame-Options")
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		b = bytes.Replace(b, []byte("</body>"), []byte(script+"</body>"), 1)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	frame := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/__frame" {
			rp.ServeHTTP(w, r)
			return
		}
		width, err := strconv.Atoi(r.URL.Query().Get("width"))
		if err != nil || width < 100 || width > 4000 {
			http.Error(w, "width", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!DOCTYPE html><html><body style="margin:0"><iframe style="width:`+strconv.Itoa(width)+`px;height:844px;border:0" src="`+
			html.EscapeString(r.URL.Query().Get("path"))+`"></iframe></body></html>`)
	}
	proxy := httptest.NewServer(http.HandlerFunc(frame))
	t.Cleanup(proxy.Close)
	return proxy
}

// chromiumDOM runs headless Chromium on url and returns the DOM it rendered. It runs
// in a process group of its own, killed whole when the deadline passes.
func chromiumDOM(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--dump-dom"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	return out.String()
}
