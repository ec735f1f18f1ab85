package fakeupstream

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// ShellTool is a shell tool a coding agent declares, and how the agent model calls it.
type ShellTool struct {
	// Agent is the agent that declares it.
	Agent string
	// Name is the tool's name.
	Name string
	// Args is the call's arguments (a JSON object) to run command.
	Args func(command string) string
}

// ShellTools are the shell tools AgentModel knows, by the agents' tool names.
var ShellTools = []ShellTool{
	{Agent: "claude-code", Name: "Bash", Args: func(c string) string {
		return jsonObject(map[string]any{"command": c, "description": "Run the fake model's command"})
	}},
	{Agent: "codex", Name: "exec_command", Args: func(c string) string { return jsonObject(map[string]any{"cmd": c}) }},
	{Agent: "codex", Name: "shell_command", Args: func(c string) string { return jsonObject(map[string]any{"command": c}) }},
	{Agent: "codex", Name: "shell", Args: func(c string) string {
		return jsonObject(map[string]any{"command": []string{"bash", "-lc", c}})
	}},
	{Agent: "gemini-cli", Name: "run_shell_command", Args: func(c string) string {
		return jsonObject(map[string]any{"command": c, "description": "Run the fake model's command"})
	}},
	{Agent: "opencode", Name: "bash", Args: func(c string) string {
		return jsonObject(map[string]any{"command": c, "description": "Run the fake model's command"})
	}},
}

// AgentCommand is the command AgentModel asks the agent's shell tool to run.
const AgentCommand = "echo fake-model-was-here"

// CompactionPrompt is how one agent asks its model to summarize the conversation,
// and the summary it expects back.
type CompactionPrompt struct {
	// Agent is the agent.
	Agent string
	// Pattern matches the text of the request's last user message (its typed text,
	// not tool results).
	Pattern *regexp.Regexp
	// Summary is the answer, keeping every planted fact given.
	Summary func(facts []string) string
}

// CompactionPrompts are the compaction prompts AgentModel recognizes: Claude Code's
// (/compact and auto-compact: "Your task is to create a detailed summary of the
// conversation so far", answered <analysis>…</analysis><summary>…</summary>), Codex's
// ("You are performing a CONTEXT CHECKPOINT COMPACTION"), OpenCode's ("Provide a
// detailed prompt for continuing our conversation above") and Gemini CLI's ("First,
// reason in your scratchpad. Then, generate the <state_snapshot>.").
var CompactionPrompts = []CompactionPrompt{
	{Agent: "claude-code", Pattern: regexp.MustCompile(`(?i)create a detailed summary of the (RECENT portion of the )?conversation`),
		Summary: func(facts []string) string {
			return "<analysis>\nI went through the conversation in order and kept every planted fact.\n</analysis>\n\n" +
				"<summary>\n1. Primary Request and Intent:\n   Continue the user's task.\n\n" +
				"2. Key Technical Concepts:\n" + bullets("   - ", facts) + "\n" +
				"3. Pending Tasks:\n   None.\n\n4. Current Work:\n   Ran " + AgentCommand + ".\n</summary>"
		}},
	{Agent: "codex", Pattern: regexp.MustCompile(`CONTEXT CHECKPOINT COMPACTION`),
		Summary: func(facts []string) string {
			return "Progress: ran " + AgentCommand + " for the user.\n\nCritical data:\n" + bullets("- ", facts) +
				"\nNext steps: wait for the user's next request."
		}},
	{Agent: "opencode", Pattern: regexp.MustCompile(`(?i)provide a detailed prompt for continuing our conversation`),
		Summary: func(facts []string) string {
			return "## Goal\n\nContinue the user's task.\n\n## Discoveries\n\n" + bullets("- ", facts) +
				"\n## Accomplished\n\nRan " + AgentCommand + ".\n"
		}},
	{Agent: "gemini-cli", Pattern: regexp.MustCompile(`<state_snapshot>`),
		Summary: func(facts []string) string {
			return "<state_snapshot>\n    <overall_goal>\n        Continue the user's task.\n    </overall_goal>\n" +
				"    <key_knowledge>\n" + bullets("        - ", facts) + "    </key_knowledge>\n" +
				"    <file_system_state>\n    </file_system_state>\n" +
				"    <recent_actions>\n        - Ran " + AgentCommand + ".\n    </recent_actions>\n" +
				"    <current_plan>\n        1. [TODO] Wait for the user's next request.\n    </current_plan>\n</state_snapshot>"
		}},
}

// bullets is one line a fact, each after prefix ("none" for no fact).
func bullets(prefix string, facts []string) string {
	if len(facts) == 0 {
		return prefix + "(no planted facts)\n"
	}
	var b strings.Builder
	for _, f := range facts {
		b.WriteString(prefix + f + "\n")
	}
	return b.String()
}

// AgentModel answers as a scripted coding model would, on every wire: a compaction
// prompt (CompactionPrompts) with the summary its agent expects, keeping every
// planted fact of the request (counted: Compactions); a user prompt with one call of
// the first declared tool ShellTools knows, running AgentCommand; a tool result, or
// a prompt when no shell tool is declared, with a text that quotes every planted
// fact (FACT-…) the request carries. Use it as Respond: s.Respond = s.AgentModel.
func (s *Server) AgentModel(r *Request) Reply {
	facts := Facts(Conversation(r))
	for _, p := range CompactionPrompts {
		if p.Agent == r.Compaction {
			s.mu.Lock()
			s.compactions++
			s.mu.Unlock()
			return Reply{Text: p.Summary(facts)}
		}
	}
	if !EndsWithToolResult(r) {
		if t, ok := shellTool(r); ok {
			return Reply{Text: "Let me run a command first.", ToolCalls: []ToolCall{{Name: t.Name, Arguments: t.Args(AgentCommand)}}}
		}
	}
	if len(facts) == 0 {
		return Reply{Text: "Done. I see no planted facts."}
	}
	return Reply{Text: "Done. The facts I can see: " + strings.Join(facts, ", ") + "."}
}

// Conversation is r's system prompt (System) and every entry of its conversation
// (Messages), as sent, one a line: the wire-neutral text a test searches for what
// reached the model (a FACT- token, say). Tools are left out.
func Conversation(r *Request) string {
	var b strings.Builder
	b.Write(r.System)
	for _, m := range r.Messages {
		b.WriteByte('\n')
		b.Write(m)
	}
	return b.String()
}

// compactionAgent is the agent whose compaction prompt r's last user message is, ""
// for none.
func compactionAgent(r *Request) string {
	text := LastUserText(r)
	if text == "" {
		return ""
	}
	for _, p := range CompactionPrompts {
		if p.Pattern.MatchString(text) {
			return p.Agent
		}
	}
	return ""
}

// shellTool is the first tool r declares that ShellTools knows.
func shellTool(r *Request) (ShellTool, bool) {
	for _, name := range ToolNames(r) {
		for _, t := range ShellTools {
			if t.Name == name {
				return t, true
			}
		}
	}
	return ShellTool{}, false
}

// ToolNames are the names of the function tools r declares, in order, on every
// wire: OpenAI's tools[].function.name, Anthropic's tools[].name, the Responses
// API's tools[].name (a namespace's functions as <namespace>__<name>, as ToolCallTo
// takes them), Gemini's tools[].functionDeclarations[].name.
func ToolNames(r *Request) []string {
	var tools []struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Tools  []struct{ Name string } `json:"tools"`
		Decls  []struct{ Name string } `json:"functionDeclarations"`
		Decls2 []struct{ Name string } `json:"function_declarations"`
	}
	_ = json.Unmarshal(r.Fields["tools"], &tools)
	var out []string
	for _, t := range tools {
		switch {
		case t.Type == "namespace":
			for _, f := range t.Tools {
				out = append(out, t.Name+namespaceSep+f.Name)
			}
		case t.Function.Name != "":
			out = append(out, t.Function.Name)
		case t.Name != "":
			out = append(out, t.Name)
		}
		for _, d := range append(t.Decls, t.Decls2...) {
			out = append(out, d.Name)
		}
	}
	return out
}

// entry is the fields of a conversation entry of any wire that say who sent it and
// what it holds.
type entry struct {
	Role    string          `json:"role"`
	Type    string          `json:"type"`
	Content json.RawMessage `json:"content"`
	Parts   []geminiPart    `json:"parts"`
}

// geminiPart is the fields of a Gemini part the server reads.
type geminiPart struct {
	Text              string          `json:"text"`
	Thought           bool            `json:"thought"`
	FunctionResponse  json.RawMessage `json:"functionResponse"`
	FunctionResponse2 json.RawMessage `json:"function_response"`
}

// lastEntry is r's last conversation entry, and whether it is a raw string (a
// Responses input given as text).
func lastEntry(r *Request) (e entry, text string, isText bool) {
	if len(r.Messages) == 0 {
		return e, "", false
	}
	raw := r.Messages[len(r.Messages)-1]
	if json.Unmarshal(raw, &text) == nil {
		return e, text, true
	}
	_ = json.Unmarshal(raw, &e)
	return e, "", false
}

// LastUserText is the text the user typed in r's last conversation entry (its text
// blocks or parts; not tool results), "" when the last entry is not the user's.
func LastUserText(r *Request) string {
	e, text, isText := lastEntry(r)
	if isText {
		return text
	}
	if r.API == Gemini {
		if e.Role != "" && e.Role != "user" {
			return ""
		}
		var out []string
		for _, p := range e.Parts {
			if p.Text != "" && !p.Thought {
				out = append(out, p.Text)
			}
		}
		return strings.Join(out, "\n")
	}
	if e.Role != "user" || (e.Type != "" && e.Type != "message") {
		return ""
	}
	var s string
	if json.Unmarshal(e.Content, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(e.Content, &blocks)
	var out []string
	for _, b := range blocks {
		if b.Type == "text" || b.Type == "input_text" {
			out = append(out, b.Text)
		}
	}
	return strings.Join(out, "\n")
}

// EndsWithToolResult says r's last conversation entry carries a tool's result: an
// OpenAI tool message, an Anthropic user message with a tool_result block, a
// Responses *_call_output item, a Gemini content with a functionResponse part.
func EndsWithToolResult(r *Request) bool {
	e, _, isText := lastEntry(r)
	if isText {
		return false
	}
	switch r.API {
	case OpenAI:
		return e.Role == "tool" || e.Role == "function"
	case Anthropic:
		var blocks []struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(e.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "tool_result" {
				return true
			}
		}
	case Responses:
		return strings.HasSuffix(e.Type, "_call_output")
	case Gemini:
		for _, p := range e.Parts {
			if present(p.FunctionResponse) != nil || present(p.FunctionResponse2) != nil {
				return true
			}
		}
	}
	return false
}

// jsonObject is v as JSON text.
func jsonObject(v map[string]any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakeupstream: %v", err))
	}
	return string(b)
}

// namespaceSep joins a Responses namespace and a function's name in ToolNames.
const namespaceSep = "__"

// ToolCallTo is a call of the tool r declares as name (one of ToolNames), with
// arguments: a function of a Responses namespace is called by its own name, with its
// namespace.
func ToolCallTo(r *Request, name, arguments string) ToolCall {
	var tools []struct {
		Type  string                  `json:"type"`
		Name  string                  `json:"name"`
		Tools []struct{ Name string } `json:"tools"`
	}
	_ = json.Unmarshal(r.Fields["tools"], &tools)
	for _, t := range tools {
		if t.Type != "namespace" {
			continue
		}
		for _, f := range t.Tools {
			if t.Name+namespaceSep+f.Name == name {
				return ToolCall{Namespace: t.Name, Name: f.Name, Arguments: arguments}
			}
		}
	}
	return ToolCall{Name: name, Arguments: arguments}
}
