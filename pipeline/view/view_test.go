package view_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/savings/savingsview"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/pipeline/view"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
)

const testToken = "test-token-0123456789abcdef"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// settings resolves every conversation to the defaults with a small window, or to
// its own settings when the test gives some.
type settings struct {
	base policy.Settings
	err  map[string]error
}

func (s settings) Settings(_ context.Context, conv string) (policy.Settings, error) {
	return s.base, s.err[conv]
}

func testSettings(t testing.TB) settings {
	t.Helper()
	r, err := policy.NewResolver(policy.Layer{"context_window": "8000"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return settings{base: r.Base()}
}

// fixture is a view over a real in-process NATS server.
type fixture struct {
	nc  *nats.Conn
	st  *jetstream.Store
	srv *httptest.Server
}

func newFixture(t *testing.T, cfg view.Config) *fixture {
	t.Helper()
	ns := jstest.Server(t)
	nc := jstest.Conn(t, ns)
	st := jstest.Provision(t, nc)
	return newFixtureOn(t, nc, st, cfg, testSettings(t))
}

func newFixtureOn(t *testing.T, nc *nats.Conn, st *jetstream.Store, cfg view.Config, ps view.PolicySource) *fixture {
	t.Helper()
	v, err := view.New(cfg, st, ps, nil, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(v.Handler())
	t.Cleanup(srv.Close)
	return &fixture{nc: nc, st: st, srv: srv}
}

func tokenConfig() view.Config {
	cfg := view.DefaultConfig()
	cfg.Token, cfg.Savings = testToken, savingsview.Reader(nil)
	return cfg
}

// get requests path with the token and returns the status, headers and body.
func (f *fixture) get(t *testing.T, path string) (int, http.Header, string) {
	t.Helper()
	return f.do(t, http.MethodGet, path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) })
}

func (f *fixture) do(t *testing.T, method, path string, prepare func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(req)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// getJSON requests path and decodes a 200 answer into out.
func (f *fixture) getJSON(t *testing.T, path string, out any) {
	t.Helper()
	code, h, body := f.get(t, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	if err := json.Unmarshal([]byte(body), out); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

func (f *fixture) publish(t *testing.T, conv, payload string) uint64 {
	t.Helper()
	seq, err := f.st.Chat().Publish(ctxT(t), conv, []byte(payload), "")
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

func (f *fixture) event(t *testing.T, ev schemas.Event) {
	t.Helper()
	ev.At = time.Now().UTC()
	if err := f.st.Events().Publish(ctxT(t), ev); err != nil {
		t.Fatal(err)
	}
}

// seeded is a conversation with two compactions and a decline between them, a failed
// request after them, and hostile text in its messages and summary.
type seeded struct {
	conv             string
	seqs             []uint64
	tail1, tail2     uint64
	gen2Summary      string
	declinedAt       uint64
	failedError      string
	fallbackEventErr string
	declineReason    string
	scriptMessageSeq uint64
}

const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

func seed(t *testing.T, f *fixture, conv string) seeded {
	t.Helper()
	s := seeded{conv: conv}
	s.seqs = append(s.seqs, f.publish(t, conv, `{"role":"system","content":"You are a careful agent."}`))
	for i := range 12 {
		if i == 10 {
			s.scriptMessageSeq = f.publish(t, conv, fmt.Sprintf(`{"role":"user","content":%q}`, "look: "+hostile))
			s.seqs = append(s.seqs, s.scriptMessageSeq)
			continue
		}
		s.seqs = append(s.seqs, f.publish(t, conv, fmt.Sprintf(`{"role":"user","content":"question %d %s"}`, i, strings.Repeat("words ", 40))))
		f.publish(t, "neighbour", `{"role":"user","content":"another conversation"}`)
	}
	s.seqs = append(s.seqs, f.publish(t, conv,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call-1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"</pre><script>x()</script>\"}"}}]}`))
	s.seqs = append(s.seqs, f.publish(t, conv, `{"role":"tool","tool_call_id":"call-1","content":"file body"}`))
	s.tail1, s.tail2 = s.seqs[5], s.seqs[9]
	ctx := ctxT(t)
	v1 := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 1, Summary: "first summary",
		TailStartSeq: s.tail1, CoveredThroughSeq: s.tail1 - 1, PinnedSeqs: []uint64{s.seqs[0]}, Strategy: "keep-last-n",
		Trigger: schemas.TriggerBudget, Reason: "context 6100 tokens ≥ threshold 6000", RequestID: "req-1", Model: "model-one",
		TokensBefore: 6100, TokensAfter: 2500, MessagesBefore: 12, MessagesAfter: 6, CreatedAt: time.Now().UTC()}
	rev, err := f.st.Results().Put(ctx, v1, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.event(t, schemas.Event{Type: schemas.EventCompleted, Conversation: conv, RequestID: "req-1", Generation: 1, DurationMS: 1500})
	// A decline recorded on generation 1 (it keeps generation 1's request id).
	d := *v1
	s.declinedAt = s.seqs[8]
	d.DeclinedAtSeq = s.declinedAt
	if rev, err = f.st.Results().Put(ctx, &d, rev); err != nil {
		t.Fatal(err)
	}
	s.declineReason = "would not shrink by min_progress"
	f.event(t, schemas.Event{Type: schemas.EventDeclined, Conversation: conv, RequestID: "req-d", Generation: 1,
		Trigger: schemas.TriggerManual, TokensBefore: 3000, TokensAfter: 2900, DurationMS: 40, Error: s.declineReason})
	s.gen2Summary = "second summary " + hostile
	v2 := &schemas.Result{SchemaVersion: 1, Conversation: conv, Generation: 2, Summary: s.gen2Summary,
		TailStartSeq: s.tail2, CoveredThroughSeq: s.tail2 - 1, PinnedSeqs: []uint64{s.seqs[0]}, Strategy: "keep-last-n",
		Trigger: schemas.TriggerManual, RequestID: "req-2", Model: "extractive", Fallback: true,
		TokensBefore: 6200, TokensAfter: 2000, MessagesBefore: 9, MessagesAfter: 8, CreatedAt: time.Now().UTC()}
	if _, err = f.st.Results().Put(ctx, v2, rev); err != nil {
		t.Fatal(err)
	}
	s.fallbackEventErr = "summarizer failed, fallback summary written: 500"
	f.event(t, schemas.Event{Type: schemas.EventCompleted, Conversation: conv, RequestID: "req-2", Generation: 2, DurationMS: 2500, Error: s.fallbackEventErr})
	s.failedError = "LLM endpoint down"
	f.event(t, schemas.Event{Type: schemas.EventFailed, Conversation: conv, RequestID: "req-3", Generation: 2,
		Trigger: schemas.TriggerBudget, DurationMS: 90, Error: s.failedError})
	return s
}

// The conversation page and its JSON twin show the timeline (every kept revision, with
// the durations, errors and failures of the events), the gauge against the budget, the
// summary, the pinned messages and the tail, and what each compaction folded away.
func TestConversationPage(t *testing.T) {
	f := newFixture(t, tokenConfig())
	s := seed(t, f, "conv-1")

	var c view.Conversation
	f.getJSON(t, "/api/c/conv-1", &c)
	// The status part is compactor.status's answer.
	if c.Conversation != "conv-1" || c.Value == nil || c.Value.Generation != 2 || c.LastSeq != s.seqs[len(s.seqs)-1] || c.Pending {
		t.Errorf("status part: conversation %q value %+v last_seq %d pending %v", c.Conversation, c.Value, c.LastSeq, c.Pending)
	}
	var kinds []string
	for _, e := range c.Timeline {
		kinds = append(kinds, fmt.Sprintf("%s/%d", e.Kind, e.Generation))
	}
	if want := []string{"failed/2", "compaction/2", "declined/1", "compaction/1"}; !slices.Equal(kinds, want) {
		t.Fatalf("timeline %v; want %v (newest first)", kinds, want)
	}
	failed, gen2, declined, gen1 := c.Timeline[0], c.Timeline[1], c.Timeline[2], c.Timeline[3]
	if failed.Error != s.failedError || failed.DurationMS == nil || *failed.DurationMS != 90 {
		t.Errorf("failed entry %+v", failed)
	}
	if gen1.Folded == nil || *gen1.Folded != (view.Range{From: 1, Through: s.tail1 - 1}) {
		t.Errorf("generation 1 folded %+v; want 1..%d", gen1.Folded, s.tail1-1)
	}
	if gen2.Folded == nil || *gen2.Folded != (view.Range{From: s.tail1, Through: s.tail2 - 1}) {
		t.Errorf("generation 2 folded %+v; want %d..%d", gen2.Folded, s.tail1, s.tail2-1)
	}
	if gen1.DurationMS == nil || *gen1.DurationMS != 1500 || gen1.Model != "model-one" || gen1.Trigger != "budget" ||
		gen1.TokensBefore != 6100 || gen1.TokensAfter != 2500 || gen1.Fallback {
		t.Errorf("generation 1 entry %+v", gen1)
	}
	if gen2.DurationMS == nil || *gen2.DurationMS != 2500 || !gen2.Fallback || gen2.Error != s.fallbackEventErr || gen2.Model != "extractive" {
		t.Errorf("generation 2 entry %+v", gen2)
	}
	if declined.DeclinedAtSeq != s.declinedAt || declined.Error != s.declineReason || declined.DurationMS == nil ||
		*declined.DurationMS != 40 || declined.Folded != nil {
		t.Errorf("declined entry %+v", declined)
	}
	// The gauge is the context a reader assembles, counted as the Go client counts it.
	read, err := pipeline.NewWithStore(f.nc, f.st).Context(ctxT(t), "conv-1", pipeline.Raw())
	if err != nil {
		t.Fatal(err)
	}
	if c.Gauge.Tokens != read.Tokens || c.Context.Tokens != read.Tokens || c.Gauge.ContextWindow != 8000 ||
		c.Gauge.ThresholdTokens != 6000 || c.Gauge.TargetTokens != 4000 || c.Gauge.HardLimitTokens != 7600 {
		t.Errorf("gauge %+v; want %d tokens of 8000 (threshold 6000)", c.Gauge, read.Tokens)
	}
	if c.Context.Summary == nil || c.Context.Summary.Text != assembleSummary(s.gen2Summary) {
		t.Errorf("summary %+v", c.Context.Summary)
	}
	if len(c.Context.Pinned) != 1 || c.Context.Pinned[0].Seq != s.seqs[0] || !c.Context.Pinned[0].Pinned {
		t.Errorf("pinned %+v; want the system prompt", c.Context.Pinned)
	}
	var tail []uint64
	for _, m := range c.Context.Tail {
		tail = append(tail, m.Seq)
	}
	if !slices.Equal(tail, s.seqs[9:]) {
		t.Errorf("tail %v; want %v", tail, s.seqs[9:])
	}
	if last := c.Context.Tail[len(c.Context.Tail)-2]; len(last.ToolCalls) != 1 || last.ToolCalls[0].Name != "read_file" {
		t.Errorf("tool call message %+v", last)
	}

	// The page renders the same data.
	code, h, page := f.get(t, "/c/conv-1")
	if code != http.StatusOK || h.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %s", code, h.Get("Content-Type"))
	}
	for _, want := range []string{`id="gauge"`, `id="timeline"`, "6,100 → 2,500", "6,200 → 2,000", "1.5 s", "2.5 s",
		"model-one", s.failedError, s.declineReason, "fallback",
		fmt.Sprintf(`/c/conv-1/messages?from=%d&amp;through=%d`, s.tail1, s.tail2-1),
		fmt.Sprintf(`/c/conv-1/messages?from=1&amp;through=%d`, s.tail1-1),
		fmt.Sprintf("<strong>%s</strong> of 8,000 tokens", num(read.Tokens)), "You are a careful agent.", "read_file"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func assembleSummary(s string) string {
	return "[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\n" + s
}

func num(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Everything a conversation holds is shown as text: a script in a message, a summary
// or tool arguments renders inert, escaped.
func TestPagesEscapeEverything(t *testing.T) {
	f := newFixture(t, tokenConfig())
	s := seed(t, f, "conv-x")
	raw := f.publish(t, "conv-x", `{"role":"user","content":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`","meta":{"k":"<script>"}}`)
	for _, path := range []string{"/", "/c/conv-x", fmt.Sprintf("/c/conv-x/messages?from=%d", s.seqs[0]),
		fmt.Sprintf("/c/conv-x/messages?from=%d&through=%d", raw, raw)} {
		code, _, page := f.get(t, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, page)
		}
		for _, bad := range []string{"<script", "<img", "</pre><script"} {
			if strings.Contains(page, bad) {
				t.Errorf("%s holds %q unescaped", path, bad)
			}
		}
		if path != "/" && !strings.Contains(page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s does not show the hostile text escaped", path)
		}
	}
	// An id in the open form is checked, and the error page escapes it.
	code, _, page := f.get(t, "/c?conversation=%3Cscript%3Ealert(1)%3C/script%3E")
	if code != http.StatusBadRequest || strings.Contains(page, "<script") {
		t.Errorf("open with a hostile id: %d\n%s", code, page)
	}
}

// Without the token nothing is answered; with it, as a bearer token or the basic-auth
// password, everything is. Every answer carries the security headers.
func TestAuthentication(t *testing.T) {
	f := newFixture(t, tokenConfig())
	f.publish(t, "c1", `{"role":"user","content":"secret text"}`)
	for _, tc := range []struct {
		name    string
		prepare func(*http.Request)
		want    int
	}{
		{"none", nil, http.StatusUnauthorized},
		{"wrong bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope-nope-nope-nope") }, http.StatusUnauthorized},
		{"token prefix", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken[:20]) }, http.StatusUnauthorized},
		{"token longer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken+"x") }, http.StatusUnauthorized},
		{"wrong basic", func(r *http.Request) { r.SetBasicAuth("view", "nope") }, http.StatusUnauthorized},
		{"token as basic user", func(r *http.Request) { r.SetBasicAuth(testToken, "") }, http.StatusUnauthorized},
		{"bearer", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }, http.StatusOK},
		{"basic", func(r *http.Request) { r.SetBasicAuth("anyone", testToken) }, http.StatusOK},
	} {
		for _, path := range []string{"/", "/c/c1", "/api/c/c1", "/c/c1/messages", "/static/view.css", "/nothing"} {
			code, h, body := f.do(t, http.MethodGet, path, tc.prepare)
			want := tc.want
			if want == http.StatusOK && path == "/nothing" {
				want = http.StatusNotFound
			}
			if code != want {
				t.Errorf("%s %s: %d; want %d", tc.name, path, code, want)
			}
			if code == http.StatusUnauthorized {
				if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("%s %s: WWW-Authenticate %q", tc.name, path, h.Get("WWW-Authenticate"))
				}
				if strings.Contains(body, "secret text") {
					t.Errorf("%s %s: the refusal shows content", tc.name, path)
				}
			}
			checkSecurityHeaders(t, tc.name+" "+path, h)
		}
	}
}

func checkSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "frame-ancestors 'none'", "style-src 'self'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %q", what, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "script-src") {
		t.Errorf("%s: Content-Security-Policy %q allows scripts", what, csp)
	}
	for k, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
		"X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %s %q; want %q", what, k, got, want)
		}
	}
}

// The view only reads: any other method is refused before anything else.
func TestReadOnly(t *testing.T) {
	f := newFixture(t, tokenConfig())
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		for _, path := range []string{"/", "/c/c1", "/api/c/c1"} {
			code, h, _ := f.do(t, m, path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) })
			if code != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d Allow %q; want 405 GET, HEAD", m, path, code, h.Get("Allow"))
			}
			checkSecurityHeaders(t, m+" "+path, h)
		}
	}
	if code, _, _ := f.do(t, http.MethodHead, "/", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }); code != http.StatusOK {
		t.Errorf("HEAD /: %d", code)
	}
}

// Without a token the view answers only requests addressed to a loopback host, so a
// web page cannot reach it through a name pointed at 127.0.0.1.
func TestWithoutTokenOnlyLoopbackHosts(t *testing.T) {
	f := newFixture(t, view.DefaultConfig())
	for host, want := range map[string]int{"localhost": 200, "localhost:8080": 200, "127.0.0.1:8080": 200, "[::1]:8080": 200,
		"127.1.2.3": 200, "evil.example": 403, "evil.example:8080": 403, "10.0.0.1:80": 403, "localhost.evil.example": 403} {
		code, h, _ := f.do(t, http.MethodGet, "/", func(r *http.Request) { r.Host = host })
		if code != want {
			t.Errorf("Host %q: %d; want %d", host, code, want)
		}
		checkSecurityHeaders(t, "Host "+host, h)
	}
}

// Ids and parameters from the URL are checked before anything is read: with NATS gone,
// a bad request still gets its 400, and a good one the read's failure.
func TestRequestsAreCheckedBeforeReading(t *testing.T) {
	f := newFixture(t, tokenConfig())
	f.publish(t, "ok", `{"role":"user","content":"hi"}`)
	f.nc.Close()
	for path, want := range map[string]int{
		"/c/a.b": 400, "/c/%2A": 400, "/api/c/a%20b": 400, "/c/" + strings.Repeat("x", 129): 400,
		"/c/ok/messages?from=0": 400, "/c/ok/messages?from=x": 400, "/c/ok/messages?from=5&through=4": 400,
		"/?page=0": 400, "/?page=-1": 400, "/?page=1e3": 400, "/c?conversation=a.b": 400,
		"/c/ok": 502, "/api/c/ok": 502, "/": 502,
	} {
		code, h, body := f.get(t, path)
		if code != want {
			t.Errorf("%s: %d; want %d\n%s", path, code, want, body)
		}
		if strings.HasPrefix(path, "/api/") && h.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Errorf("%s: an API error as %q, not JSON", path, h.Get("Content-Type"))
		}
	}
}

// The list pages through the conversations, a bounded number per page, each with its
// gauge, and a page past the end is empty, not an error.
func TestListPages(t *testing.T) {
	cfg := tokenConfig()
	cfg.PageSize = 5
	f := newFixture(t, cfg)
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("conv-%02d", i)
		ids = append(ids, id)
		for range i + 1 {
			f.publish(t, id, `{"role":"user","content":"`+strings.Repeat("x", 400)+`"}`)
		}
	}
	v := &schemas.Result{SchemaVersion: 1, Conversation: "conv-03", Generation: 1, Summary: "s", TailStartSeq: 1_000_000,
		CoveredThroughSeq: 999_999, CreatedAt: time.Now().UTC()}
	if _, err := f.st.Results().Put(ctxT(t), v, 0); err != nil {
		t.Fatal(err)
	}
	var got []string
	for page := 1; page <= 4; page++ {
		var l view.List
		f.getJSON(t, fmt.Sprintf("/api/conversations?page=%d", page), &l)
		if l.Subjects != 12 || l.PageSize != 5 || l.Page != page || l.More != (page < 3) {
			t.Errorf("page %d: %+v", page, l)
		}
		if len(l.Conversations) > 5 {
			t.Errorf("page %d: %d rows; want at most 5", page, len(l.Conversations))
		}
		for _, r := range l.Conversations {
			got = append(got, r.Conversation)
			n := int(r.Messages)
			if r.Gauge == nil || (r.Conversation != "conv-03" && r.Gauge.Tokens != n*tokensOf400) || r.Error != "" {
				t.Errorf("row %+v; want a gauge of %d tokens", r, n*tokensOf400)
			}
			if r.Conversation == "conv-03" && (r.Generation != 1 || r.LastCompaction == nil || r.Gauge.Tokens >= 4*tokensOf400) {
				t.Errorf("compacted row %+v; want generation 1 and the summary instead of the messages", r)
			}
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("pages hold %v; want %v", got, ids)
	}
	code, _, page := f.get(t, "/?page=2")
	if code != http.StatusOK || !strings.Contains(page, `href="/c/conv-05"`) || !strings.Contains(page, `href="/?page=3"`) ||
		!strings.Contains(page, `href="/?page=1"`) || strings.Contains(page, `href="/c/conv-00"`) {
		t.Errorf("HTML page 2: %d\n%s", code, page)
	}
}

// tokensOf400 is the chars/4 count of a user message of 400 characters.
var tokensOf400 = func() int {
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("x", 400))}
	return tokensMessage(&m)
}()

// A range of raw messages comes a bounded page at a time, with invalid messages shown
// as such and the messages the value pins marked.
func TestMessagesPages(t *testing.T) {
	cfg := tokenConfig()
	cfg.MaxMessages = 4
	f := newFixture(t, cfg)
	var seqs []uint64
	for i := range 10 {
		if i == 6 {
			// Anything can be published on a chat subject: readers skip what breaks
			// the contract, and the view shows why.
			if err := f.nc.Publish(must(f.st.Config().ChatSubject("m")), []byte(`{"role":"wizard"}`)); err != nil {
				t.Fatal(err)
			}
			_ = f.nc.Flush()
			waitForSeqs(t, f, "m", len(seqs)+1)
			msgs, err := f.st.Chat().Load(ctxT(t), "m", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, msgs[len(msgs)-1].Seq)
			continue
		}
		seqs = append(seqs, f.publish(t, "m", fmt.Sprintf(`{"role":"user","content":"message %d"}`, i)))
	}
	v := &schemas.Result{SchemaVersion: 1, Conversation: "m", Generation: 1, Summary: "s", TailStartSeq: seqs[8],
		CoveredThroughSeq: seqs[8] - 1, PinnedSeqs: []uint64{seqs[2]}, CreatedAt: time.Now().UTC()}
	if _, err := f.st.Results().Put(ctxT(t), v, 0); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	path := fmt.Sprintf("/api/c/m/messages?from=1&through=%d", seqs[7])
	for pages := 0; ; pages++ {
		var p view.Messages
		f.getJSON(t, path, &p)
		if len(p.Messages) > 4 {
			t.Fatalf("%s: %d messages; want at most 4", path, len(p.Messages))
		}
		for _, m := range p.Messages {
			got = append(got, m.Seq)
			if m.Pinned != (m.Seq == seqs[2]) {
				t.Errorf("message %d pinned %v", m.Seq, m.Pinned)
			}
			if (m.Invalid != "") != (m.Seq == seqs[6]) || (m.Seq == seqs[6] && !strings.Contains(m.Text, "wizard")) {
				t.Errorf("message %d: invalid %q text %q", m.Seq, m.Invalid, m.Text)
			}
			if m.Time == nil {
				t.Errorf("message %d has no time", m.Seq)
			}
		}
		if p.Next == 0 {
			break
		}
		if pages > 3 {
			t.Fatal("more pages than the range holds")
		}
		path = fmt.Sprintf("/api/c/m/messages?from=%d&through=%d", p.Next, seqs[7])
	}
	if !slices.Equal(got, seqs[:8]) {
		t.Errorf("pages hold %v; want %v", got, seqs[:8])
	}
	code, _, page := f.get(t, fmt.Sprintf("/c/m/messages?from=1&through=%d", seqs[7]))
	if code != http.StatusOK || !strings.Contains(page, fmt.Sprintf(`from=%d&amp;through=%d`, seqs[4], seqs[7])) ||
		!strings.Contains(page, "pinned") {
		t.Errorf("HTML page: %d\n%s", code, page)
	}
}

func waitForSeqs(t *testing.T, f *fixture, conv string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs, err := f.st.Chat().Load(ctxT(t), conv, 0, 0)
		if err == nil && len(msgs) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d messages; want %d", conv, len(msgs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// A conversation whose value was removed, whose older generations are no longer kept,
// or whose revision does not decode still gets its page: the timeline says what is
// missing.
func TestGapsAreShownNotErrors(t *testing.T) {
	f := newFixture(t, tokenConfig())
	ctx := ctxT(t)
	var seqs []uint64
	for i := range 20 {
		seqs = append(seqs, f.publish(t, "g", fmt.Sprintf(`{"role":"user","content":"m%d"}`, i)))
	}
	var rev uint64
	for gen := uint64(1); gen <= 7; gen++ {
		v := &schemas.Result{SchemaVersion: 1, Conversation: "g", Generation: gen, Summary: fmt.Sprint("summary ", gen),
			TailStartSeq: seqs[gen*2], CoveredThroughSeq: seqs[gen*2] - 1, CreatedAt: time.Now().UTC(), RequestID: fmt.Sprint("r", gen)}
		var err error
		if rev, err = f.st.Results().Put(ctx, v, rev); err != nil {
			t.Fatal(err)
		}
	}
	var c view.Conversation
	f.getJSON(t, "/api/c/g", &c)
	var kinds []string
	for _, e := range c.Timeline {
		kinds = append(kinds, fmt.Sprintf("%s/%d", e.Kind, e.Generation))
	}
	// The bucket keeps 5 revisions: generations 3 to 7.
	if want := []string{"compaction/7", "compaction/6", "compaction/5", "compaction/4", "compaction/3", "gap/2"}; !slices.Equal(kinds, want) {
		t.Fatalf("timeline %v; want %v", kinds, want)
	}
	if g := c.Timeline[5]; !strings.Contains(g.Note, "generations 1 to 2 are no longer kept") {
		t.Errorf("gap note %q", g.Note)
	}
	if g3 := c.Timeline[4]; g3.Folded == nil || g3.Folded.From != 0 || g3.Folded.Through != seqs[6]-1 {
		t.Errorf("generation 3 folded %+v; want an unknown start through %d", g3.Folded, seqs[6]-1)
	}
	code, _, page := f.get(t, "/c/g")
	if code != http.StatusOK || !strings.Contains(page, "generations 1 to 2 are no longer kept") ||
		!strings.Contains(page, fmt.Sprintf("#… – %d", seqs[6]-1)) {
		t.Errorf("page: %d\n%s", code, page)
	}

	// A broken current value: a note, the page still renders, the timeline says why.
	kv := resultsKV(t, f)
	if _, err := kv.Put(ctx, "g", []byte(`{"schema_version":2,"conversation":"g"}`)); err != nil {
		t.Fatal(err)
	}
	c = view.Conversation{}
	f.getJSON(t, "/api/c/g", &c)
	if c.Value != nil || len(c.Notes) == 0 || !strings.Contains(strings.Join(c.Notes, " "), "schema_version 2") ||
		c.Timeline[0].Kind != view.KindInvalid {
		t.Errorf("broken value: value %v notes %v first entry %+v", c.Value, c.Notes, c.Timeline[0])
	}
	// Removed: a marker in the timeline, the tail is the whole history again.
	if err := kv.Delete(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	c = view.Conversation{}
	f.getJSON(t, "/api/c/g", &c)
	if c.Value != nil || c.Timeline[0].Kind != view.KindDeleted || len(c.Context.Tail) != 20 {
		t.Errorf("deleted value: value %v first entry %+v tail %d", c.Value, c.Timeline[0], len(c.Context.Tail))
	}
	if code, _, _ := f.get(t, "/c/g"); code != http.StatusOK {
		t.Errorf("page after delete: %d", code)
	}
	// A conversation that never existed has an empty page, not an error.
	code, _, body := f.get(t, "/api/c/nobody")
	if code != http.StatusOK || !strings.Contains(body, `"timeline": []`) {
		t.Errorf("unknown conversation: %d %s", code, body)
	}
	c = view.Conversation{}
	f.getJSON(t, "/api/c/nobody", &c)
	if c.Value != nil || len(c.Timeline) != 0 || c.LastSeq != 0 || c.Gauge.Tokens != 0 {
		t.Errorf("unknown conversation: %+v", c)
	}
	// A forgotten conversation: its tombstone, nothing else.
	if _, err := f.st.Forget(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	c = view.Conversation{}
	f.getJSON(t, "/api/c/g", &c)
	if c.Forgotten == nil || c.Forgotten.ThroughSeq != seqs[19] || len(c.Timeline) != 0 || len(c.Context.Tail) != 0 {
		t.Errorf("forgotten conversation: forgotten %+v timeline %v tail %d", c.Forgotten, c.Timeline, len(c.Context.Tail))
	}
	if code, _, page := f.get(t, "/c/g"); code != http.StatusOK || !strings.Contains(page, "forgotten") {
		t.Errorf("page of a forgotten conversation: %d", code)
	}
}

// A long tail shows its newest messages, and links to the older ones.
func TestLongTailIsBounded(t *testing.T) {
	cfg := tokenConfig()
	cfg.MaxMessages = 5
	cfg.MaxChars = 10
	f := newFixture(t, cfg)
	var seqs []uint64
	for i := range 12 {
		seqs = append(seqs, f.publish(t, "long", fmt.Sprintf(`{"role":"user","content":"message number %d"}`, i)))
	}
	var c view.Conversation
	f.getJSON(t, "/api/c/long", &c)
	var tail []uint64
	for _, m := range c.Context.Tail {
		tail = append(tail, m.Seq)
		if len([]rune(m.Text)) != 10 || m.Cut == 0 {
			t.Errorf("message %d: text %q cut %d; want 10 characters shown", m.Seq, m.Text, m.Cut)
		}
	}
	if !slices.Equal(tail, seqs[7:]) || c.Context.Omitted == nil || *c.Context.Omitted != (view.Range{From: 1, Through: seqs[7] - 1}) {
		t.Errorf("tail %v omitted %+v; want %v and 1..%d omitted", tail, c.Context.Omitted, seqs[7:], seqs[7]-1)
	}
	// The gauge counts every message, shown or not.
	read, err := pipeline.NewWithStore(f.nc, f.st).Context(ctxT(t), "long")
	if err != nil || c.Gauge.Tokens != read.Tokens {
		t.Errorf("gauge %d; want %d (%v)", c.Gauge.Tokens, read.Tokens, err)
	}
}

func tokensMessage(m *schemas.Message) int { return tokens.Message(m) }

// resultsKV is the results bucket, as the test sees it.
func resultsKV(t *testing.T, f *fixture) natsjs.KeyValue {
	t.Helper()
	js, err := natsjs.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctxT(t), f.st.Config().ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// blockingSettings holds every read of a setting until release is closed, and says on
// entered when one started.
type blockingSettings struct {
	settings
	entered chan struct{}
	release chan struct{}
}

func (b blockingSettings) Settings(ctx context.Context, conv string) (policy.Settings, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.settings.Settings(ctx, conv)
}

// Pages are built a bounded number at a time: one more waits, then gets 503.
func TestConcurrentPagesAreBounded(t *testing.T) {
	ns := jstest.Server(t)
	nc := jstest.Conn(t, ns)
	st := jstest.Provision(t, nc)
	cfg := tokenConfig()
	cfg.MaxConcurrent, cfg.QueueWait = 1, 50*time.Millisecond
	bs := blockingSettings{settings: testSettings(t), entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixtureOn(t, nc, st, cfg, bs)
	first := make(chan int, 1)
	go func() {
		code, _, _ := f.get(t, "/c/held")
		first <- code
	}()
	<-bs.entered // the first page holds the only slot
	code, h, body := f.get(t, "/api/c/other")
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(body, "too many pages") {
		t.Errorf("second page while the first is built: %d Retry-After %q %s", code, h.Get("Retry-After"), body)
	}
	close(bs.release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("first page: %d", code)
	}
	if code, _, _ := f.get(t, "/api/c/other"); code != http.StatusOK {
		t.Errorf("a page after the first is done: %d", code)
	}
}
