package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/mcpserver"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// mcpRun is one run of compactor mcp on stdio, in process, with a client session on
// its stdin and stdout.
type mcpRun struct {
	cs     *mcp.ClientSession
	errOut *syncBuffer
	done   chan error
}

// startMCP runs compactor mcp with args and connects an MCP client to its stdio.
func startMCP(t *testing.T, args ...string) *mcpRun {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &mcpRun{errOut: &syncBuffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		err := run(ctx, append([]string{"mcp"}, args...), stdio{in: inR, out: outW, err: r.errOut}, os.LookupEnv)
		outW.CloseWithError(io.EOF)
		inR.Close()
		r.done <- err
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctxFor(t, 30*time.Second), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		cancel()
		t.Fatalf("connect to compactor mcp %v: %v (stderr: %s; exit: %v)", args, err, r.errOut, <-r.done)
	}
	r.cs = cs
	t.Cleanup(func() {
		cs.Close()
		cancel()
		<-r.done
	})
	return r
}

// stop closes the client's end (stdin) and returns the command's error: nil, as a
// client that goes ends the server.
func (r *mcpRun) stop(t *testing.T) error {
	t.Helper()
	r.cs.Close()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("compactor mcp did not end when its stdin closed")
	}
	return nil
}

// toolCall calls a tool and returns whether it was an error, its text and its
// structured content decoded into out (when not an error).
func toolCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) (bool, string) {
	t.Helper()
	res, err := cs.CallTool(ctxFor(t, 60*time.Second), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if !res.IsError && out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res.IsError, text.String()
}

// compactor mcp on stdio against a conversation a real worker compacted (the fake LLM
// summarizing): status says what the summary covers; recall by query and by range
// returns raw messages the summary replaced, secrets redacted; another conversation is
// refused; an unknown one is an error; closing stdin ends it with exit 0.
func TestMCPRecallsACompactedConversation(t *testing.T) {
	env := testEnv(t, 4000)
	withStack(t, env, fakellm.New(t))
	const conv = "mcp-compacted"
	msgs, needles := fakellm.NeedleConversation(10)
	secret := `{"role":"user","content":"the staging DB_PASSWORD=Tr0ub4dor-and-3 is for later"}` + "\n"
	if _, errOut, err := cli(t, secret+jsonl(msgs), "publish", conv); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	if _, errOut, err := cli(t, `{"role":"user","content":"not yours"}`+"\n", "publish", "mcp-other"); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	compactOrCompacted(t, conv, func() bool {
		cx, _, err := cli(t, "", "context", conv)
		return err == nil && strings.Contains(cx, "[Summary of the earlier conversation")
	})

	r := startMCP(t, "--conversation", conv)
	if !strings.Contains(r.errOut.String(), "serving conversation mcp-compacted on stdio") {
		t.Fatalf("start-up line: %q", r.errOut)
	}
	lt, err := r.cs.ListTools(ctxFor(t, 30*time.Second), nil)
	if err != nil || len(lt.Tools) != 2 || lt.Tools[0].Name != "recall" || lt.Tools[1].Name != "status" {
		t.Fatalf("tools: %+v, %v; want recall and status (no pin: read-only)", lt, err)
	}

	var st mcpserver.Status
	if isErr, text := toolCall(t, r.cs, "status", nil, &st); isErr {
		t.Fatalf("status: %s", text)
	}
	if st.Generation < 1 || st.CoveredThroughSeq == 0 || st.TailStartSeq <= st.CoveredThroughSeq || st.CompactedAt == "" ||
		st.TokensBefore <= st.TokensAfter || st.ContextTokens == 0 {
		t.Fatalf("status = %+v; want a compaction covering the older messages", st)
	}

	t.Logf("status: generation %d, %d tokens before the compaction, %d after, %d in the context now; summary through seq %d, tail from %d",
		st.Generation, st.TokensBefore, st.TokensAfter, st.ContextTokens, st.CoveredThroughSeq, st.TailStartSeq)
	// The first needle was summarized away: recall finds its raw message.
	var rc mcpserver.Recalled
	if isErr, text := toolCall(t, r.cs, "recall", map[string]any{"query": needles[0]}, &rc); isErr {
		t.Fatalf("recall: %s", text)
	}
	if rc.Returned != 1 || rc.Messages[0].Seq > st.CoveredThroughSeq || !strings.Contains(rc.Messages[0].Content, needles[0]) {
		t.Fatalf("recall of %s = %+v; want its message, covered by the summary (through seq %d)", needles[0], rc, st.CoveredThroughSeq)
	}
	// A range of the summarized part, whole tool rounds in stream order.
	rc = mcpserver.Recalled{}
	if isErr, text := toolCall(t, r.cs, "recall", map[string]any{"from_seq": 1, "to_seq": 6}, &rc); isErr {
		t.Fatalf("recall of a range: %s", text)
	}
	if rc.Returned != 6 || !rc.ScanComplete || rc.CutByBudget {
		t.Fatalf("recall of seq 1 to 6 = %+v; want all 6", rc)
	}
	// The secret of seq 1 is redacted in the answer.
	isErr, text := toolCall(t, r.cs, "recall", map[string]any{"query": "DB_PASSWORD"}, &rc)
	if isErr || strings.Contains(text, "Tr0ub4dor") || !strings.Contains(text, "DB_PASSWORD") || rc.Redacted != 1 {
		t.Fatalf("recall of the secret: %s; want it redacted", text)
	}

	if isErr, text := toolCall(t, r.cs, "recall", map[string]any{"conversation": "mcp-other"}, nil); !isErr ||
		!strings.Contains(text, "serves conversation mcp-compacted only, not mcp-other") {
		t.Fatalf("recall of another conversation: %s; want it refused", text)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("compactor mcp after its client closed stdin: %v; want exit 0", err)
	}

	// Any conversation, when the operator allows it; an unknown one says so.
	r = startMCP(t, "--any-conversation")
	if isErr, text := toolCall(t, r.cs, "recall", map[string]any{"conversation": "mcp-other"}, &rc); isErr || rc.Returned != 1 {
		t.Fatalf("recall of a named conversation: %s", text)
	}
	if isErr, text := toolCall(t, r.cs, "status", map[string]any{"conversation": "mcp-nobody"}, nil); !isErr ||
		!strings.Contains(text, "conversation mcp-nobody not found: nothing was published to it") {
		t.Fatalf("status of an unknown conversation: %s", text)
	}
}

// compactor mcp --allow-pin lists pin beside recall and status; pinning a message the
// summary covers (a tool result: its whole round) writes the conversation's pins, and
// the next compaction by the real worker brings the round back verbatim: pinned_seqs
// holds it, and the context the agent reads shows it.
func TestMCPPinBringsBackASummarizedRound(t *testing.T) {
	env := testEnv(t, 4000)
	withStack(t, env, fakellm.New(t))
	const conv = "mcp-pin"
	msgs, _ := fakellm.NeedleConversation(10)
	if _, errOut, err := cli(t, jsonl(msgs), "publish", conv); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	compactOrCompacted(t, conv, func() bool {
		cx, _, err := cli(t, "", "context", conv)
		return err == nil && strings.Contains(cx, "[Summary of the earlier conversation")
	})
	r := startMCP(t, "--conversation", conv, "--allow-pin")
	if !strings.Contains(r.errOut.String(), "(tools: recall, status, pin)") {
		t.Fatalf("start-up line: %q", r.errOut)
	}
	lt, err := r.cs.ListTools(ctxFor(t, 30*time.Second), nil)
	if err != nil || len(lt.Tools) != 3 {
		t.Fatalf("tools: %+v, %v; want recall, status and pin", lt, err)
	}
	var st mcpserver.Status
	if isErr, text := toolCall(t, r.cs, "status", nil, &st); isErr || st.CoveredThroughSeq < 4 {
		t.Fatalf("status: %s; want the first turns summarized", text)
	}
	// seq 4 is the first turn's tool result (system prompt, user, call, result).
	var p mcpserver.Pinned
	if isErr, text := toolCall(t, r.cs, "pin", map[string]any{"seq": 4}, &p); isErr || !slices.Equal(p.Seqs, []uint64{3, 4}) || !p.Summarized {
		t.Fatalf("pin of seq 4: %s; want its round (3, 4), summarized now", text)
	}
	var more []schemas.Message // plain turns: no tool call ids like the first turns'
	for i := range 12 {
		role := schemas.RoleUser
		if i%2 == 1 {
			role = schemas.RoleAssistant
		}
		more = append(more, schemas.Message{Role: role, Content: schemas.Text(fmt.Sprintf("Later turn %d. ", i) + strings.Repeat("x", 1500))})
	}
	if _, errOut, err := cli(t, jsonl(more), "publish", conv); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	compactOrCompacted(t, conv, func() bool {
		var st mcpserver.Status
		isErr, _ := toolCall(t, r.cs, "status", nil, &st)
		return !isErr && slices.Contains(st.PinnedSeqs, 3) && slices.Contains(st.PinnedSeqs, 4)
	})
	st = mcpserver.Status{}
	if isErr, text := toolCall(t, r.cs, "status", nil, &st); isErr || !slices.Contains(st.PinnedSeqs, 3) || !slices.Contains(st.PinnedSeqs, 4) {
		t.Fatalf("status after the next compaction: %s; want seq 3 and 4 pinned", text)
	}
	// The system prompt (seq 1) is pinned for good by the value: pinning it takes no pin.
	p = mcpserver.Pinned{}
	if isErr, text := toolCall(t, r.cs, "pin", map[string]any{"seq": 1}, &p); isErr || !p.AlreadyPinned || !slices.Equal(p.Pins, []uint64{3, 4}) {
		t.Fatalf("pin of the system prompt: %s; want already pinned, the pins unchanged", text)
	}
	out, errOut, err := cli(t, "", "context", conv)
	if err != nil {
		t.Fatalf("context: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, `"call_0"`) || strings.Contains(out, `"call_1"`) || !strings.Contains(out, "build log line with nothing of note") {
		t.Fatalf("context after the next compaction lacks the pinned round:\n%.2000s", out)
	}
}

// The configuration of compactor mcp is checked before it connects.
func TestMCPSettings(t *testing.T) {
	testEnv(t, 128000)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "mcp needs its conversation"},
		{[]string{"--conversation", "a.b"}, nil, "--conversation:"},
		{[]string{"conv"}, nil, "mcp takes no arguments"},
		{nil, map[string]string{"COMPACTOR_MCP_ANY_CONVERSATION": "maybe"}, "COMPACTOR_MCP_ANY_CONVERSATION"},
		{[]string{"--conversation", "c"}, map[string]string{"COMPACTOR_MCP_ALLOW_PIN": "maybe"}, "COMPACTOR_MCP_ALLOW_PIN"},
		{[]string{"--conversation", "c", "--max-tokens", "-1"}, nil, "max tokens"},
		{[]string{"--conversation", "c", "--listen", "0.0.0.0:0"}, nil, "set COMPACTOR_MCP_TOKEN"},
		{[]string{"--conversation", "c", "--listen", "nowhere"}, nil, "want host:port"},
		{nil, map[string]string{"COMPACTOR_MCP_CONVERSATION": "c", "COMPACTOR_MCP_LISTEN": "10.1.2.3:1", "COMPACTOR_MCP_TOKEN": "short"}, "at least 16"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := cli(t, "", append([]string{"mcp"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != exitUsage {
				t.Fatalf("mcp %v: %v (exit %d); want %q, exit %d", tc.args, err, exitCode(err), tc.want, exitUsage)
			}
		})
	}
}

// As the reader of deploy/nats/accounts.conf, compactor mcp bound to one conversation
// reads it and refuses another; run as a reader the server does not let read CHAT, a
// recall is the tool's error naming the refused subject at once (not a timeout), and
// the server goes on serving.
func TestMCPUnderTheReaderRole(t *testing.T) {
	testEnv(t, 128000)
	conf, err := os.ReadFile(rolestest.AccountsConf())
	if err != nil {
		t.Fatal(err)
	}
	url, connect := rolestest.Server(t)
	if _, err := jetstream.Provision(ctxFor(t, 30*time.Second), connect("admin").NC, jetstream.DefaultConfig()); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	as := func(user, url string) {
		t.Setenv("COMPACTOR_NATS_URL", url)
		t.Setenv("COMPACTOR_NATS_USER", user)
		t.Setenv("COMPACTOR_NATS_PASSWORD", os.Getenv(rolestest.PasswordVar(user)))
		t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", "_INBOX_"+user)
	}
	as("producer", url)
	for _, conv := range []string{"mcp-mine", "mcp-theirs"} {
		if _, errOut, err := cli(t, `{"role":"user","content":"the code of `+conv+` is 4711"}`+"\n", "publish", conv); err != nil {
			t.Fatalf("publish as producer: %v\n%s", err, errOut)
		}
	}
	as("reader", url)
	r := startMCP(t, "--conversation", "mcp-mine")
	var rc mcpserver.Recalled
	if isErr, text := toolCall(t, r.cs, "recall", map[string]any{"query": "4711"}, &rc); isErr || rc.Returned != 1 || rc.Conversation != "mcp-mine" {
		t.Fatalf("recall as reader: %s", text)
	}
	for _, tool := range []string{"recall", "status"} {
		if isErr, text := toolCall(t, r.cs, tool, map[string]any{"conversation": "mcp-theirs"}, nil); !isErr || !strings.Contains(text, "refused") {
			t.Fatalf("%s of another conversation as reader: %s; want it refused", tool, text)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// A reader without the right to read CHAT: the server opens (it binds to the results
	// bucket only), and each tool call is refused at once, naming the subject.
	noChat := regexp.MustCompile(`(?m)^\s*"\$JS\.API\.(DIRECT|STREAM\.MSG)\.GET\.CHAT".*\n`)
	narrowed := string(conf)
	start := strings.Index(narrowed, "user: reader")
	end := start + strings.Index(narrowed[start:], "subscribe:")
	narrowed = narrowed[:start] + noChat.ReplaceAllString(narrowed[start:end], "") + narrowed[end:]
	if narrowed == string(conf) {
		t.Fatal("the reader's rights to read CHAT were not found in accounts.conf")
	}
	path := jstest.WriteFile(t, "accounts.conf", []byte(narrowed))
	narrow := rolestest.Start(t, path, rolestest.Users)
	if _, err := jetstream.Provision(ctxFor(t, 30*time.Second), narrow.Connect("admin").NC, jetstream.DefaultConfig()); err != nil {
		t.Fatalf("provision as admin: %v", err)
	}
	as("reader", narrow.URL)
	r = startMCP(t, "--conversation", "mcp-mine")
	for range 2 { // the first refusal does not end the server
		isErr, text := toolCall(t, r.cs, "recall", map[string]any{"query": "4711"}, nil)
		if !isErr || !strings.Contains(text, "permission denied: the server does not let this user publish $JS.API.") || !strings.Contains(text, "CHAT") {
			t.Fatalf("recall as a reader refused CHAT: %s; want the refusal naming the subject", text)
		}
	}
}

// With --listen, compactor mcp serves streamable HTTP; with COMPACTOR_MCP_TOKEN a
// request without the bearer token is refused (401), a browser's cross-origin one too
// (403), and one with it served.
func TestMCPStreamableHTTP(t *testing.T) {
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	if _, errOut, err := cli(t, `{"role":"user","content":"over HTTP"}`+"\n", "publish", "mcp-http"); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	const token = "a-token-of-twenty-chars"
	t.Setenv("COMPACTOR_MCP_TOKEN", token)
	t.Setenv("COMPACTOR_MCP_CONVERSATION", "mcp-http")
	errOut := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"mcp", "--listen", "127.0.0.1:0"}, stdio{in: strings.NewReader(""), out: io.Discard, err: errOut}, os.LookupEnv)
	}()
	addr := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`)
	var endpoint string
	eventually(t, 30*time.Second, "compactor mcp to listen", func() bool {
		if m := addr.FindStringSubmatch(errOut.String()); m != nil {
			endpoint = m[1]
		}
		return endpoint != ""
	})

	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without the token: %s; want 401", resp.Status)
	}

	// A browser's cross-origin request is refused, token or not.
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-origin request: %s; want 403", resp.Status)
	}

	hc := &http.Client{Transport: withHeader{"Authorization", "Bearer " + token, http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctxFor(t, 30*time.Second),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v (%s)", err, errOut)
	}
	var rc mcpserver.Recalled
	if isErr, text := toolCall(t, cs, "recall", map[string]any{"query": "http"}, &rc); isErr || rc.Returned != 1 {
		t.Fatalf("recall over HTTP: %s", text)
	}
	// Stopped with a client still connected, its event stream open: the stream ends
	// with the server.
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("compactor mcp --listen stopped with %v; want exit 0", err)
	}
	cs.Close()
}

// withHeader adds one header to every request.
type withHeader struct {
	key, value string
	next       http.RoundTripper
}

func (h withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return h.next.RoundTrip(r)
}

// As a tenant's reader of deploy/nats/tenants.conf, compactor mcp reaches its own
// tenant's conversations only, through its tenant's service: the same id in another
// tenant is another conversation, and one only another tenant has is not found.
func TestMCPTenantReaderReadsItsTenantOnly(t *testing.T) {
	env := testEnv(t, 128000)
	r := rolestest.TenantsServer(t)
	admin := r.Connect("admin")
	for _, tenant := range rolestest.Tenants {
		cfg, err := jetstream.DefaultConfig().ForTenant(tenant)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jetstream.Provision(ctxFor(t, 30*time.Second), admin.NC, cfg); err != nil {
			t.Fatalf("provision %s as admin: %v", tenant, err)
		}
	}
	file := jstest.WriteFile(t, "tenants.json", []byte(`{"tenants": {"acme": {}, "globex": {}}}`))
	api := r.Auth("api")
	env.NATSURL, env.NATSUser, env.NATSPassword, env.NATSInbox = r.URL, api.User, api.Password, api.InboxPrefix
	env.Roles, env.TenantsFile, env.DrainTimeout = "api", file, 30*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	logs := &syncBuffer{}
	go func() { served <- serve(ctx, env, stdio{out: io.Discard, err: logs}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	eventually(t, 30*time.Second, "both tenants' services", func() bool {
		_, a := admin.NC.Request("compactor.acme.status", nil, time.Second)
		_, g := admin.NC.Request("compactor.globex.status", nil, time.Second)
		return a == nil && g == nil
	})
	as := func(user string) {
		a := r.Auth(user)
		t.Setenv("COMPACTOR_NATS_URL", r.URL)
		t.Setenv("COMPACTOR_NATS_USER", a.User)
		t.Setenv("COMPACTOR_NATS_PASSWORD", a.Password)
		t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", a.InboxPrefix)
	}
	publish := func(user, conv, text string) {
		as(user)
		if _, errOut, err := cli(t, `{"role":"user","content":"`+text+`"}`+"\n", "publish", conv); err != nil {
			t.Fatalf("publish to %s as %s: %v\n%s", conv, user, err, errOut)
		}
	}
	publish("globex-producer", "shared", "globex's secret plan")
	publish("globex-producer", "globex-only", "globex's own conversation")
	publish("acme-producer", "shared", "acme's plan")

	as("acme-reader")
	m := startMCP(t, "--any-conversation")
	var rc mcpserver.Recalled
	isErr, text := toolCall(t, m.cs, "recall", map[string]any{"conversation": "shared"}, &rc)
	if isErr || rc.Returned != 1 || !strings.Contains(text, "acme's plan") || strings.Contains(text, "globex") {
		t.Fatalf("acme-reader's recall of shared: %s; want acme's message only", text)
	}
	for _, tool := range []string{"recall", "status"} {
		if isErr, text := toolCall(t, m.cs, tool, map[string]any{"conversation": "globex-only"}, nil); !isErr ||
			!strings.Contains(text, "conversation globex-only not found") || strings.Contains(text, "globex's own") {
			t.Fatalf("acme-reader's %s of globex's conversation: %s; want not found", tool, text)
		}
	}
	var st mcpserver.Status
	if isErr, text := toolCall(t, m.cs, "status", map[string]any{"conversation": "shared"}, &st); isErr || st.ContextMessages != 1 {
		t.Fatalf("acme-reader's status of shared: %s", text)
	}
	if l := logs.String(); strings.Contains(strings.ToLower(l), "permission") {
		t.Errorf("serve logged a refusal:\n%s", l)
	}
}

// The built binary on real stdio, as an MCP client starts it: the tools answer, and
// when the client closes stdin the process exits 0 by itself.
func TestMCPBinaryOnStdio(t *testing.T) {
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	if _, errOut, err := cli(t, `{"role":"user","content":"started by a client"}`+"\n", "publish", "mcp-bin"); err != nil {
		t.Fatalf("publish: %v\n%s", err, errOut)
	}
	cmd := exec.Command(proctest.Compactor(t), "mcp", "--conversation", "mcp-bin")
	cmd.Env = os.Environ()
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctxFor(t, 30*time.Second), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatalf("connect: %v\n%s", err, stderr)
	}
	var rc mcpserver.Recalled
	if isErr, text := toolCall(t, cs, "recall", map[string]any{"query": "client"}, &rc); isErr || rc.Returned != 1 {
		t.Fatalf("recall: %s\n%s", text, stderr)
	}
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("compactor mcp exited with %v after its stdin closed; want 0\n%s", err, stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("compactor mcp did not exit when its stdin closed\n%s", stderr)
	}
	if !strings.HasPrefix(stderr.String(), "compactor mcp: serving conversation mcp-bin on stdio") {
		t.Fatalf("stderr: %q", stderr)
	}
}

// compactOrCompacted compacts conv and waits until done holds. The trigger may have
// compacted it first (the tests' windows are small): then the manual compaction finds
// nothing left to compact, and done holds once the trigger's compaction is written.
func compactOrCompacted(t *testing.T, conv string, done func() bool) {
	t.Helper()
	out, errOut, err := cli(t, "", "compact", conv, "--wait", "60s")
	if err == nil && strings.Contains(out, "completed") {
		if !done() {
			t.Fatalf("compacted, but not as the test needs: %s", out)
		}
		return
	}
	said := out + errOut
	if err != nil {
		said += err.Error() // compact returns its refusal (busy, nothing to compact) as its error
	}
	if !strings.Contains(said, "nothing to compact") && !strings.Contains(said, "already pending") {
		t.Fatalf("compact: %v\n%s%s", err, out, errOut)
	}
	eventually(t, 60*time.Second, "the trigger's compaction of "+conv, done)
}
