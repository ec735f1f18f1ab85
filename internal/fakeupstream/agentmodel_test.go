package fakeupstream

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// agentCase is one agent's conversation on its wire, cut where its last entries
// change: head + the last entries of a stage + tail is a whole body.
type agentCase struct {
	agent, path string
	head, tail  string
	// The last entries of each stage: a user prompt, a tool's result, the agent's
	// compaction prompt.
	prompt, result, compact string
	// tool is the shell tool the model must call, arg the key of its command.
	tool, arg string
	// shape is what the agent's summary must hold.
	shape []string
}

var agentCases = []agentCase{
	{agent: "claude-code", path: "/v1/messages",
		head: `{"model":"claude-x","max_tokens":1000,"stream":true,"system":[{"type":"text","text":"You are Claude Code."}],` +
			`"tools":[{"name":"Read","input_schema":{"type":"object"}},{"name":"Bash","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"remember FACT-001=red-fox"},{"role":"assistant","content":[{"type":"text","text":"noted"}]},`,
		tail:    `]}`,
		prompt:  `{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"list the files"}]}`,
		result:  `{"role":"user","content":[{"type":"text","text":"list the files"}]},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt FACT-002=blue-owl"}]}`,
		compact: `{"role":"user","content":[{"type":"text","text":"CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far, paying close attention to the user's explicit requests and your previous actions."}]}`,
		tool:    "Bash", arg: "command", shape: []string{"<analysis>", "</analysis>", "<summary>", "</summary>"}},
	{agent: "codex", path: "/v1/responses",
		head: `{"model":"gpt-x","stream":true,"instructions":"You are Codex.","tools":[{"type":"function","name":"apply_patch","parameters":{}},` +
			`{"type":"function","name":"exec_command","parameters":{}}],"input":[` +
			`{"type":"message","role":"user","content":[{"type":"input_text","text":"remember FACT-001=red-fox"}]},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"noted"}]},`,
		tail:    `]}`,
		prompt:  `{"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]}`,
		result:  `{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},{"type":"function_call_output","call_id":"call_1","output":"a.txt FACT-002=blue-owl"}`,
		compact: `{"type":"message","role":"user","content":[{"type":"input_text","text":"You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task."}]}`,
		tool:    "exec_command", arg: "cmd", shape: []string{"Critical data:"}},
	{agent: "gemini-cli", path: "/v1beta/models/gemini-x:streamGenerateContent",
		head: `{"systemInstruction":{"role":"user","parts":[{"text":"You are Gemini CLI."}]},` +
			`"tools":[{"functionDeclarations":[{"name":"read_file"},{"name":"run_shell_command"}]}],"contents":[` +
			`{"role":"user","parts":[{"text":"remember FACT-001=red-fox"}]},{"role":"model","parts":[{"text":"noted"}]},`,
		tail:    `]}`,
		prompt:  `{"role":"user","parts":[{"text":"list the files"}]}`,
		result:  `{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"ls"}},"thoughtSignature":"c2ln"}]},{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"a.txt FACT-002=blue-owl"}}}]}`,
		compact: `{"role":"user","parts":[{"text":"First, reason in your scratchpad. Then, generate the <state_snapshot>."}]}`,
		tool:    "run_shell_command", arg: "command", shape: []string{"<state_snapshot>", "<key_knowledge>", "</state_snapshot>"}},
	{agent: "opencode", path: "/v1/chat/completions",
		head: `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"read"}},` +
			`{"type":"function","function":{"name":"bash"}}],"messages":[{"role":"system","content":"You are opencode."},` +
			`{"role":"user","content":"remember FACT-001=red-fox"},{"role":"assistant","content":"noted"},`,
		tail:    `]}`,
		prompt:  `{"role":"user","content":[{"type":"text","text":"list the files"}]}`,
		result:  `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"a.txt FACT-002=blue-owl"}`,
		compact: `{"role":"user","content":"Provide a detailed prompt for continuing our conversation above. Focus on information that would be helpful for continuing the conversation."}`,
		tool:    "bash", arg: "command", shape: []string{"## Goal", "## Discoveries"}},
}

// The agent model answers each agent on its own wire: a prompt with one call of the
// agent's shell tool (the first declared one it knows), the tool's result with a
// text quoting every planted fact, the agent's compaction prompt with a summary in
// the agent's shape that keeps every fact, counted.
func TestAgentModelOnEveryWire(t *testing.T) {
	for _, tc := range agentCases {
		t.Run(tc.agent, func(t *testing.T) {
			s := New(t)
			s.Respond = s.AgentModel
			var mu sync.Mutex
			var replies []Reply
			s.Answered = func(r *Request, rep Reply) {
				mu.Lock()
				defer mu.Unlock()
				replies = append(replies, rep)
			}
			post := func(last string) (*Request, Reply, string) {
				t.Helper()
				resp, err := http.Post(s.URL()+tc.path, "application/json", strings.NewReader(tc.head+last+tc.tail))
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				mu.Lock()
				defer mu.Unlock()
				reqs := s.Agent()
				return reqs[len(reqs)-1], replies[len(replies)-1], string(body)
			}

			r, rep, body := post(tc.prompt)
			if len(rep.ToolCalls) != 1 || rep.ToolCalls[0].Name != tc.tool || r.Compaction != "" || EndsWithToolResult(r) || LastUserText(r) == "" {
				t.Fatalf("prompt answered %+v (compaction %q)", rep, r.Compaction)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(rep.ToolCalls[0].Arguments), &args); err != nil || args[tc.arg] != AgentCommand {
				t.Fatalf("arguments %s", rep.ToolCalls[0].Arguments)
			}
			if !strings.Contains(body, tc.tool) || r.Usage == nil || r.Usage.Input == 0 {
				t.Fatalf("the stream does not name the tool, or no usage: %s", body)
			}

			r, rep, _ = post(tc.result)
			if len(rep.ToolCalls) != 0 || !EndsWithToolResult(r) || !strings.Contains(rep.Text, "FACT-001=red-fox, FACT-002=blue-owl") ||
				!strings.Contains(Conversation(r), "FACT-001=red-fox") {
				t.Fatalf("result answered %+v", rep)
			}

			r, rep, _ = post(tc.compact)
			if r.Compaction != tc.agent || s.Compactions() != 1 || !strings.Contains(rep.Text, "FACT-001=red-fox") || len(rep.ToolCalls) != 0 {
				t.Fatalf("compaction %q answered %+v, %d compactions", r.Compaction, rep, s.Compactions())
			}
			for _, want := range tc.shape {
				if !strings.Contains(rep.Text, want) {
					t.Fatalf("the %s summary lacks %q:\n%s", tc.agent, want, rep.Text)
				}
			}
		})
	}
}

// Every compaction prompt of the table is recognized on every wire, and only in the
// last user message: the same words in a tool's result or an earlier message are
// not a compaction prompt; a scripted reply still comes first in agent mode.
func TestCompactionPromptRecognition(t *testing.T) {
	s := New(t)
	s.Respond = s.AgentModel
	prompts := map[string]string{
		"claude-code": "Your task is to create a detailed summary of the conversation so far",
		"codex":       "You are performing a CONTEXT CHECKPOINT COMPACTION.",
		"opencode":    "Provide a detailed prompt for continuing our conversation above.",
		"gemini-cli":  "First, reason in your scratchpad. Then, generate the <state_snapshot>.",
	}
	for _, tc := range agentCases {
		for agent, text := range prompts {
			q, _ := json.Marshal(text)
			last := strings.Replace(tc.compact, compactText(t, tc.compact), string(q[1:len(q)-1]), 1)
			resp, err := http.Post(s.URL()+tc.path, "application/json", strings.NewReader(tc.head+last+tc.tail))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if r := s.Agent()[len(s.Agent())-1]; r.Compaction != agent {
				t.Errorf("%s wire: %s's prompt recognized as %q", tc.agent, agent, r.Compaction)
			}
		}
		// In a tool's result, it is not the agent asking.
		quoted := strings.Replace(tc.result, "a.txt FACT-002=blue-owl", "CONTEXT CHECKPOINT COMPACTION", 1)
		resp, err := http.Post(s.URL()+tc.path, "application/json", strings.NewReader(tc.head+quoted+tc.tail))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if r := s.Agent()[len(s.Agent())-1]; r.Compaction != "" {
			t.Errorf("%s wire: a tool result recognized as %q's compaction prompt", tc.agent, r.Compaction)
		}
	}
	if want := len(agentCases) * len(prompts); s.Compactions() != want {
		t.Fatalf("%d compactions, want %d", s.Compactions(), want)
	}
	s.Push(Reply{Text: "scripted"})
	if got := s.next(&Request{API: OpenAI, Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"x"}`)}}); got.Text != "scripted" {
		t.Fatalf("agent mode took the place of the script: %+v", got)
	}
}

// compactText is the text of a compaction entry of agentCases, as it is written in
// its JSON.
func compactText(t *testing.T, entry string) string {
	for _, p := range []string{"CRITICAL: Respond", "You are performing", "First, reason", "Provide a detailed"} {
		if i := strings.Index(entry, p); i >= 0 {
			return entry[i : i+strings.Index(entry[i:], `"`)]
		}
	}
	t.Fatalf("no compaction prompt in %s", entry)
	return ""
}

// Without a shell tool declared, a prompt is answered with text at once.
func TestAgentModelWithoutShellTool(t *testing.T) {
	s := New(t)
	rep := s.AgentModel(&Request{API: Anthropic, Fields: map[string]json.RawMessage{"tools": json.RawMessage(`[{"name":"Read"}]`)},
		Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"title this: FACT-7"}`)}})
	if len(rep.ToolCalls) != 0 || rep.Text != "Done. The facts I can see: FACT-7." {
		t.Fatalf("%+v", rep)
	}
}
