package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// The TypeScript client (clients/ts) runs its test suite with Node against what these
// tests start: an embedded server with the compactor's roles and a fake LLM, one whose
// LLM answers late (a pending request), a server with a small max payload and no
// compactor, one server per reader fixture, and the users of deploy/nats/accounts.conf.
// Without node or the package's modules the tests skip, unless CI=true: then they fail
// (.ci/run installs the modules with npm ci).

var tsBuild struct {
	once sync.Once
	err  error
	out  []byte
}

// tsClient returns node and the package's directory, built (npm run build) once per
// test process.
func tsClient(t *testing.T) (node, dir string) {
	t.Helper()
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	dir, _ = filepath.Abs(filepath.Join("..", "..", "clients", "ts"))
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed")
	}
	for _, m := range []string{"nats", "typescript"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m)); err != nil {
			skip("run npm ci in clients/ts to enable this test")
		}
	}
	tsBuild.once.Do(func() {
		// tsc itself, not npm run: npm may be absent where node_modules was copied in.
		cmd := exec.Command(node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".")
		cmd.Dir = dir
		tsBuild.out, tsBuild.err = cmd.CombinedOutput()
	})
	if tsBuild.err != nil {
		t.Fatalf("build clients/ts: %v\n%s", tsBuild.err, tsBuild.out)
	}
	return node, dir
}

// runTS runs node with args in the package's directory, with env added to the test's.
func runTS(t *testing.T, node, dir string, env []string, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// runTSTests runs test files of the package with node's test runner and fails with its
// report when any test fails.
func runTSTests(t *testing.T, node, dir string, env []string, files ...string) {
	t.Helper()
	args := []string{"--test", "--test-concurrency=1", "--test-reporter=spec"}
	for _, f := range files {
		args = append(args, filepath.Join("dist", "test", f))
	}
	out, errOut, err := runTS(t, node, dir, env, nil, args...)
	if err != nil {
		t.Fatalf("node --test %v: %v\n%s\n%s", files, err, lastLines(out, 150), lastLines(errOut, 50))
	}
	if strings.Contains(out, "# SKIP") || strings.Contains(out, "﹣ ") {
		t.Logf("node --test %v skipped tests:\n%s", files, out)
	}
	t.Logf("node --test %v:\n%s", files, lastLines(out, 12))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// The TypeScript client's suite: its reader on every fixture (on the fixture's data and
// against a server loaded with it), publish, context, compact, busy, status, policy,
// forget, large messages, errors and the example agent loop.
func TestTSClient(t *testing.T) {
	node, dir := tsClient(t)
	fixtures := map[string]string{}
	for name, fx := range loadReaderFixtures(t) {
		fixtures[name] = loadFixture(t, fx).ClientURL()
	}
	fixtureURLs, _ := json.Marshal(fixtures)
	stk := startStack(t, testEnv(t, 8000), newFakeLLM(t))
	slow := newFakeLLM(t)
	slow.set(func(f *fakeLLM) { f.delay = 3 * time.Second })
	held := startStack(t, testEnv(t, 8000), slow)
	small := jstest.ServerWith(t, jstest.MaxPayload(16<<10))
	jstest.Provision(t, jstest.ConnTo(t, small.ClientURL()))
	env := []string{
		"NATS_URL=" + stk.nc.ConnectedUrl(),
		"NATS_HELD_URL=" + held.nc.ConnectedUrl(),
		"NATS_SMALL_URL=" + small.ClientURL(),
		"COMPACTOR_FIXTURE_SERVERS=" + string(fixtureURLs),
	}
	for _, f := range []string{"fixtures.test.js", "client.test.js", "agent.test.js", "unit.test.js"} {
		t.Run(strings.TrimSuffix(f, ".test.js"), func(t *testing.T) {
			runTSTests(t, node, dir, env, f)
		})
	}
}

// The TypeScript client publishes a real transcript, Compactor compacts it, and the TS
// reader assembles the same context as the Go reader; also under the user-messages
// strategy, whose kept messages are pinned and one truncated by an override.
func TestTSClientReadsTheSameContext(t *testing.T) {
	node, dir := tsClient(t)
	env := testEnv(t, 8000)
	s := startStack(t, env, newFakeLLM(t))
	url := "NATS_URL=" + s.nc.ConnectedUrl()
	var long []schemas.Message
	for i := range 30 {
		long = append(long,
			schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("request %d: %s", i, strings.Repeat("details of what I want. ", 40)))},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("working on it")})
	}
	cases := map[string][]schemas.Message{"ts-corpus": nil, "ts-user-messages": long}
	for _, msgs := range loadCorpus(t, 1) {
		cases["ts-corpus"] = msgs
	}
	data, _ := policy.EncodeConversation(policy.Layer{"strategy": "user-messages", "user_message_tokens": "700"})
	if err := s.st.PutPolicy(ctxFor(t, 5*time.Second), "ts-user-messages", data, 0); err != nil {
		t.Fatal(err)
	}
	for conv, msgs := range cases {
		t.Run(conv, func(t *testing.T) {
			var jsonl bytes.Buffer
			for _, m := range msgs {
				b, _ := m.Encode()
				jsonl.Write(b)
				jsonl.WriteByte('\n')
			}
			out, errOut, err := runTS(t, node, dir, []string{url}, jsonl.Bytes(), "dist/examples/jsonl.js", "publish", conv)
			if err != nil || len(strings.Fields(out)) != len(msgs) {
				t.Fatalf("ts publish: %v, %d sequences for %d messages\n%s", err, len(strings.Fields(out)), len(msgs), errOut)
			}
			settle(t, s)
			eventually(t, 30*time.Second, "compaction of "+conv, func() bool {
				cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
				return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
			})
			settle(t, s)
			cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, err = runTS(t, node, dir, []string{url}, nil, "dist/examples/jsonl.js", "context", conv)
			if err != nil {
				t.Fatalf("ts context: %v\n%s", err, errOut)
			}
			sameMessages(t, "ts", strings.Split(strings.TrimSpace(out), "\n"), cx.Messages)
			if want := fmt.Sprintf("generation %d, %d messages, %d tokens", cx.Generation, len(cx.Messages), cx.Tokens); !strings.Contains(errOut, want) {
				t.Errorf("ts reported %q; want %q", errOut, want)
			}
			if conv == "ts-user-messages" {
				v, _, _ := s.st.GetResult(ctxFor(t, 5*time.Second), conv, false)
				if len(v.KeptSeqs) == 0 || len(v.Overrides) == 0 {
					t.Fatalf("user-messages kept %v with overrides %v; the test needs both", v.KeptSeqs, v.Overrides)
				}
			}
		})
	}
}

// sameMessages checks that lines (JSON messages) equal msgs, whatever the key order.
func sameMessages(t *testing.T, who string, lines []string, msgs []schemas.Message) {
	t.Helper()
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	if len(lines) != len(msgs) {
		t.Fatalf("%s read %d messages; want %d", who, len(lines), len(msgs))
	}
	for i, line := range lines {
		want, _ := msgs[i].Encode()
		var a, b any
		_ = json.Unmarshal([]byte(line), &a)
		_ = json.Unmarshal(want, &b)
		if !jsonEqual(a, b) {
			t.Fatalf("%s message %d:\n%.300s\nwant\n%.300s", who, i, line, want)
		}
	}
}

// Messages over the max payload between the TypeScript and the Go client: what TS
// publishes (a stub and its object) Go restores, what Go publishes TS restores.
func TestTSClientLargeMessages(t *testing.T) {
	node, dir := tsClient(t)
	ns := jstest.ServerWith(t, jstest.MaxPayload(16<<10))
	nc := jstest.ConnTo(t, ns.ClientURL())
	st := jstest.Provision(t, nc)
	client := pipeline.NewWithStore(nc, st)
	ctx := ctxFor(t, time.Minute)
	url := "NATS_URL=" + ns.ClientURL()
	conversation := func(id string) []schemas.Message {
		return []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("build it")},
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "make", Arguments: "{}"}}}},
			{Role: schemas.RoleTool, ToolCallID: id, Reasoning: "checked the build",
				Content: schemas.Text("NEEDLE-head " + strings.Repeat("línea del registro de compilación\n", 1500) + " NEEDLE-tail"),
				Extra:   json.RawMessage(`{"sig":"abc=="}`), Unknown: map[string]json.RawMessage{"x-trace": json.RawMessage(`{"id":7}`)}},
			{Role: schemas.RoleAssistant, Content: schemas.Text("built")},
		}
	}
	tsRead := func(t *testing.T, conv string) []string {
		out, errOut, err := runTS(t, node, dir, []string{url}, nil, "dist/examples/jsonl.js", "context", conv)
		if err != nil || strings.Contains(errOut, "skipped") {
			t.Fatalf("ts context %s: %v\n%s", conv, err, errOut)
		}
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	t.Run("ts publishes, go reads", func(t *testing.T) {
		msgs := conversation("t1")
		var jsonl bytes.Buffer
		for _, m := range msgs {
			b, _ := m.Encode()
			jsonl.Write(b)
			jsonl.WriteByte('\n')
		}
		if out, errOut, err := runTS(t, node, dir, []string{url}, jsonl.Bytes(), "dist/examples/jsonl.js", "publish", "from-ts-large"); err != nil {
			t.Fatalf("ts publish: %v, %s\n%s", err, out, errOut)
		}
		es, err := st.LoadEntries(ctx, "from-ts-large", 0, 0)
		if err != nil || len(es) != 4 || es[2].Message.ContentRef == nil {
			t.Fatalf("CHAT holds %+v (%v); want a stub for the large output", es, err)
		}
		cx, err := client.Context(ctx, "from-ts-large")
		if err != nil || len(cx.Skipped) > 0 {
			t.Fatalf("go read: %v, skipped %v", err, cx.Skipped)
		}
		var lines []string
		for _, m := range cx.Messages {
			b, _ := m.Encode()
			lines = append(lines, string(b))
		}
		sameMessages(t, "go", lines, msgs)
		sameMessages(t, "ts", tsRead(t, "from-ts-large"), msgs)
	})
	t.Run("go publishes, ts reads", func(t *testing.T) {
		msgs := conversation("g1")
		for _, m := range msgs {
			if _, err := client.Publish(ctx, "from-go-large", m); err != nil {
				t.Fatal(err)
			}
		}
		sameMessages(t, "ts", tsRead(t, "from-go-large"), msgs)
	})
}

// The TypeScript client under the users of deploy/nats/accounts.conf: the producer
// publishes (a message over the max payload too), reads and forgets, the reader reads,
// each on its own inbox prefix; what a role may not do is refused.
func TestTSClientUnderRoles(t *testing.T) {
	node, dir := tsClient(t)
	url, connect := rolesServer(t)
	admin := connect("admin")
	st, err := jetstream.Provision(ctxFor(t, time.Minute), admin.nc, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, admin.nc, st, testEnv(t, 100000), nil) // the compactor service, for forget
	runTSTests(t, node, dir, []string{"NATS_ROLES_URL=" + url}, "roles.test.js")
}
