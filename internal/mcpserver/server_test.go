package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/mcpserver"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// fixture is a provisioned in-process NATS with a client and its store.
type fixture struct {
	nc *nats.Conn
	st *jetstream.Store
	cl *pipeline.Client
	fn func(cfg mcpserver.Config) *mcp.ClientSession
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	f := &fixture{nc: nc, st: st, cl: pipeline.NewWithStore(nc, st)}
	f.fn = func(cfg mcpserver.Config) *mcp.ClientSession {
		t.Helper()
		s, err := mcpserver.New(f.cl, mcpserver.StoreTombstones(nc, st), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return connect(t, s)
	}
	return f
}

// connect runs s on one end of in-memory transports and returns a client session on
// the other, both closed at cleanup.
func connect(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func (f *fixture) publish(t *testing.T, conv string, msgs ...string) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, m := range msgs {
		seq, err := f.st.Chat().Publish(ctxFor(t), conv, []byte(m), "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// call calls a tool and returns its result, failing the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(ctxFor(t), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s %v: %v", tool, args, err)
	}
	return r
}

// resultText is the text of a result's content.
func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// decode reads a successful result's structured content into out.
func decode(t *testing.T, r *mcp.CallToolResult, out any) {
	t.Helper()
	if r.IsError {
		t.Fatalf("tool error: %s", resultText(r))
	}
	b, err := json.Marshal(r.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	if resultText(r) == "" {
		t.Fatal("no text content beside the structured one: a client that reads only text gets nothing")
	}
}

// wantError checks that r is a tool error whose text holds want.
func wantError(t *testing.T, r *mcp.CallToolResult, want string) {
	t.Helper()
	if !r.IsError || !strings.Contains(resultText(r), want) {
		t.Fatalf("result (error %v): %s; want a tool error with %q", r.IsError, resultText(r), want)
	}
}

// The tools are listed with their input schemas, typed, bounded and read-only; the
// conversation argument is required only when the server is bound to none; no pin tool
// unless it is allowed (TestPinToolListedOnlyWhenAllowed).
func TestToolsAndSchemas(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name         string
		cfg          mcpserver.Config
		wantRequired bool
	}{
		{"bound", mcpserver.Config{Conversation: "c1"}, false},
		{"any", mcpserver.Config{AnyConversation: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := f.fn(tc.cfg)
			lt, err := cs.ListTools(ctxFor(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range lt.Tools {
				names = append(names, tool.Name)
				if tool.Annotations == nil || !tool.Annotations.ReadOnlyHint {
					t.Errorf("%s is not marked read-only", tool.Name)
				}
				if tool.OutputSchema == nil {
					t.Errorf("%s has no output schema", tool.Name)
				}
				b, _ := json.Marshal(tool.InputSchema)
				var sc struct {
					Type       string                     `json:"type"`
					Properties map[string]json.RawMessage `json:"properties"`
					Required   []string                   `json:"required"`
				}
				if err := json.Unmarshal(b, &sc); err != nil || sc.Type != "object" || sc.Properties["conversation"] == nil {
					t.Fatalf("%s input schema %s: want an object with a conversation property", tool.Name, b)
				}
				if got := slices.Contains(sc.Required, "conversation"); got != tc.wantRequired {
					t.Errorf("%s: conversation required = %v; want %v (%s)", tool.Name, got, tc.wantRequired, b)
				}
				if tool.Name == mcpserver.RecallTool {
					type prop struct {
						Type      string   `json:"type"`
						Minimum   *float64 `json:"minimum"`
						Maximum   *float64 `json:"maximum"`
						MaxLength *int     `json:"maxLength"`
					}
					p := map[string]prop{}
					for k, v := range sc.Properties {
						var x prop
						json.Unmarshal(v, &x)
						p[k] = x
					}
					for _, k := range []string{"from_seq", "to_seq", "max_tokens"} {
						if p[k].Type != "integer" || p[k].Minimum == nil || *p[k].Minimum != 0 {
							t.Errorf("recall schema: %s is %+v; want an integer, minimum 0", k, p[k])
						}
					}
					if m := p["max_tokens"].Maximum; m == nil || *m != schemas.MaxRecallMaxTokens {
						t.Errorf("recall schema: max_tokens has no maximum %d: %s", schemas.MaxRecallMaxTokens, b)
					}
					if q := p["query"]; q.Type != "string" || q.MaxLength == nil || *q.MaxLength != schemas.MaxRecallQueryBytes {
						t.Errorf("recall schema: query is %+v; want a string of at most %d", q, schemas.MaxRecallQueryBytes)
					}
				}
			}
			if !slices.Equal(names, []string{"recall", "status"}) {
				t.Fatalf("tools %v; want recall and status only (read-only: no pin)", names)
			}
			// The schema is enforced: a negative sequence is refused before any read.
			r := call(t, cs, "recall", map[string]any{"conversation": "c1", "from_seq": -1})
			wantError(t, r, "from_seq")
		})
	}
}

// recall by query and by range, bounded by the server's cap, names what the budget
// left out; a conversation other than the bound one is refused.
func TestRecallQueryRangeAndBudget(t *testing.T) {
	f := newFixture(t)
	const conv = "mcp-recall"
	seqs := f.publish(t, conv,
		`{"role":"user","content":"Open config.yaml"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"read","arguments":"{\"path\":\"config.yaml\"}"}}]}`,
		`{"role":"tool","tool_call_id":"t1","content":"port: 8443\nhost: db.internal"}`,
		`{"role":"assistant","content":"The port is 8443. `+strings.Repeat("padding words ", 200)+`"}`,
	)
	f.publish(t, "someone-else", `{"role":"user","content":"db.internal is mine"}`)
	cs := f.fn(mcpserver.Config{Conversation: conv, MaxTokens: 300})

	var got mcpserver.Recalled
	decode(t, call(t, cs, "recall", map[string]any{"query": "DB.INTERNAL"}), &got)
	if got.Conversation != conv || got.Returned != 2 || len(got.Messages) != 2 || got.Messages[0].Seq != seqs[1] || got.Messages[1].Seq != seqs[2] {
		t.Fatalf("recall by query = %+v; want the tool call %d and its result %d", got, seqs[1], seqs[2])
	}
	if tc := got.Messages[0].ToolCalls; len(tc) != 1 || tc[0].Name != "read" || !strings.Contains(got.Messages[1].Content, "db.internal") {
		t.Fatalf("recalled messages %+v", got.Messages)
	}

	got = mcpserver.Recalled{}
	decode(t, call(t, cs, "recall", map[string]any{"from_seq": seqs[0], "to_seq": seqs[0]}), &got)
	if got.Returned != 1 || got.Messages[0].Seq != seqs[0] || got.Messages[0].Content != "Open config.yaml" || !got.ScanComplete {
		t.Fatalf("recall of a range = %+v", got)
	}

	// The newest message alone is over the cap: cut by the budget, named, and the
	// asked budget over the cap is lowered to it and reported.
	got = mcpserver.Recalled{}
	decode(t, call(t, cs, "recall", map[string]any{"max_tokens": 100000}), &got)
	if got.MaxTokens != 300 || got.AskedMaxTokens != 100000 || !got.CutByBudget || !slices.Contains(got.SkippedSeqs, seqs[3]) ||
		got.Tokens > 300 || !strings.Contains(got.Note, "left out by the budget") || !strings.Contains(got.Note, "over this server's cap") {
		t.Fatalf("recall over the cap = %+v; want max_tokens 300, asked 100000, seq %d left out and named", got, seqs[3])
	}
	for _, m := range got.Messages {
		if m.Seq == seqs[3] {
			t.Fatalf("the message over the budget was returned: %+v", got)
		}
	}

	// Bound: another conversation is refused, by name; the bound one by name is fine.
	wantError(t, call(t, cs, "recall", map[string]any{"conversation": "someone-else", "query": "db.internal"}),
		"serves conversation mcp-recall only, not someone-else")
	wantError(t, call(t, cs, "status", map[string]any{"conversation": "someone-else"}), "not someone-else")
	if r := call(t, cs, "recall", map[string]any{"conversation": conv, "query": "config"}); r.IsError {
		t.Fatalf("recall naming the bound conversation: %s", resultText(r))
	}

	// Unbound with any allowed: the call names its conversation, and must.
	cs = f.fn(mcpserver.Config{AnyConversation: true})
	got = mcpserver.Recalled{}
	decode(t, call(t, cs, "recall", map[string]any{"conversation": "someone-else"}), &got)
	if got.Conversation != "someone-else" || got.Returned != 1 {
		t.Fatalf("recall of a named conversation = %+v", got)
	}
	wantError(t, call(t, cs, "recall", map[string]any{"query": "x"}), "conversation") // required by the schema
}

// The recall answer redacts secrets as the summary's evidence does: in content, tool
// call arguments and results, reasoning; the raw message in CHAT is unchanged.
func TestRecallRedactsSecrets(t *testing.T) {
	f := newFixture(t)
	const conv = "mcp-secrets"
	const key = "sk-proj-Abcdefghijklmnopqrstuvwxyz0123456789ABCD"
	const pw = "hunter2-Very-Secret"
	f.publish(t, conv,
		`{"role":"user","content":"deploy with OPENAI_API_KEY=`+key+`"}`,
		`{"role":"assistant","content":null,"reasoning":"the password is in the flag --password `+pw+`","tool_calls":[{"id":"t1","type":"function","function":{"name":"sh","arguments":"{\"cmd\":\"psql postgres://admin:`+pw+`@db/x\"}"}}]}`,
		`{"role":"tool","tool_call_id":"t1","content":[{"type":"text","text":"Authorization: Bearer `+key+`"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
		`{"role":"assistant","content":"done, nothing secret here"}`,
	)
	cs := f.fn(mcpserver.Config{Conversation: conv})
	r := call(t, cs, "recall", map[string]any{})
	var got mcpserver.Recalled
	decode(t, r, &got)
	all := resultText(r)
	b, _ := json.Marshal(r.StructuredContent)
	all += string(b)
	for _, secret := range []string{key, pw} {
		if strings.Contains(all, secret) {
			t.Fatalf("the answer holds the secret %q:\n%s", secret, all)
		}
	}
	if got.Returned != 4 || got.Redacted != 3 || !strings.Contains(all, evidence.Redacted) || !strings.Contains(got.Note, "secrets redacted in 3") {
		t.Fatalf("recall = %+v; want 4 messages, 3 of them redacted", got)
	}
	for _, m := range got.Messages {
		if m.Role == "tool" && !strings.Contains(m.Content, "[image]") {
			t.Fatalf("tool result %q: want the image part named", m.Content)
		}
		if m.Content == "done, nothing secret here" {
			continue
		}
	}
	// What is stored is unchanged: redaction is of the answer only.
	raw, err := f.cl.Recall(ctxFor(t), conv, pipeline.Query(key))
	if err != nil || raw.Returned == 0 {
		t.Fatalf("the raw recall no longer finds the key: %+v, %v", raw, err)
	}
}

// An unknown and a forgotten conversation are tool errors, each saying which.
func TestUnknownAndForgotten(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "gone", `{"role":"user","content":"forget me"}`)
	if _, err := f.st.Forget(ctxFor(t), "gone"); err != nil {
		t.Fatal(err)
	}
	cs := f.fn(mcpserver.Config{AnyConversation: true})
	for _, tool := range []string{"recall", "status"} {
		wantError(t, call(t, cs, tool, map[string]any{"conversation": "never-here"}), "conversation never-here not found: nothing was published to it")
		wantError(t, call(t, cs, tool, map[string]any{"conversation": "gone"}), "conversation gone was forgotten at")
	}
	wantError(t, call(t, cs, "recall", map[string]any{"conversation": "bad.id"}), "conversation")
}

// status of a conversation never compacted says so, with its context now.
func TestStatusNeverCompacted(t *testing.T) {
	f := newFixture(t)
	f.publish(t, "fresh", `{"role":"user","content":"hello"}`, `{"role":"assistant","content":"hi"}`)
	cs := f.fn(mcpserver.Config{Conversation: "fresh"})
	var got mcpserver.Status
	decode(t, call(t, cs, "status", nil), &got)
	if got.Generation != 0 || got.ContextMessages != 2 || got.ContextTokens == 0 || got.PinnedSeqs == nil ||
		!strings.Contains(got.Note, "never compacted") {
		t.Fatalf("status = %+v", got)
	}
}

// The configuration is checked: a server needs a conversation or leave to take any.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  mcpserver.Config
		want string
	}{
		{mcpserver.Config{}, "no conversation"},
		{mcpserver.Config{Conversation: "a.b"}, "conversation"},
		{mcpserver.Config{Conversation: "a", MaxTokens: -1}, "max tokens"},
		{mcpserver.Config{Conversation: "a", ScanLimit: 2_000_000}, "scan limit"},
		{mcpserver.Config{Conversation: "a", CallTimeout: -time.Second}, "call timeout"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (&mcpserver.Config{AnyConversation: true}).Validate(); err != nil {
		t.Error(err)
	}
	if _, err := mcpserver.New(nil, nil, mcpserver.Config{Conversation: "a"}); err == nil {
		t.Error("New without a client: no error")
	}
}

// However long the conversation, one recall's text stays within the cap: at most 8
// bytes per token of it (a message never counts less than a token per 8 bytes).
func TestRecallAnswerIsBoundedInBytes(t *testing.T) {
	f := newFixture(t)
	const conv = "mcp-long"
	var msgs []string
	for i := range 60 {
		// Markup and shell: <, > and & must reach the model as they are, not as
		// six-byte escapes.
		msgs = append(msgs, `{"role":"user","content":"`+strings.Repeat("<a>&", 75)+strings.Repeat("x", i)+`"}`)
	}
	f.publish(t, conv, msgs...)
	const capTokens = 500
	cs := f.fn(mcpserver.Config{Conversation: conv, MaxTokens: capTokens})
	var got mcpserver.Recalled
	r := call(t, cs, "recall", map[string]any{"max_tokens": 1_000_000})
	decode(t, r, &got)
	text := len(resultText(r)) // what the model reads, JSON and all
	if got.Returned == 0 || got.Returned == 60 || !got.CutByBudget || text > 8*capTokens || got.MaxTokens != capTokens {
		t.Fatalf("recall of 60 messages of 300 bytes with a cap of %d tokens: %d returned, %d bytes of text, %+v", capTokens, got.Returned, text, got)
	}
	t.Logf("%d of 60 messages returned, %d bytes of text for a cap of %d tokens", got.Returned, text, capTokens)
}

// A query is matched against what the model reads, secrets redacted: a guess at a
// secret is refused when it has a secret's shape, and one that matches only inside a
// secret finds nothing, neither returned nor named as left out by the budget. Before,
// matched told, guess after guess, whether a redacted password started with a text.
func TestRecallQueryIsNoOracleOnRedactedSecrets(t *testing.T) {
	f := newFixture(t)
	const conv = "mcp-oracle"
	var msgs []string
	for i := range 12 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"step %d: the staging DB_PASSWORD=Tr0ub4dor-and-3 is for later, and the host is db-7"}`, i))
	}
	f.publish(t, conv, msgs...)
	cs := f.fn(mcpserver.Config{Conversation: conv})
	wantError(t, call(t, cs, "recall", map[string]any{"query": "DB_PASSWORD=Tr0ub"}), "looks like a secret")
	for _, budget := range []int{0, 20} {
		var got mcpserver.Recalled
		decode(t, call(t, cs, "recall", map[string]any{"query": "tr0ub4dor", "max_tokens": budget}), &got)
		if got.Matched != 0 || got.Returned != 0 || len(got.SkippedSeqs) != 0 || got.CutByBudget || got.MoreSkipped {
			t.Fatalf("budget %d: a query matching only inside a secret: %+v; want nothing matched, returned or left out", budget, got)
		}
	}
	// What is outside the secret is found as before.
	var got mcpserver.Recalled
	decode(t, call(t, cs, "recall", map[string]any{"query": "host is db-7", "max_tokens": 60}), &got)
	if got.Matched == 0 || got.Returned == 0 || len(got.SkippedSeqs) == 0 {
		t.Fatalf("a query outside the secret: %+v; want matches, some returned, some named as left out", got)
	}
}

// A query's matching tool rounds that the budget left out are named in skipped_seqs
// when the match is where the model can read it: each is read again whole (a round's
// first message alone is no unit) to check.
func TestRecallNamesSkippedToolRoundsThatMatch(t *testing.T) {
	f := newFixture(t)
	const conv = "mcp-rounds"
	var msgs []string
	for i := range 8 {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"sh","arguments":"{\"cmd\":\"make\"}"}}]}`, i),
			fmt.Sprintf(`{"role":"tool","tool_call_id":"c%d","content":"build %d failed: undefined: frobnicate %s"}`, i, i, strings.Repeat("x", 200)))
	}
	f.publish(t, conv, msgs...)
	cs := f.fn(mcpserver.Config{Conversation: conv})
	var got mcpserver.Recalled
	decode(t, call(t, cs, "recall", map[string]any{"query": "frobnicate", "max_tokens": 150}), &got)
	if got.Returned == 0 || len(got.SkippedSeqs) == 0 || !got.CutByBudget || got.Matched <= got.Returned/2 {
		t.Fatalf("matching tool rounds past the budget: %+v; want some returned and the rest named in skipped_seqs", got)
	}
}
