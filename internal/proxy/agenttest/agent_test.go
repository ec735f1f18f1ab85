package agenttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// agent is one of the four agent CLIs, and how the test drives it.
type agent struct {
	// name is the agent's name in the proxy's terms (X-Compactor-Answered).
	name string
	// bin is the binary in js/node_modules/.bin.
	bin string
	// setup writes the agent's configuration (in home and work) for the base URL.
	setup func(t *testing.T, home, work, base string)
	// env is the agent's own environment for the base URL.
	env func(base string) []string
	// args is the command line of one prompt (resume: continue the last session).
	args func(prompt string, resume bool) []string
	// tolerated are hosts the agent may try (and be refused) through the proxy variables.
	tolerated []string
}

// jsDir is js/ with its node_modules: without node, npm or the installed agents the
// test skips, except in CI (CI=true), where it fails.
func jsDir(t *testing.T, bin string) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") == "true" {
		skip = t.Fatalf
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			skip("%s is not installed: install Node.js and npm, then run npm ci in internal/proxy/agenttest/js (CI=true: fails)", tool)
		}
	}
	dir, _ := filepath.Abs("js")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".bin", bin)); err != nil {
		skip("the agent CLIs are not installed (%v): run `cd internal/proxy/agenttest/js && npm ci --no-audit --no-fund` (CI=true: fails)", err)
	}
	return dir
}

// session is one agent's session: its folders, its environment, its runs.
type session struct {
	t       *testing.T
	a       agent
	s       *stack
	js      string
	home    string
	work    string
	base    string
	env     []string
	refuser *refuser
	runs    int
	started bool
	outputs []string
	began   time.Time
	// extraArgs are added to every run's command line.
	extraArgs []string
}

// sessionBudget bounds one agent's whole session (each run is bounded too).
const sessionBudget = 4 * time.Minute

func newSession(t *testing.T, a agent, s *stack, base string) *session {
	js := jsDir(t, a.bin)
	root := t.TempDir()
	ss := &session{t: t, a: a, s: s, js: js, home: filepath.Join(root, "home"), work: filepath.Join(root, "work"), base: base, began: time.Now()}
	for _, d := range []string{ss.home, ss.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ss.refuser = newRefuser(t)
	a.setup(t, ss.home, ss.work, base)
	ss.env = []string{
		"HOME=" + ss.home, "PATH=" + os.Getenv("PATH"), "TERM=dumb", "LANG=C.UTF-8",
		"TMPDIR=" + root,
		"XDG_CONFIG_HOME=" + filepath.Join(ss.home, ".config"), "XDG_DATA_HOME=" + filepath.Join(ss.home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(ss.home, ".cache"), "XDG_STATE_HOME=" + filepath.Join(ss.home, ".local", "state"),
		"HTTPS_PROXY=" + ss.refuser.URL, "HTTP_PROXY=" + ss.refuser.URL, "https_proxy=" + ss.refuser.URL, "http_proxy=" + ss.refuser.URL,
		"ALL_PROXY=" + ss.refuser.URL,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1",
	}
	ss.env = append(ss.env, a.env(base)...)
	return ss
}

// run runs one prompt (continuing the session after the first) and returns what the
// agent printed; it fails the test when the agent fails or takes over 2 minutes.
func (ss *session) run(prompt string) string {
	t := ss.t
	t.Helper()
	ss.runs++
	left := sessionBudget - time.Since(ss.began)
	if left <= 0 {
		t.Fatalf("%s: the session took over %s before run %d", ss.a.name, sessionBudget, ss.runs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(left, 2*time.Minute))
	defer cancel()
	args := append(ss.a.args(prompt, ss.started), ss.extraArgs...)
	cmd := exec.CommandContext(ctx, filepath.Join(ss.js, "node_modules", ".bin", ss.a.bin), args...)
	cmd.Dir = ss.work
	cmd.Env = ss.env
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	ss.started = true
	d := time.Since(start).Round(100 * time.Millisecond)
	logf := filepath.Join(ss.home, fmt.Sprintf("run-%02d.log", ss.runs))
	_ = os.WriteFile(logf, append(append(out.Bytes(), "\n--- stderr\n"...), errOut.Bytes()...), 0o644)
	if dir := os.Getenv("AGENTTEST_LOGS"); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-run-%02d.log", ss.a.name, ss.runs)), append(append(out.Bytes(), "\n--- stderr\n"...), errOut.Bytes()...), 0o644)
	}
	if err != nil {
		// the session goes on: the next prompts and the assertions say what followed
		t.Errorf("%s run %d (%q) failed after %s: %v\nstdout:\n%s\nstderr (tail):\n%s\nproxy log (tail):\n%s", ss.a.name, ss.runs, prompt, d,
			err, tail(out.String(), 4000), tail(errOut.String(), 4000), ss.s.proc.Logs.Tail(6000))
	}
	t.Logf("%s run %d (%q): %s, %d bytes out", ss.a.name, ss.runs, prompt, d, out.Len())
	ss.outputs = append(ss.outputs, out.String())
	return out.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// agents are the four agents, by test.
var (
	claudeCode = agent{
		name: "claude-code", bin: "claude",
		setup: func(t *testing.T, home, work, base string) {},
		env: func(base string) []string {
			return []string{"ANTHROPIC_BASE_URL=" + base, "ANTHROPIC_API_KEY=sk-test-agent-claude", "IS_SANDBOX=1",
				"CLAUDE_CODE_MAX_RETRIES=3", "CLAUDE_CODE_MAX_OUTPUT_TOKENS=" + fmt.Sprint(claudeMaxOutput)}
		},
		args: func(prompt string, resume bool) []string {
			a := []string{"--output-format", "json", "--dangerously-skip-permissions", "-p", prompt}
			if resume {
				a = append(a, "--continue")
			}
			return a
		},
	}
	codex = agent{
		name: "codex", bin: "codex",
		setup: func(t *testing.T, home, work, base string) {
			writeFile(t, filepath.Join(home, ".codex", "config.toml"), codexConfig(base))
		},
		env: func(base string) []string { return []string{"OPENAI_API_KEY=sk-test-agent-codex"} },
		args: func(prompt string, resume bool) []string {
			if resume {
				return []string{"exec", "--skip-git-repo-check", "resume", "--last", prompt}
			}
			return []string{"exec", "--skip-git-repo-check", prompt}
		},
		tolerated: []string{"chatgpt.com", "ab.chatgpt.com", "github.com", "api.github.com"},
	}
	geminiCLI = agent{
		name: "gemini-cli", bin: "gemini",
		setup: func(t *testing.T, home, work, base string) {
			writeFile(t, filepath.Join(home, ".gemini", "settings.json"), `{"security": {"auth": {"selectedType": "gemini-api-key"}},
 "privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},
 "general": {"disableAutoUpdate": true, "disableUpdateNag": true}}`)
		},
		env: func(base string) []string {
			return []string{"GEMINI_API_KEY=test-agent-gemini", "GOOGLE_GEMINI_BASE_URL=" + base, "GEMINI_CLI_TRUST_WORKSPACE=true"}
		},
		args: func(prompt string, resume bool) []string {
			a := []string{"--approval-mode", "yolo", "--output-format", "json"}
			if resume {
				a = append(a, "--resume", "latest")
			}
			return append(a, "-p", prompt)
		},
	}
	openCode = agent{
		name: "opencode", bin: "opencode",
		setup: func(t *testing.T, home, work, base string) {
			cfg := map[string]any{
				"autoupdate": false, "share": "disabled",
				"model": "local/test-model", "small_model": "local/test-model",
				"provider": map[string]any{"local": map[string]any{
					"npm": "@ai-sdk/openai-compatible", "name": "Compactor",
					"options": map[string]any{"baseURL": base + "/v1", "apiKey": "sk-test-agent-opencode"},
					"models": map[string]any{"test-model": map[string]any{"name": "Test model", "tool_call": true,
						"limit": map[string]any{"context": 100000, "output": openCodeMaxOutput}}},
				}},
				"permission": map[string]any{"bash": "allow", "edit": "allow", "webfetch": "deny"},
			}
			b, _ := json.MarshalIndent(cfg, "", "  ")
			writeFile(t, filepath.Join(work, "opencode.json"), string(b))
		},
		env: func(base string) []string {
			return []string{"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1",
				"OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_CLAUDE_CODE=1"}
		},
		args: func(prompt string, resume bool) []string {
			a := []string{"run", "--print-logs"}
			if resume {
				a = append(a, "--continue")
			}
			return append(a, prompt)
		},
		tolerated: []string{"registry.npmjs.org"},
	}
)

// Output caps the agents are run with (their max_tokens), so that a small window has
// room for the conversation: Claude Code asks for 128000 by default, more than the
// test's whole window.
const (
	claudeMaxOutput   = 4096
	openCodeMaxOutput = 4096
)

// hostsSeen is the refuser's hosts, less the tolerated ones.
func (ss *session) hostsSeen() (bad, all map[string]int) {
	bad, all = map[string]int{}, ss.refuser.seen()
	for k, n := range all {
		host := k[strings.Index(k, " ")+1:]
		ok := false
		for _, h := range ss.a.tolerated {
			if host == h {
				ok = true
			}
		}
		if !ok {
			bad[k] = n
		}
	}
	return bad, all
}

// codexConfig is Codex's config.toml for the model at base.
func codexConfig(base string) string {
	return `model = "gpt-5.1-codex"
model_provider = "compactor"
approval_policy = "never"
sandbox_mode = "danger-full-access"
[model_providers.compactor]
name = "compactor"
base_url = "` + base + `/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 3
stream_max_retries = 2
`
}
