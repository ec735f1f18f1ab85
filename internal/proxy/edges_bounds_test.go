package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// patience is how long a test waits for what a bound must make happen: far above the
// bounds the tests set (a fraction of a second), so only a missing bound fails it.
const patience = 30 * time.Second

// readResponse reads what the server answers on conn within patience: its status
// line, or "closed" when it closes the connection without one.
func readResponse(t *testing.T, conn net.Conn) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(patience))
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case err == io.EOF && line == "":
		return "closed"
	case err != nil && line == "":
		t.Fatalf("the server neither answered nor closed the connection within %s: %v", patience, err)
	}
	return strings.TrimSpace(line)
}

// A slow-loris client holds a connection by sending its request a byte at a time: the
// headers must come within ReadHeaderTimeout (the connection is closed), the body
// within ReadTimeout (408, in the API's error shape, and nothing is stored).
func TestSlowClientIsCutOff(t *testing.T) {
	// The upstream drops a request whose body broke off, as a server does.
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); int64(len(b)) != r.ContentLength { // newFakeUpstream read what came
			panic(http.ErrAbortHandler)
		}
		replyJSON("ok")(w, r)
	})
	logs := &syncBuffer{}
	cfg := DefaultConfig()
	cfg.Listen, cfg.Upstream = "127.0.0.1:0", up.URL
	cfg.ReadHeaderTimeout, cfg.ReadTimeout = 200*time.Millisecond, 300*time.Millisecond
	convs := newMemConvs()
	s, err := New(cfg, map[string]Wire{APIOpenAI: testWire{APIOpenAI}}, convs, Options{Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	headers, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer headers.Close()
	fmt.Fprint(headers, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
	if got := readResponse(t, headers); got != "closed" && !strings.Contains(got, "408") {
		t.Fatalf("headers that never end: %s", got)
	}

	body, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	fmt.Fprint(body, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		ConversationHeader+": c1\r\nContent-Length: 1000\r\n\r\n{\"messages\":[")
	if got := readResponse(t, body); !strings.Contains(got, "408") {
		t.Fatalf("a body that never ends: %s", got)
	}
	passed, err := net.Dial("tcp", s.Addr()) // a path passed through: the same bound
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	fmt.Fprint(passed, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	// 408 when the proxy notices first, 502 when the upstream drops the request first.
	if got := readResponse(t, passed); !strings.Contains(got, "408") && !strings.Contains(got, "502") {
		t.Fatalf("a passed-through body that never ends: %s\n%s", got, logs)
	}
	if prep, fin := convs.calls(); len(prep)+len(fin) != 0 {
		t.Fatalf("a request whose body never came went on: %d prepares, %d finishes", len(prep), len(fin))
	}
}

// hangingUpstream answers after start (headers, then the first bytes of a stream when
// start is not empty) and then sends nothing until the request is given up.
func hangingUpstream(t *testing.T, start string) *fakeUpstream {
	return newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if start != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, start)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	})
}

// An upstream that never sends its response headers is given up after
// UpstreamHeaderTimeout (504 in the API's shape); one whose stream stalls mid-way after
// UpstreamIdleTimeout (the API's error event ends the stream). Neither stores anything.
func TestStalledUpstreamIsGivenUp(t *testing.T) {
	t.Run("no headers", func(t *testing.T) {
		up := hangingUpstream(t, "")
		p := newTestProxy(t, up, func(c *Config, _ *Options) { c.UpstreamHeaderTimeout = 300 * time.Millisecond })
		p.http.Client().Timeout = patience
		for _, path := range []string{"/v1/messages", "/v1/models"} { // rewritten, passed through
			resp := p.post(t, path, `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "UPSTREAM_HEADER_TIMEOUT") {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
			}
		}
		if strings.Contains(readAll(t, p.post(t, "/v1/messages", `{"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")), `"type":"error"`) == false {
			t.Fatal("the refusal is not in the Anthropic error shape")
		}
		if _, fin := p.convs.calls(); len(fin) != 0 {
			t.Fatalf("stored %+v", fin)
		}
	})
	t.Run("stream stalls", func(t *testing.T) {
		up := hangingUpstream(t, "data: {\"text\":\"Hel\"}\n\n")
		reports := make(reportsOf, 4)
		p := newTestProxy(t, up, func(c *Config, o *Options) { c.UpstreamIdleTimeout, o.Observer = 300*time.Millisecond, reports })
		p.http.Client().Timeout = patience
		resp := p.post(t, "/v1/messages", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
		body := readAll(t, resp)
		want := "data: {\"text\":\"Hel\"}\n\n" + string(testWire{}.StreamError("the upstream stream ended before its end (compactor proxy)"))
		if resp.StatusCode != 200 || body != want {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if _, fin := p.convs.calls(); len(fin) != 0 {
			t.Fatalf("a stalled stream was stored: %+v", fin)
		}
		if r := reports.next(t); r.Outcome != OutcomeFailed {
			t.Fatalf("report %+v", r)
		}
		if !strings.Contains(p.logs.String(), "UPSTREAM_IDLE_TIMEOUT") {
			t.Fatalf("the log does not say why:\n%s", p.logs)
		}
	})
}

// Over MaxInFlight requests at once, one more is answered 503 with Retry-After, in its
// API's error shape, at once; the requests in flight go on.
func TestRequestsInFlightAreBounded(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		replyJSON("ok")(w, r)
	})
	reports := make(reportsOf, 4)
	p := newTestProxy(t, up, func(c *Config, o *Options) { c.MaxInFlight, o.Observer = 1, reports })
	p.http.Client().Timeout = patience
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.http.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set(ConversationHeader, "c1")
		resp, err := p.http.Client().Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	select {
	case <-arrived:
	case <-time.After(patience):
		t.Fatal("the first request never reached the upstream")
	}
	resp := p.post(t, "/v1/messages", chatBody, ConversationHeader, "c2")
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "COMPACTOR_PROXY_MAX_IN_FLIGHT") {
		t.Fatalf("over the bound: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if r := reports.next(t); r.Outcome != OutcomeOverloaded || r.API != "anthropic" {
		t.Fatalf("the refusal was reported as %+v; want outcome %q for the anthropic API", r, OutcomeOverloaded)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Fatalf("the request in flight: %d", code)
	}
	if resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1"); resp.StatusCode != 200 {
		t.Fatalf("after the bound freed: %d", resp.StatusCode)
	}
}
