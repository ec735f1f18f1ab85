package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// The examples of the README and of every doc under docs/, run as written: the nats
// CLI's (with the official nats CLI, built from source), the README's Try-it session
// (with the compactor binary and the transcripts of examples/transcripts), the profiles
// file and the policy commands, and every compactor command line they show parses. Every
// other shell line they show is listed in notRun with the reason it is not run.

// natscliVersion is the nats CLI the docs' examples are run with.
const natscliVersion = "v0.5.1"

// natsCLI returns the official nats CLI, built once per test run: `go mod download` of
// its module in a scratch module, its source copied out of the read-only module cache,
// `go build ./nats`, into the run's binaries directory (never the repository). A test
// that needs it skips when it cannot be built, and fails instead in CI (CI=true).
func natsCLI(t *testing.T) string {
	t.Helper()
	bin, err := proctest.BuildWith("nats", func(out string) error {
		tmp, err := os.MkdirTemp("", "natscli-build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module scratch\n\ngo 1.26\n"), 0o644); err != nil {
			return err
		}
		dl := exec.Command("go", "mod", "download", "-json", "github.com/nats-io/natscli@"+natscliVersion)
		dl.Dir = tmp
		dl.Env = append(os.Environ(), "GOWORK=off")
		js, err := dl.Output()
		if err != nil {
			return fmt.Errorf("go mod download natscli@%s: %v\n%s", natscliVersion, err, js)
		}
		var mod struct{ Dir, Error string }
		if err := json.Unmarshal(js, &mod); err != nil || mod.Dir == "" {
			return fmt.Errorf("go mod download natscli@%s: %v %s", natscliVersion, err, mod.Error)
		}
		src := filepath.Join(tmp, "natscli")
		if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
			return err
		}
		build := exec.Command("go", "build", "-o", out, "./nats")
		build.Dir = src
		build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if b, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build natscli@%s: %v\n%s", natscliVersion, err, b)
		}
		return nil
	})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: a test that needs the nats CLI fails instead of skipping)", err)
		}
		t.Skipf("cannot build the nats CLI: %v", err)
	}
	return bin
}

// readme is the README's text.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// doc is one file of the documentation: its path from the module root and its text.
type doc struct{ path, text string }

// docs are the README and every docs/*.md, in that order.
func docs(t *testing.T) []doc {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []doc{{"README.md", readme(t)}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, doc{strings.TrimPrefix(filepath.ToSlash(p), "../../"), string(b)})
	}
	if len(out) < 5 {
		t.Fatalf("found only %d docs: want the README and docs/*.md", len(out))
	}
	return out
}

// allDocs is the text of every doc, joined.
func allDocs(t *testing.T) string {
	var b strings.Builder
	for _, d := range docs(t) {
		b.WriteString(d.text)
		b.WriteString("\n")
	}
	return b.String()
}

// codeBlocks are text's ```lang blocks, each without the indentation of the list it may
// sit in.
func codeBlocks(text, lang string) []string {
	var blocks []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		open := strings.TrimLeft(lines[i], " ")
		if open != "```"+lang {
			continue
		}
		indent := len(lines[i]) - len(open)
		var b []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			l := lines[i]
			if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
				l = l[indent:]
			}
			b = append(b, l)
		}
		blocks = append(blocks, strings.Join(b, "\n"))
	}
	return blocks
}

// sh runs a script with bash, with the nats CLI first on PATH, NATS_URL set, and a
// home of its own (no nats context of the machine's user).
func sh(t *testing.T, natsBin, url, script string) (string, error) {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(natsBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"NATS_URL="+url, "HOME="+home, "XDG_CONFIG_HOME="+home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var natsCommandRE = regexp.MustCompile(`(^|[;&|:]\s*|\bdo\s+)nats\s+[a-z]`)

// Every nats CLI command the docs show runs as written with the official nats CLI
// against a running compactor, and does what the docs say.
func TestREADMENatsExamples(t *testing.T) {
	text := allDocs(t)
	blocks := strings.Join(codeBlocks(text, "sh"), "\n")
	const (
		pub      = `nats pub -J -H "Nats-Msg-Id:{{ID}}" chat.demo2.msg '{"role":"user","content":"Find the bug in parser.go"}'`
		service  = "nats req --timeout 35s compactor.compact '{\"conversation\":\"c1\",\"instructions\":\"keep every path\",\"wait_ms\":30000}'\nnats req compactor.context '{\"conversation\":\"c1\"}'\nnats req compactor.status  '{\"conversation\":\"c1\"}'\nnats req compactor.policy  '{\"conversation\":\"c1\",\"set\":{\"threshold\":0.7}}'\nnats req compactor.forget  '{\"conversation\":\"c1\"}'\nnats micro info compactor"
		forget   = `nats req --timeout 75s compactor.forget '{"conversation":"support-42"}'`
		recall   = `nats req compactor.recall '{"conversation":"c1","query":"run_build","max_tokens":2000}'`
		info     = `nats consumer info CHAT compactor-trigger-4-0`
		loop     = "for p in 0 1 2 3; do\n  nats consumer rm CHAT compactor-trigger-4-$p -f\n  nats consumer rm ACTIVITY compactor-idle-4-$p -f\ndone"
		onePart  = `nats consumer rm CHAT compactor-trigger -f; nats consumer rm ACTIVITY compactor-idle -f`
		typoPubJ = `nats pub -J chat.demo2.msgs '{"role":"user","content":"lost"}'`
		typoPub  = `nats pub chat.demo2.msgs '{"role":"user","content":"lost"}'`
	)
	snippets := []string{pub, service, forget, recall, info, loop, onePart}
	for _, s := range snippets {
		if !strings.Contains(blocks, s) && !strings.Contains(text, "`"+s+"`") {
			t.Errorf("no doc shows %q any more: update this test with it", s)
		}
	}
	// Every nats command of the docs' shell blocks is one of them.
	for _, l := range strings.Split(blocks, "\n") {
		l = strings.TrimSpace(l)
		if !natsCommandRE.MatchString(l) {
			continue
		}
		covered := false
		for _, s := range snippets {
			covered = covered || strings.Contains(s, l) || strings.Contains(l, s)
		}
		if !covered {
			t.Errorf("doc line %q runs the nats CLI, but this test does not run it", l)
		}
	}
	if t.Failed() {
		return
	}

	natsBin := natsCLI(t)
	env := testEnv(t, 128000)
	s := startStack(t, env, nil)
	url := s.nc.ConnectedUrl()
	js := jsFor(t, s.nc)
	ctx := ctxFor(t, time.Minute)

	// Try it: -J waits for the stream's acknowledgement; {{ID}} gives every message an
	// id of its own.
	for seq := uint64(1); seq <= 2; seq++ {
		out, err := sh(t, natsBin, url, pub)
		if err != nil || !strings.Contains(out, fmt.Sprintf("Stored in Stream: CHAT Sequence: %d", seq)) {
			t.Fatalf("%s: %v\n%s", pub, err, out)
		}
		m, err := js.Stream(ctx, "CHAT")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if id := raw.Header.Get("Nats-Msg-Id"); len(id) < 16 || strings.Contains(id, "{{") {
			t.Fatalf("message %d has Nats-Msg-Id %q; want a unique id", seq, id)
		}
	}
	// A subject no stream takes: with -J an error, without it "Published".
	if out, err := sh(t, natsBin, url, typoPubJ); err == nil || !strings.Contains(out, "no responders") {
		t.Fatalf("%s: %v\n%s; want an error", typoPubJ, err, out)
	}
	if out, err := sh(t, natsBin, url, typoPub); err != nil || !strings.Contains(out, "Published") {
		t.Fatalf("%s: %v\n%s; want it to look fine (why the docs use -J)", typoPub, err, out)
	}

	// The service, from any NATS client.
	msgs, _ := fakellm.NeedleConversation(2)
	for _, conv := range []string{"c1", "support-42"} {
		for _, m := range msgs {
			if _, err := s.client.Publish(ctx, conv, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Recall, before the service examples forget c1: its two tool rounds, whole.
	out, err := sh(t, natsBin, url, recall)
	if err != nil || !strings.Contains(out, `"returned":4`) || !strings.Contains(out, `"tool_call_id":"call_1"`) {
		t.Fatalf("%s: %v\n%s", recall, err, out)
	}
	out, err = sh(t, natsBin, url, "set -e\n"+service)
	if err != nil || strings.Contains(out, "Nats-Service-Error") || !strings.Contains(out, `"status":"`) ||
		!strings.Contains(out, `"threshold":"0.7"`) || !strings.Contains(out, `"chat_messages":9`) || !strings.Contains(out, "Service: compactor") {
		t.Fatalf("the service examples: %v\n%s", err, out)
	}
	out, err = sh(t, natsBin, url, forget)
	if err != nil || !strings.Contains(out, `"conversation":"support-42"`) || !strings.Contains(out, `"chat_messages":9`) {
		t.Fatalf("%s: %v\n%s", forget, err, out)
	}

	// Removing the consumers of one partition, once no trigger uses them.
	s.stop(t)
	if out, err := sh(t, natsBin, url, onePart); err != nil {
		t.Fatalf("%s: %v\n%s", onePart, err, out)
	}
	for _, c := range [][2]string{{"CHAT", "compactor-trigger"}, {"ACTIVITY", "compactor-idle"}} {
		if _, err := js.Consumer(ctx, c[0], c[1]); !errors.Is(err, natsjs.ErrConsumerNotFound) {
			t.Errorf("consumer %s of %s after %q: %v; want it gone", c[1], c[0], onePart, err)
		}
	}

	// Four partitions: their consumers exist, and the docs' loop removes them.
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	cfg := jetstream.DefaultConfig()
	cfg.TriggerPartitions = 4
	if _, err := jetstream.Provision(ctx, nc, cfg); err != nil {
		t.Fatal(err)
	}
	if out, err := sh(t, natsBin, nc.ConnectedUrl(), info); err != nil || !strings.Contains(out, "compactor-trigger-4-0") {
		t.Fatalf("%s: %v\n%s", info, err, out)
	}
	if out, err := sh(t, natsBin, nc.ConnectedUrl(), loop); err != nil {
		t.Fatalf("%s: %v\n%s", loop, err, out)
	}
	js4 := jsFor(t, nc)
	for p := range 4 {
		for _, c := range [][2]string{{"CHAT", fmt.Sprintf("compactor-trigger-4-%d", p)}, {"ACTIVITY", fmt.Sprintf("compactor-idle-4-%d", p)}} {
			if _, err := js4.Consumer(ctx, c[0], c[1]); !errors.Is(err, natsjs.ErrConsumerNotFound) {
				t.Errorf("consumer %s of %s after the loop: %v; want it gone", c[1], c[0], err)
			}
		}
	}
}

// A consumer of the nats CLI's own making: `nats context add` writes the context the
// commands then connect with (the file format is the nats CLI's, not a copy of it).
func TestNATSContextMadeByTheNATSCLI(t *testing.T) {
	natsBin := natsCLI(t)
	env := testEnv(t, 128000)
	s := startStack(t, env, nil)
	home := t.TempDir()
	add := exec.Command(natsBin, "context", "add", "made-by-nats", "--server", s.nc.ConnectedUrl(), "--description", "test", "--select")
	add.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("nats context add: %v\n%s", err, out)
	}
	t.Setenv("XDG_CONFIG_HOME", home)
	if _, _, err := cli(t, `{"role":"user","content":"hi"}`+"\n", "publish", "made"); err != nil {
		t.Fatalf("publish with the context nats selected: %v", err)
	}
	out, _, err := cli(t, "", "status", "made", "--json")
	if err != nil || !strings.Contains(out, `"context_messages": 1`) {
		t.Fatalf("status with the context nats selected: %q, %v", out, err)
	}
}

// shellWords splits a doc's command line as a shell would for the simple lines it
// holds: words, '…' and "…" quotes, a trailing # comment.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// compactorLineRE matches a shell line that runs compactor; its group is the arguments.
var compactorLineRE = regexp.MustCompile(`(?:^|\|\s*|\s)(?:go run \./cmd/compactor|compactor)(\s.*)?$`)

// compactorArgs returns the arguments of a shell line that runs compactor, or false.
func compactorArgs(l string) ([]string, bool) {
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "node ") || strings.HasPrefix(l, "nats ") ||
		strings.HasPrefix(l, "go ") && !strings.HasPrefix(l, "go run ") {
		return nil, false
	}
	m := compactorLineRE.FindStringSubmatch(l)
	if m == nil {
		return nil, false
	}
	return shellWords(m[1]), true
}

// compactorLines are the docs' shell lines that run compactor, as its arguments.
func compactorLines(t *testing.T) [][]string {
	var out [][]string
	for _, d := range docs(t) {
		for _, b := range codeBlocks(d.text, "sh") {
			for _, l := range strings.Split(b, "\n") {
				if args, ok := compactorArgs(l); ok {
					out = append(out, args)
				}
			}
		}
	}
	return out
}

// Every compactor command line of the docs parses: its command and flags exist.
func TestREADMECompactorCommandsParse(t *testing.T) {
	lines := compactorLines(t)
	if len(lines) < 15 {
		t.Fatalf("found only %d compactor command lines in the docs: %q", len(lines), lines)
	}
	for _, args := range lines {
		name, rest, err := splitCommand(args)
		if err != nil {
			t.Errorf("docs: compactor %s: %v", strings.Join(args, " "), err)
			continue
		}
		if name == "help" {
			continue
		}
		cmd := commandNamed(name)
		fs := newFlagSet(name)
		cmd.define(fs)
		if cmd.conn != noConn {
			defineConnFlags(fs, cmd.conn == fullConn)
		}
		if _, err := fs.parse(rest); err != nil {
			t.Errorf("docs: compactor %s: %v", strings.Join(args, " "), err)
		}
	}
}

// The profiles file of the docs parses and resolves, and their policy commands work
// against a compactor running with it.
func TestREADMEProfilesAndPolicyCommands(t *testing.T) {
	text := allDocs(t)
	_, after, ok := strings.Cut(text, "A profiles file (`COMPACTOR_CONFIG=profiles.json`)")
	if !ok {
		t.Fatal("no doc introduces the profiles file any more: update this test")
	}
	blocks := codeBlocks(after, "json")
	if len(blocks) == 0 {
		t.Fatal("no JSON block after the profiles file's introduction")
	}
	file := filepath.Join(t.TempDir(), "profiles.json")
	if err := os.WriteFile(file, []byte(blocks[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, 128000)
	t.Setenv("COMPACTOR_CONFIG", file)
	loaded, err := loadEnv(os.LookupEnv)
	if err != nil {
		t.Fatalf("the docs' profiles file: %v", err)
	}
	env.Config, env.Profiles = loaded.Config, loaded.Profiles
	withStack(t, env, nil)
	var ran int
	for _, args := range compactorLines(t) {
		if len(args) < 2 || args[0] != "policy" {
			continue
		}
		ran++
		if _, _, err := cli(t, "", args...); err != nil {
			t.Fatalf("docs: compactor %s: %v", strings.Join(args, " "), err)
		}
		if args[1] == "set" {
			out, _, err := cli(t, "", "policy", "get", args[2], "--json")
			var r schemas.PolicyResponse
			if err != nil || json.Unmarshal([]byte(out), &r) != nil {
				t.Fatalf("policy get after the docs' set: %q, %v", out, err)
			}
			for _, kv := range args[3:] {
				k, v, _ := strings.Cut(kv, "=")
				if got := fmt.Sprint(r.Settings[k]); got != v {
					t.Errorf("after the docs' policy set, %s resolves to %q; want %q", k, got, v)
				}
			}
			prof := env.Profiles.Profiles[r.Policy["profile"]]
			if prof == nil {
				t.Fatalf("the docs set profile %q, which its profiles file does not have", r.Policy["profile"])
			}
		}
	}
	if ran < 3 {
		t.Fatalf("ran %d policy lines of the docs; want its set, get and clear", ran)
	}
	if _, err := policy.ParseFile([]byte(blocks[0])); err != nil {
		t.Fatal(err)
	}
}

// The Try-it session, run as written with the compactor binary: serve with the
// README's variables, then each line of the session, checking what its comments say.
func TestREADMETryIt(t *testing.T) {
	text := readme(t)
	var serveLine, session string
	for _, b := range codeBlocks(text, "sh") {
		if strings.HasPrefix(b, "COMPACTOR_CONTEXT_WINDOW=") && strings.HasSuffix(b, "go run ./cmd/compactor") {
			serveLine = b
		}
		if strings.HasPrefix(b, "corpus=") {
			session = b
		}
	}
	if serveLine == "" || session == "" {
		t.Fatal("the README's Try-it blocks changed: update this test")
	}
	// The session reads a transcript that ships in the repository, never one outside it.
	corpusLine, _, _ := strings.Cut(session, "\n")
	transcript := strings.TrimPrefix(corpusLine, "corpus=")
	if !strings.HasPrefix(transcript, "examples/transcripts/") {
		t.Fatalf("the Try-it session reads %q; want a transcript of examples/transcripts", transcript)
	}
	if _, err := os.Stat(filepath.Join("../..", transcript)); err != nil {
		t.Fatalf("the Try-it transcript: %v", err)
	}
	bin := proctest.Compactor(t)
	testEnv(t, 128000)
	addr := freeAddr(t)
	vars := []string{"COMPACTOR_LISTEN=" + addr, "COMPACTOR_DATA_DIR=" + t.TempDir(), "XDG_CONFIG_HOME=" + t.TempDir()}
	serveVars := append(append([]string(nil), vars...), strings.Fields(strings.TrimSuffix(serveLine, "go run ./cmd/compactor"))...)
	serve := proctest.Start(t, "serve", bin, nil, serveVars)
	t.Setenv("COMPACTOR_LISTEN", addr)
	eventually(t, 30*time.Second, "serve to answer", func() bool {
		if msg := serve.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
		_, _, err := cli(t, "", "policy", "get", "x")
		return err == nil
	})
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var prelude []string
	for _, line := range strings.Split(session, "\n") {
		if strings.HasPrefix(line, "corpus=") {
			prelude = append(prelude, line)
			continue
		}
		cmdLine, comment, _ := strings.Cut(line, "#")
		script := strings.Join(append(prelude, "set -o pipefail", strings.ReplaceAll(cmdLine, "go run ./cmd/compactor", bin)), "\n")
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), vars...)
		b, err := cmd.CombinedOutput()
		out := string(b)
		if err != nil {
			t.Fatalf("README line %q: %v\n%s", line, err, out)
		}
		comment = strings.TrimSpace(comment)
		t.Logf("%s\n→ %s", strings.TrimSpace(cmdLine), firstLines(out, 3))
		// What the comments say.
		switch {
		case strings.Contains(comment, " tokens: over target"):
			n, _ := strconv.Atoi(strings.ReplaceAll(strings.Fields(comment)[0], ",", ""))
			st, _, err := cli(t, "", "status", "demo", "--json")
			var got struct {
				Tokens int `json:"context_tokens"`
			}
			if err != nil || json.Unmarshal([]byte(st), &got) != nil || got.Tokens != n {
				t.Errorf("README says %q; status says %d tokens (%v)", comment, got.Tokens, err)
			}
		case strings.HasPrefix(comment, "generation 0"):
			if !strings.Contains(out, "0 (nothing compacted yet)") {
				t.Errorf("README says %q; status printed:\n%s", comment, out)
			}
		case strings.HasPrefix(comment, "completed, generation 1"):
			if !strings.HasPrefix(out, "completed: generation 1,") {
				t.Errorf("README says %q; compact printed:\n%s", comment, out)
			}
		case strings.HasPrefix(comment, "the same context as an Anthropic"):
			var req struct {
				System   json.RawMessage   `json:"system"`
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.NewDecoder(strings.NewReader(out)).Decode(&req); err != nil || len(req.Messages) == 0 || !strings.Contains(out, "Summary of the earlier conversation") {
				t.Errorf("README says %q; context --format anthropic printed (%v):\n%s", comment, err, firstLines(out, 5))
			}
		case strings.HasPrefix(comment, "raw messages behind the summary"):
			_, query, _ := strings.Cut(cmdLine, "--query")
			query = strings.ToLower(strings.Join(shellWords(query), " "))
			if query == "" {
				t.Fatalf("README line %q: want a recall with --query", line)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			found := false
			for _, l := range lines {
				var m struct {
					Seq  uint64 `json:"seq"`
					Role string `json:"role"`
				}
				if json.Unmarshal([]byte(l), &m) == nil && m.Seq > 0 && m.Role != "" {
					found = found || strings.Contains(strings.ToLower(l), query)
				}
			}
			if !found {
				t.Errorf("README says %q; recall printed no message with a seq that matches:\n%s", comment, firstLines(out, 5))
			}
		case strings.HasPrefix(comment, "replayed on an embedded server"):
			if !strings.Contains(out, "tool-rounds") || !strings.Contains(out, "paths") {
				t.Errorf("README says %q; eval printed:\n%s", comment, firstLines(out, 10))
			}
		case strings.HasPrefix(comment, "pinned + summary + tail"):
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 3 || !strings.Contains(out, "Summary of the earlier conversation") {
				t.Errorf("README says %q; context printed:\n%s", comment, firstLines(out, 5))
			}
		}
	}
	out, _, err := cli(t, "", "status", "demo", "--json")
	var st struct {
		Value *schemas.Result `json:"value"`
	}
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || st.Value == nil || st.Value.Generation < 1 {
		t.Fatalf("status after the session: %q, %v", out, err)
	}
	serve.Signal(t, syscall.SIGINT)
	if err := serve.Wait(t, 60*time.Second, "SIGINT"); err != nil {
		t.Fatalf("serve after SIGINT: %v; want exit 0", err)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

// notRun are the shell lines the docs show that no test runs, by their start, each with
// the reason. Every other line of a ```sh block runs the nats CLI (TestREADMENatsExamples),
// runs compactor (parsed by TestREADMECompactorCommandsParse, the policy lines run by
// TestREADMEProfilesAndPolicyCommands) or is the README's Try-it session (TestREADMETryIt).
var notRun = []struct{ prefix, reason string }{
	{"go test ", "runs the tests or the benchmarks themselves: CI runs go test ./... (.ci/run)"},
	{"NSC_DIR=./nsc OUT=./nats-jwt deploy/nats/nsc-tenants.sh", "needs nsc, which cannot be installed here (its module fails the checksum database); TestTenantJWTRecipe builds the same JWTs from the script's lines"},
	{"nats-server -c ./nats-jwt/server.conf", "needs the files nsc-tenants.sh writes; TestTenantJWTRecipe runs nats-server with the same operator, accounts and resolver"},
	{"go install ", "installs into GOPATH/bin; the tests build the same package (proctest.Compactor)"},
	{"go build -trimpath -o compactor ", "writes a binary into the working directory; TestDockerfileBuildsAStaticBinary runs the image's build"},
	{"docker ", "needs a Docker engine, which the test machine lacks; TestDockerfileBuildsAStaticBinary and TestComposeDeploymentRuns run the build and the Compose file without it"},
	{"kubectl ", "needs a Kubernetes cluster; TestDeployManifestsMatchTheCode checks the manifests"},
	{"helm ", "needs a Kubernetes cluster; TestDeployManifestsMatchTheCode checks the Helm values"},
	{"for u in sys admin trigger worker api producer reader proxy;", "writes the Kubernetes Secrets' password files for the kubectl lines after it"},
	{"cd clients/ts && npm ci && npm run build", "TestTSClient* build clients/ts the same way (npm ci in .ci/run)"},
	{"npm install ../path/to/compactor/clients/ts", "installs into the reader's own service"},
	{"node compactor.mjs forget ", "TestNodeExample* run the Node.js example's forget against a server of their own"},
	{"export COMPACTOR_NATS_URL=nats://nats:4222", "names the reader's NATS for the role lines after it, which are parsed; TestRolesOfAccountsConf runs the roles"},
	{"export COMPACTOR_VIEW_TOKEN=", "sets the token of the view lines around it; TestViewConfiguration checks the start-up rules"},
	{"curl ", "reads a view served on another machine's address; pipeline/view tests the bearer token"},
	{"corpus=", "the README's Try-it session, run line by line by TestREADMETryIt"},
	{"for p in 0 1 2 3; do", "the loop around nats consumer rm, run whole by TestREADMENatsExamples"},
	{"done", "the end of that loop"},
	{"ANTHROPIC_BASE_URL=http://127.0.0.1:8088 ", "runs Claude Code, installed from npm: internal/proxy/agenttest's TestClaudeCode runs it so, through the proxy, against the fake model"},
	{"go build -o /tmp/nats-server github.com/nats-io/nats-server/v2", tenantsWalkThrough + " (the nats-server it runs is built so by proctest.NATSServer)"},
	{"export NATS_SYS_PASSWORD=", tenantsWalkThrough},
	{"/tmp/nats-server -c deploy/nats/tenants.conf", tenantsWalkThrough},
	{"export COMPACTOR_NATS_URL=nats://127.0.0.1:4222", tenantsWalkThrough},
	{"for role in trigger worker api; do", tenantsWalkThrough},
	{"export COMPACTOR_NATS_USER=acme-producer", tenantsWalkThrough},
	{"GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8088/c/", "runs Gemini CLI, installed from npm: internal/proxy/agenttest's TestGeminiCLI runs it so, through the proxy, against the fake model"},
}

// shellCommands are the commands of a ```sh block: a line continued with a trailing
// backslash is joined to the next, a here-document's body belongs to its command, and
// blank lines and comments are left out.
func shellCommands(block string) []string {
	var out []string
	lines := strings.Split(block, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if _, marker, ok := strings.Cut(l, "<<'"); ok {
			end, _, _ := strings.Cut(marker, "'")
			for i+1 < len(lines) && strings.TrimSpace(lines[i]) != end {
				i++
			}
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// Every command of every ```sh block of the docs is run by a test or is listed in notRun
// with the reason; every entry of notRun still matches a line the docs show.
func TestDocsShellCommandsAreRunOrListed(t *testing.T) {
	used := make([]bool, len(notRun))
	var commands int
	for _, d := range docs(t) {
		for _, b := range codeBlocks(d.text, "sh") {
			for _, l := range shellCommands(b) {
				commands++
				if natsCommandRE.MatchString(l) {
					continue // TestREADMENatsExamples fails on a nats line it does not run
				}
				if _, ok := compactorArgs(l); ok {
					continue // TestREADMECompactorCommandsParse
				}
				listed := false
				for i, n := range notRun {
					if strings.HasPrefix(l, n.prefix) {
						used[i], listed = true, true
						break
					}
				}
				if !listed {
					t.Errorf("%s shows %q, which no test runs: run it in a test, or list it in notRun with the reason", d.path, l)
				}
			}
		}
	}
	for i, n := range notRun {
		if !used[i] {
			t.Errorf("notRun lists %q, which no doc shows any more: remove it", n.prefix)
		}
	}
	if commands < 40 {
		t.Fatalf("found only %d shell commands in the docs", commands)
	}
}
