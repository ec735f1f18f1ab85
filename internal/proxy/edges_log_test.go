package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// An upstream that cannot be reached is logged with its URL (never a credential) and
// the cause, for a rewritten request and a passed-through one, so an operator sees
// which upstream failed and why.
func TestUnreachableUpstreamIsLoggedWithItsURLAndCause(t *testing.T) {
	const planted = "sk-planted-77aa"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, _ *Options) { c.Upstream = "http://user:hunter2@" + ln.Addr().String() + "/v1base" })
	p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1", "Authorization", "Bearer "+planted)
	p.post(t, "/v1/models?key="+planted, ``, "Authorization", "Bearer "+planted)
	logs := p.logs.String()
	lines := 0
	for l := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(l, "upstream unreachable") {
			continue
		}
		lines++
		if !strings.Contains(l, dead) || !strings.Contains(l, "/v1base") || !strings.Contains(l, "connection refused") {
			t.Errorf("the log line names no upstream URL or cause: %s", l)
		}
	}
	if lines != 2 {
		t.Fatalf("%d lines say the upstream is unreachable; want 2:\n%s", lines, logs)
	}
	if strings.Contains(logs, planted) || strings.Contains(logs, "hunter2") {
		t.Fatalf("a credential is in the log:\n%s", logs)
	}
}

// At start the proxy logs each upstream (without credentials), and says when one is
// the public API it defaults to.
func TestStartLogsTheUpstreamsAndTheDefaults(t *testing.T) {
	logs := &syncBuffer{}
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = "http://user:hunter2@127.0.0.1:9/v1base"
	s, err := New(cfg, nil, newMemConvs(), Options{Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "proxy listening") {
		if time.Now().After(deadline) {
			t.Fatalf("no start line:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	out := logs.String()
	for _, want := range []string{"http://127.0.0.1:9/v1base", "https://api.anthropic.com", "https://generativelanguage.googleapis.com",
		`"default":"COMPACTOR_PROXY_ANTHROPIC_UPSTREAM,COMPACTOR_PROXY_GEMINI_UPSTREAM"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the start log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Fatalf("a credential is in the log:\n%s", out)
	}
	if !strings.Contains(out, "public API") {
		t.Fatalf("nothing says an upstream is the public default:\n%s", out)
	}
}
