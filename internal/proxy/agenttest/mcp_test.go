package agenttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakeupstream"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/schemas"
)

// An agent given compactor mcp as an MCP server, one line of its configuration, recalls
// a detail a conversation's summary left out: the scripted model calls the server's
// recall tool by the name the agent gives it, and the raw message it returns reaches
// the model in the next request. The detail is in no request before the call, the
// query names only the topic, and the agent's own history never held the detail.
func TestClaudeCodeRecallsThroughMCP(t *testing.T) {
	runMCPRecall(t, claudeCode, func(t *testing.T, ss *session, cfg string) {
		ss.extraArgs = []string{"--mcp-config", cfg, "--strict-mcp-config"}
	})
}

// The same through Codex's MCP client (its config.toml names the server).
func TestCodexRecallsThroughMCP(t *testing.T) {
	runMCPRecall(t, codex, nil)
}

// The same through Gemini CLI's (settings.json's mcpServers).
func TestGeminiCLIRecallsThroughMCP(t *testing.T) {
	runMCPRecall(t, geminiCLI, nil)
}

// The same through OpenCode's (opencode.json's mcp).
func TestOpenCodeRecallsThroughMCP(t *testing.T) {
	runMCPRecall(t, openCode, nil)
}

// recallDetail is the detail the conversation's summary leaves out, and recallTopic
// the query the model asks about it with.
// deferredRecall finds the name an agent gives compactor mcp's recall tool.
var deferredRecall = regexp.MustCompile(`mcp__[A-Za-z0-9_-]*compactor[A-Za-z0-9_-]*__recall`)

const (
	recallDetail = "db-staging-42.internal port 6543"
	recallTopic  = "staging database"
)

func runMCPRecall(t *testing.T, a agent, configure func(t *testing.T, ss *session, mcpConfig string)) {
	jsDir(t, a.bin)
	s := startStack(t, 64000, command)
	conv := "mcp-" + randomHex(6)
	ctx := ctxFor(t, time.Minute)
	// The agent's window fits its tools; the recalled conversation's is small, so that
	// it is compacted after a few messages.
	if _, err := s.pc.Policy(ctx, schemas.PolicyRequest{Conversation: conv, Set: map[string]any{"context_window": 6000}}); err != nil {
		t.Fatal(err)
	}
	// The conversation the MCP server is started for: the detail early on, then enough
	// to compact it behind a summary.
	msgs := []schemas.Message{{Role: schemas.RoleUser, Content: schemas.Text("Note for later: the " + recallTopic + " is on host " + recallDetail + ".")},
		{Role: schemas.RoleAssistant, Content: schemas.Text("Noted.")}}
	for i := range 30 {
		msgs = append(msgs, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("Step %d: build the module and report. %s", i, strings.Repeat("nothing of note here; ", 30)))},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(fmt.Sprintf("Step %d built.", i))})
	}
	for _, m := range msgs {
		if _, err := s.pc.Publish(ctx, conv, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pc.Compact(ctx, conv); err != nil {
		t.Fatal(err)
	}
	waitSummary(t, s, conv)
	cx, err := s.pc.Context(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cx.Messages {
		if strings.Contains(m.Content.String(), "db-staging-42") {
			t.Fatalf("the compacted context still shows the detail (%s): nothing to recall", m.Role)
		}
	}

	bin := proctest.Compactor(t)
	env := map[string]string{"COMPACTOR_NATS_URL": s.nats.ClientURL()}
	var (
		mu        sync.Mutex
		toolNames []string
		called    string
	)
	// The scripted model: with a recall tool declared and no recall answered yet, it
	// calls it about the topic; once a request carries the detail, it answers with it.
	s.fake.Respond = func(r *fakeupstream.Request) fakeupstream.Reply {
		conversation := fakeupstream.Conversation(r)
		if !r.Summarizer {
			t.Logf("model request %s: %d tools %v", r.Path, len(fakeupstream.ToolNames(r)), fakeupstream.ToolNames(r))

		}
		if strings.Contains(conversation, "db-staging-42") {
			return fakeupstream.Reply{Text: "The staging database: " + recallDetail + "."}
		}
		for _, name := range fakeupstream.ToolNames(r) {
			if strings.HasSuffix(name, "recall") {
				mu.Lock()
				toolNames = fakeupstream.ToolNames(r)
				first := called == ""
				called = name
				mu.Unlock()
				if !first && fakeupstream.EndsWithToolResult(r) {
					return fakeupstream.Reply{Text: "The recall found nothing."}
				}
				args, _ := json.Marshal(map[string]any{"query": recallTopic})
				return fakeupstream.Reply{Text: "Let me recall that.", ToolCalls: []fakeupstream.ToolCall{fakeupstream.ToolCallTo(r, name, string(args))}}
			}
		}
		// Claude Code defers MCP tools: their names are listed in the conversation, and
		// the model fetches a tool's schema with ToolSearch before it can call it.
		if name := deferredRecall.FindString(conversation); name != "" && slices.Contains(fakeupstream.ToolNames(r), "ToolSearch") &&
			!strings.Contains(conversation, "select:"+name) {
			args, _ := json.Marshal(map[string]any{"query": "select:" + name})
			return fakeupstream.Reply{Text: "Let me find the recall tool.", ToolCalls: []fakeupstream.ToolCall{{Name: "ToolSearch", Arguments: string(args)}}}
		}
		return agentReply(s.fake, r, command)
	}

	// Through the proxy, as an agent with both runs: its history, the model's call of
	// the MCP tool included, goes through the proxy's rewriting.
	base := s.rec.URL
	if a.name == geminiCLI.name {
		base += "/c/gemini-" + randomHex(6) // Gemini CLI names no session: its base URL does
	}
	ss := newSession(t, a, s, base)
	switch a.name {
	case claudeCode.name:
		cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"compactor": map[string]any{
			"command": bin, "args": []string{"mcp", "--conversation", conv}, "env": env}}})
		path := filepath.Join(ss.home, "mcp.json")
		writeFile(t, path, string(cfg))
		configure(t, ss, path)
	case geminiCLI.name:
		cfg, _ := json.Marshal(map[string]any{
			"security": map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
			"privacy":  map[string]any{"usageStatisticsEnabled": false}, "telemetry": map[string]any{"enabled": false},
			"general": map[string]any{"disableAutoUpdate": true, "disableUpdateNag": true},
			"mcpServers": map[string]any{"compactor": map[string]any{"command": bin, "args": []string{"mcp", "--conversation", conv},
				"env": env, "trust": true}}})
		writeFile(t, filepath.Join(ss.home, ".gemini", "settings.json"), string(cfg))
	case openCode.name:
		path := filepath.Join(ss.work, "opencode.json")
		var cfg map[string]any
		b, err := os.ReadFile(path)
		if err != nil || json.Unmarshal(b, &cfg) != nil {
			t.Fatalf("opencode.json: %v", err)
		}
		cfg["mcp"] = map[string]any{"compactor": map[string]any{"type": "local", "command": []string{bin, "mcp", "--conversation", conv},
			"environment": env, "enabled": true}}
		b, _ = json.MarshalIndent(cfg, "", "  ")
		writeFile(t, path, string(b))
	case codex.name:
		writeFile(t, filepath.Join(ss.home, ".codex", "config.toml"), codexConfig(s.rec.URL)+fmt.Sprintf(`
[mcp_servers.compactor]
command = %q
args = ["mcp", "--conversation", %q]
env = { COMPACTOR_NATS_URL = %q }
`, bin, conv, env["COMPACTOR_NATS_URL"]))
	}
	out := ss.run("Where is the staging database? Use the recall tool.")

	mu.Lock()
	defer mu.Unlock()
	if called == "" {
		for _, x := range s.rec.exchanges() {
			t.Logf("through the proxy: %s %s: %d %v", x.Method, x.Path, x.Status, x.Header)
		}
		t.Fatalf("%s declared no compactor recall tool to the model (tools %v); output:\n%s", a.name, toolNames, tail(out, 2000))
	}
	t.Logf("%s named the tool %s", a.name, called)
	// The detail reached the model only after the call: in a tool result of a request
	// that followed it.
	reqs := s.fake.Requests()
	found := -1
	for i, r := range reqs {
		if r.Summarizer {
			continue
		}
		if strings.Contains(fakeupstream.Conversation(r), "db-staging-42") {
			found = i
			break
		}
	}
	if found < 0 {
		t.Fatalf("%s: the recalled message never reached the model (%d requests); output:\n%s", a.name, len(reqs), tail(out, 2000))
	}
	if !fakeupstream.EndsWithToolResult(reqs[found]) {
		t.Errorf("%s: the detail first reached the model in a request that does not end with a tool result", a.name)
	}
	if a.name == codex.name && !strings.Contains(string(reqs[found].Body), `"namespace":"mcp__compactor"`) {
		// The call is of a function of the MCP server's namespace: sent back without its
		// namespace, the provider would not know the function.
		t.Errorf("codex: the model's call of the MCP tool came back without its namespace:\n%s", tail(string(reqs[found].Body), 3000))
	}
	if !strings.Contains(out, "db-staging-42") {
		t.Errorf("%s printed no answer with the detail:\n%s", a.name, tail(out, 2000))
	}
}
