package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRoutingRewritesTheTwoAPIsAndPassesTheRestThrough(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (r.URL.Path == "/base/v1/chat/completions" || r.URL.Path == "/anthropic/v1/messages") {
			replyJSON("ok")(w, r)
			return
		}
		w.Header().Set("X-Upstream", "yes")
		fmt.Fprintf(w, "other %s %s", r.Method, r.URL.Path)
	})
	p := newTestProxy(t, up, nil)

	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		resp := p.post(t, path, chatBody, ConversationHeader, "c1")
		if resp.StatusCode != 200 || resp.Header.Get(StatusHeader) != StatusCompacted {
			t.Fatalf("%s: status %d %q", path, resp.StatusCode, resp.Header.Get(StatusHeader))
		}
	}
	got := up.requests()
	if len(got) != 2 || got[0].path != "/base/v1/chat/completions" || got[1].path != "/anthropic/v1/messages" {
		t.Fatalf("upstream got %+v", got)
	}
	// The rewritten body: only the client's last message (the memConvs context), every
	// other field as sent.
	var sent map[string]any
	if err := json.Unmarshal(got[0].body, &sent); err != nil {
		t.Fatal(err)
	}
	if msgs := sent["messages"].([]any); len(msgs) != 1 || sent["temperature"] != 0.5 {
		t.Fatalf("upstream body %s", got[0].body)
	}
	if prep, _ := p.convs.calls(); len(prep) != 2 {
		t.Fatalf("Prepare called %d times", len(prep))
	}

	// Everything else passes through unchanged, marked so: other methods, other paths,
	// paths under /v1/messages to the Anthropic upstream.
	for _, c := range []struct{ method, path, upstreamPath string }{
		{http.MethodGet, "/v1/models?limit=2", "/base/v1/models"},
		{http.MethodPost, "/v1/embeddings", "/base/v1/embeddings"},
		{http.MethodGet, "/v1/chat/completions", "/base/v1/chat/completions"},
		{http.MethodPost, "/v1/messages/count_tokens", "/anthropic/v1/messages/count_tokens"},
	} {
		req, _ := http.NewRequest(c.method, p.http.URL+c.path, strings.NewReader(`{"x":1}`))
		req.Header.Set(ConversationHeader, "c1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		resp.Body.Close()
		if body != "other "+c.method+" "+c.upstreamPath || resp.Header.Get("X-Upstream") != "yes" ||
			resp.Header.Get(StatusHeader) != StatusPassthrough || resp.Header.Get(PassthroughHeader) != PassNotRewritten {
			t.Fatalf("%s %s: %q %v", c.method, c.path, body, resp.Header)
		}
	}
	if last := up.requests()[2]; last.query != "limit=2" {
		t.Fatalf("query not forwarded: %+v", last)
	}
	if prep, _ := p.convs.calls(); len(prep) != 2 {
		t.Fatalf("a passed-through request reached Prepare: %d calls", len(prep))
	}
}

func TestBodyOverTheLimitIs413(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("ok"))
	p := newTestProxy(t, up, func(c *Config, _ *Options) { c.MaxBody = 64 })
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1")
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "COMPACTOR_PROXY_MAX_BODY") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	if len(up.requests()) != 0 {
		t.Fatal("a refused body went upstream")
	}
	// Under the limit, the same body goes.
	p = newTestProxy(t, up, func(c *Config, _ *Options) { c.MaxBody = int64(len(chatBody)) })
	if resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1"); resp.StatusCode != 200 {
		t.Fatalf("status %d at the limit", resp.StatusCode)
	}
}

// streamUpstream sends one event, waits for release, then sends the rest (ending with
// tail).
func streamUpstream(release <-chan struct{}, tail string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Request-Id", "req-s")
		fmt.Fprint(w, "data: {\"text\":\"Hel\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, tail)
	}
}

func TestStreamIsFlushedAsItArrivesAndStoredAtItsEnd(t *testing.T) {
	release := make(chan struct{})
	up := newFakeUpstream(t, streamUpstream(release, "data: {\"text\":\"lo\"}\r\n\r\ndata: [DONE]\n\n"))
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
	if resp.Header.Get(StatusHeader) != StatusCompacted || resp.Header.Get(GenerationHeader) != "7" ||
		resp.Header.Get(TokensSentHeader) != "11" || resp.Header.Get(TokensClientHead) != "100" || resp.Header.Get("X-Request-Id") != "req-s" {
		t.Fatalf("headers %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	// The first event reaches the client while the upstream still holds the rest.
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"text\":\"Hel\"}\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	if _, fin := p.convs.calls(); len(fin) != 0 {
		t.Fatal("stored before the stream's end")
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest %q", rest)
	}
	<-p.convs.finishedCh
	_, fin := p.convs.calls()
	if len(fin) != 1 || fin[0].reply.Content.String() != "Hello" || fin[0].conv != "c1" {
		t.Fatalf("finished %+v", fin)
	}
}

func TestStreamBrokenBeforeItsEndGetsTheErrorEventAndIsNotStored(t *testing.T) {
	for name, handle := range map[string]http.HandlerFunc{
		"clean EOF before [DONE]": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"text\":\"Hel\"}\n\n")
		},
		"connection cut": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"text\":\"Hel\"}\n\n")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		},
	} {
		t.Run(name, func(t *testing.T) {
			up := newFakeUpstream(t, handle)
			reports := make(reportsOf, 4)
			p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Observer = reports })
			resp := p.post(t, "/v1/messages", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
			body := readAll(t, resp)
			want := "data: {\"text\":\"Hel\"}\n\n" + string(testWire{}.StreamError("the upstream stream ended before its end (compactor proxy)"))
			if resp.StatusCode != 200 || body != want {
				t.Fatalf("status %d body %q", resp.StatusCode, body)
			}
			if _, fin := p.convs.calls(); len(fin) != 0 {
				t.Fatalf("a broken stream was stored: %+v", fin)
			}
			if r := reports.next(t); r.Outcome != OutcomeFailed {
				t.Fatalf("report %+v", r)
			}
		})
	}
}

func TestUpstreamErrorEventPassesThroughAndIsNotStored(t *testing.T) {
	events := "data: {\"text\":\"Hel\"}\n\nevent: error\ndata: {\"type\":\"overloaded_error\"}\n\n"
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, events)
	})
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/messages", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
	if body := readAll(t, resp); body != events {
		t.Fatalf("body %q", body)
	}
	if _, fin := p.convs.calls(); len(fin) != 0 {
		t.Fatalf("stored %+v", fin)
	}
}

func TestClientThatDisconnectsCancelsTheUpstreamAndStoresNothing(t *testing.T) {
	cancelled := make(chan struct{})
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"text\":\"Hel\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	reports := make(reportsOf, 1)
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Observer = reports })
	req, _ := http.NewRequest(http.MethodPost, p.http.URL+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set(ConversationHeader, "c1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the client goes away mid-stream
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	r := reports.next(t)
	if _, fin := p.convs.calls(); len(fin) != 0 || r.Outcome != OutcomeFailed {
		t.Fatalf("stored %+v, outcome %s", fin, r.Outcome)
	}
}

func TestWholeReplyIsStoredThenGivenVerbatim(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("the answer"))
	reports := make(reportsOf, 1)
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Observer = reports })
	p.convs.branch = "edit"
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1")
	body := readAll(t, resp)
	if body != `{"reply":"the answer","usage":{"in":5,"out":2}}` || resp.Header.Get("X-Request-Id") != "req-1" ||
		resp.Header.Get(BranchHeader) != "edit" || resp.Header.Get(ConversationHeader) != "c1" || resp.Header.Get(CutHeader) != "" {
		t.Fatalf("body %q headers %v", body, resp.Header)
	}
	_, fin := p.convs.calls()
	if len(fin) != 1 || fin[0].reply.Content.String() != "the answer" || fin[0].usage == nil || fin[0].usage.Input != 5 {
		t.Fatalf("finished %+v", fin)
	}
	if rep := reports.next(t); rep.Outcome != OutcomeCompacted || rep.Stored != 4 || !rep.HasUsage {
		t.Fatalf("report %+v", rep)
	}
}

func TestUpstreamRefusalReachesTheClientVerbatim(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.Header().Set("X-Ratelimit-Remaining-Requests", "0")
		w.Header().Set("Request-Id", "req-429")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"slow down"}}`)
	})
	p := newTestProxy(t, up, nil)
	for _, stream := range []string{"false", "true"} {
		resp := p.post(t, "/v1/chat/completions", `{"stream":`+stream+`,"messages":[{"role":"user","content":"hi"}]}`, ConversationHeader, "c1")
		body := readAll(t, resp)
		if resp.StatusCode != 429 || body != `{"error":{"message":"slow down"}}` || resp.Header.Get("Retry-After") != "7" ||
			resp.Header.Get("X-Ratelimit-Remaining-Requests") != "0" || resp.Header.Get("Request-Id") != "req-429" {
			t.Fatalf("status %d body %q headers %v", resp.StatusCode, body, resp.Header)
		}
	}
	if _, fin := p.convs.calls(); len(fin) != 0 {
		t.Fatalf("a refusal was stored: %+v", fin)
	}
}

func TestRefusalsAreInTheAPIsErrorShape(t *testing.T) {
	up := newFakeUpstream(t, replyJSON("x"))
	p := newTestProxy(t, up, nil)

	resp := p.post(t, "/v1/chat/completions", `{"messages":[]}`, ConversationHeader, "c1")
	var oa struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&oa); err != nil || resp.StatusCode != 400 ||
		oa.Error.Message != "bad request: messages: at least one is required" || oa.Error.Type != "invalid_request_error" {
		t.Fatalf("openai: %d %+v %v", resp.StatusCode, oa, err)
	}
	resp = p.post(t, "/v1/messages", `not json`, ConversationHeader, "c1")
	var an struct {
		Type  string
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&an); err != nil || resp.StatusCode != 400 || an.Type != "error" ||
		!strings.HasPrefix(an.Error.Message, "bad request: body is not JSON") {
		t.Fatalf("anthropic: %d %+v %v", resp.StatusCode, an, err)
	}

	p.convs.prepareErr = fmt.Errorf("conversation c1: %w", ErrNotOwner)
	resp = p.post(t, "/v1/messages", chatBody, ConversationHeader, "c1", "x-api-key", "k2")
	if err := json.NewDecoder(resp.Body).Decode(&an); err != nil || resp.StatusCode != 403 || an.Error.Type != "permission_error" ||
		!strings.Contains(an.Error.Message, ErrNotOwner.Error()) {
		t.Fatalf("not owner: %d %+v %v", resp.StatusCode, an, err)
	}
	if len(up.requests()) != 0 {
		t.Fatal("a refused request went upstream")
	}
}

func TestClientThatDisconnectsBeforeAWholeReplyStoresNothing(t *testing.T) {
	arrived, cancelled := make(chan struct{}), make(chan struct{})
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(cancelled)
	})
	reports := make(reportsOf, 1)
	p := newTestProxy(t, up, func(_ *Config, o *Options) { o.Observer = reports })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.http.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set(ConversationHeader, "c1")
	go func() {
		<-arrived
		cancel() // the client goes away while the upstream works
	}()
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the request was answered")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled")
	}
	if r := reports.next(t); r.Outcome != OutcomeFailed {
		t.Fatalf("report %+v", r)
	}
	if prep, fin := p.convs.calls(); len(prep) != 1 || len(fin) != 0 {
		t.Fatalf("prepared %d, finished %+v", len(prep), fin)
	}
}
