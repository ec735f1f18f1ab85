package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/telemetry"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream/jstest"
)

// natsDownConn connects to a real nats-server and returns the connection and a
// function that stops the server and waits until the connection knows it is down.
func natsDownConn(t *testing.T) (*nats.Conn, func()) {
	t.Helper()
	ns := jstest.ServerWith(t, nil)
	down := make(chan struct{}, 1)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { down <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		select {
		case <-down:
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not notice the server stopped")
		}
	}
}

func TestNATSDownFailIs503(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	nc, stop := natsDownConn(t)
	reports := make(reportsOf, 4)
	p := newTestProxy(t, up, func(c *Config, o *Options) {
		o.NATS = nc
		o.Observer = reports
	})
	if resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1"); resp.StatusCode != 200 {
		t.Fatalf("with NATS up: %d", resp.StatusCode)
	}
	stop()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		resp := p.post(t, path, chatBody, ConversationHeader, "c1")
		body := readAll(t, resp)
		if resp.StatusCode != 503 || !strings.Contains(body, "(NATS) is unavailable") || !json.Valid([]byte(body)) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	if prep, _ := p.convs.calls(); len(prep) != 1 {
		t.Fatalf("Prepare was asked while NATS was down: %d calls", len(prep))
	}
	if r := [3]telemetry.ProxyReport{reports.next(t), reports.next(t), reports.next(t)}; len(up.requests()) != 1 || r[0].Outcome != OutcomeCompacted ||
		r[1].Outcome != OutcomeFailed || r[2].Outcome != OutcomeFailed {
		t.Fatalf("upstream got %d requests; reports %+v", len(up.requests()), r)
	}
}

func TestNATSDownPassForwardsTheRequestAsSent(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	nc, stop := natsDownConn(t)
	p := newTestProxy(t, up, func(c *Config, o *Options) { o.NATS, c.OnNATSDown = nc, NATSDownPass })
	stop()
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1", "Authorization", "Bearer k")
	body := readAll(t, resp)
	if resp.StatusCode != 200 || body != `{"reply":"ok","usage":{"in":5,"out":2}}` ||
		resp.Header.Get(StatusHeader) != StatusPassthrough || resp.Header.Get(PassthroughHeader) != PassNATSDown {
		t.Fatalf("%d %s %v", resp.StatusCode, body, resp.Header)
	}
	got := up.requests()
	if len(got) != 1 || string(got[0].body) != chatBody || got[0].header.Get("Authorization") != "Bearer k" {
		t.Fatalf("upstream got %+v", got)
	}
}

func TestPrepareFailingOnTheConnectionIsNATSDown(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	nc, _ := natsDownConn(t)
	// A real connection error: a request nobody answers.
	_, noResponders := nc.Request("proxy.test.nobody", nil, 5*time.Second)
	if noResponders == nil {
		t.Fatal("a request nobody answers was answered")
	}
	for _, mode := range []string{NATSDownFail, NATSDownPass} {
		p := newTestProxy(t, up, func(c *Config, o *Options) { o.NATS, c.OnNATSDown = nc, mode })
		p.convs.prepareErr = fmt.Errorf("store: %w", noResponders)
		resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1")
		want := map[string]int{NATSDownFail: 503, NATSDownPass: 200}[mode]
		if resp.StatusCode != want || (mode == NATSDownPass && resp.Header.Get(PassthroughHeader) != PassNATSDown) {
			t.Fatalf("%s: %d %v", mode, resp.StatusCode, resp.Header)
		}
	}
	// Any other failure of Prepare is the proxy's own 500, not a pass-through.
	p := newTestProxy(t, up, func(c *Config, o *Options) { o.NATS, c.OnNATSDown = nc, NATSDownPass })
	p.convs.prepareErr = fmt.Errorf("something else")
	if resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1"); resp.StatusCode != 500 {
		t.Fatalf("other error: %d", resp.StatusCode)
	}
}
