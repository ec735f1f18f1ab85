package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// The newest message is the second result of a tool round (an agent loop's ordinary
// request): the cut keeps the call with its results (it used to drop the call and leave
// the newest result without it, which every provider refuses).
func TestDropOldestKeepsTheNewestRound(t *testing.T) {
	big := strings.Repeat("x", 4000)
	msgs := []schemas.Message{
		{Role: schemas.RoleUser, Content: schemas.Text("summary")},
		{Role: schemas.RoleUser, Content: schemas.Text("do it " + big)},
		{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{
			{ID: "a", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}},
			{ID: "b", Type: "function", Function: schemas.FunctionCall{Name: "f", Arguments: "{}"}}}},
		{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(big)},
		{Role: schemas.RoleTool, ToolCallID: "b", Content: schemas.Text("small")},
	}
	cx := &assemble.Context{Messages: msgs, Seqs: []uint64{0, 5, 6, 7, 8}, HasSummary: true, Tokens: tokens.Messages(msgs)}
	dropOldest(cx, 200)
	if err := rounds.CheckPairs(cx.Messages[1:]); err != nil {
		var roles []string
		for _, m := range cx.Messages {
			roles = append(roles, string(m.Role))
		}
		t.Fatalf("after dropOldest: %s: %v", strings.Join(roles, ","), err)
	}
}

// The client's own messages (no summary among them) cut to fit: the oldest go until it
// fits (they used to be taken for summaries and kept).
func TestFitWithoutASummaryFits(t *testing.T) {
	var msgs []schemas.Message
	for i := 0; i < 400; i++ {
		msgs = append(msgs, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(strings.Repeat("word ", 200))},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(strings.Repeat("word ", 200))})
	}
	msgs = append(msgs, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("newest")})
	kept := withPending(&assemble.Context{}, msgs)
	limit := 4000
	out, err := fit(kept, limit)
	if err != nil {
		t.Fatal(err)
	}
	if out.Tokens > limit || tokens.Messages(out.Messages) > limit {
		t.Fatalf("cut to %d tokens (counted %d) for a limit of %d (client sent %d)", out.Tokens, tokens.Messages(out.Messages), limit, kept.Tokens)
	}
}

// The context never exceeds the window less the output the request reserves (a floor
// of a quarter of the window used to let the two together exceed it); a request that
// reserves the whole window is refused.
func TestBoundsLeaveRoomForTheOutput(t *testing.T) {
	set := policy.Defaults()
	set.ContextWindow = 8000
	s := &Store{settings: func(context.Context, string) (policy.Settings, error) { return set, nil }}
	b, err := s.bounds(context.Background(), "c", 7000)
	if err != nil {
		t.Fatal(err)
	}
	if b.limit+7000 > set.ContextWindow {
		t.Fatalf("limit %d + max_tokens 7000 > window %d", b.limit, set.ContextWindow)
	}
	if _, err := s.bounds(context.Background(), "c", 8000); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a request reserving the whole window: %v; want a bad request", err)
	}
}

// An Anthropic SDK pointed at the proxy calls GET /v1/models with its x-api-key: it
// goes to the Anthropic upstream (every path not under /v1/messages used to go to the
// OpenAI upstream, and the Anthropic key with it).
func TestAnthropicClientsOtherPathsGoToTheAnthropicUpstream(t *testing.T) {
	up := newFakeUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{}`)) })
	p := newTestProxy(t, up, nil)
	req, _ := http.NewRequest(http.MethodGet, p.http.URL+"/v1/models", nil)
	req.Header.Set("X-Api-Key", "sk-ant-secret")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := p.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs := up.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests; want 1", len(reqs))
	}
	if r := reqs[0]; r.path != "/anthropic/v1/models" || r.header.Get("X-Api-Key") != "sk-ant-secret" {
		t.Fatalf("the request went to %s %s; want the Anthropic upstream's /v1/models with its key", r.method, r.path)
	}
}

// A reply over the bound the proxy keeps is given to the client whole and not stored:
// an upstream cannot make the proxy hold an unbounded reply.
func TestReplyOverTheBoundIsRelayedNotStored(t *testing.T) {
	defer func(old int) { maxReply = old }(maxReply)
	maxReply = 64
	long := strings.Repeat("z", 500)
	up := newFakeUpstream(t, replyJSON(long))
	p := newTestProxy(t, up, nil)
	resp := p.post(t, "/v1/chat/completions", chatBody, ConversationHeader, "c1")
	if body := readAll(t, resp); !strings.Contains(body, long) || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %q", resp.StatusCode, body)
	}
	if _, fin := p.convs.calls(); len(fin) != 0 {
		t.Fatalf("a reply over the bound was stored: %+v", fin)
	}
}

// A stream's end ([DONE]) reaches the client only after its reply is stored: an SDK
// sends its next turn the moment it reads the end, and must find its reply in place.
// The handler runs on this goroutine, so what it has written when Finish runs is read
// without a race.
func TestStreamEndReachesTheClientAfterTheReplyIsStored(t *testing.T) {
	release := make(chan struct{})
	close(release)
	up := newFakeUpstream(t, streamUpstream(release, "data: {\"text\":\"lo\"}\n\ndata: [DONE]\n\n"))
	p := newTestProxy(t, up, nil)
	rec := httptest.NewRecorder()
	var atFinish string
	p.convs.onFinish = func() { atFinish = rec.Body.String() }
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set(ConversationHeader, "c1")
	p.srv.Handler().ServeHTTP(rec, req)
	if strings.Contains(atFinish, "[DONE]") {
		t.Fatalf("when the reply was stored the client had %q; want no end yet", atFinish)
	}
	if !strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
		t.Fatalf("the client got %q", rec.Body.String())
	}
}
