package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// interopCases are what another language's client publishes and reads back beside Go:
// a corpus transcript (loadCorpus(t, 1)'s) with the default strategy as corpusConv, and long user messages as userConv under user-messages (its policy
// stored), whose kept messages are pinned and one truncated by an override.
func interopCases(t *testing.T, st *jetstream.Store, transcripts map[string][]schemas.Message, corpusConv, userConv string) map[string][]schemas.Message {
	t.Helper()
	var long []schemas.Message
	for i := range 30 {
		long = append(long,
			schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(fmt.Sprintf("request %d: %s", i, strings.Repeat("details of what I want. ", 40)))},
			schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text("working on it")})
	}
	cases := map[string][]schemas.Message{corpusConv: nil, userConv: long}
	for _, msgs := range transcripts {
		cases[corpusConv] = msgs
	}
	data, _ := policy.EncodeConversation(policy.Layer{"strategy": "user-messages", "user_message_tokens": "700"})
	if err := st.Policies().Put(ctxFor(t, 5*time.Second), userConv, data, 0); err != nil {
		t.Fatal(err)
	}
	return cases
}

// jsonlOf is msgs as JSONL, one encoded message a line.
func jsonlOf(msgs []schemas.Message) []byte {
	var b bytes.Buffer
	for _, m := range msgs {
		data, _ := m.Encode()
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// The Node.js example publishes a real transcript with the plain NATS client, Compactor
// compacts it, and the example's reader, written from the README's steps, assembles the
// same context as the Go reader. Skips unless node and the example's modules are there
// (.ci/run installs them when npm is available).
func TestNodeExampleReadsTheSameContext(t *testing.T) {
	node, dir := nodeExample(t)
	convs := loadCorpus(t, 1)
	env := testEnv(t, 8000)
	s := startStack(t, env, fakellm.New(t))
	url := s.nc.ConnectedUrl()
	runNode := func(stdin []byte, args ...string) string {
		cmd := exec.Command(node, append([]string{"compactor.mjs"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NATS_URL="+url)
		cmd.Stdin = bytes.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}
	cases := interopCases(t, s.st, convs, "from-node", "node-user-messages")
	for conv, msgs := range cases {
		t.Run(conv, func(t *testing.T) {
			seqs := strings.Fields(runNode(jsonlOf(msgs), "publish", conv))
			if len(seqs) != len(msgs) {
				t.Fatalf("node published %d messages; want %d", len(seqs), len(msgs))
			}
			settle(t, s)
			eventually(t, 30*time.Second, "compaction of the node conversation", func() bool {
				cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
				return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
			})
			settle(t, s)
			cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSpace(runNode(nil, "context", conv)), "\n")
			if len(got) != len(cx.Messages) {
				t.Fatalf("node read %d messages; Go read %d", len(got), len(cx.Messages))
			}
			for i, line := range got {
				want, _ := cx.Messages[i].Encode()
				var a, b any
				_ = json.Unmarshal([]byte(line), &a)
				_ = json.Unmarshal(want, &b)
				if !jsonEqual(a, b) {
					t.Fatalf("message %d differs:\nnode: %.300s\ngo:   %.300s", i, line, want)
				}
			}
			if conv == "node-user-messages" {
				v, _, _ := s.st.Results().Get(ctxFor(t, 5*time.Second), conv, false)
				if len(v.KeptSeqs) == 0 || len(v.Overrides) == 0 {
					t.Fatalf("user-messages kept %v with overrides %v; the test needs both", v.KeptSeqs, v.Overrides)
				}
			}
		})
	}
}

// nodeExample returns the node binary and the example's directory. Without node or the
// example's modules the test skips, except in CI (CI=true), where it fails: CI must not
// pass without running the example.
func nodeExample(t *testing.T) (node, dir string) {
	t.Helper()
	skip := t.Skip
	if os.Getenv("CI") == "true" {
		skip = t.Fatal
	}
	dir, _ = filepath.Abs(filepath.Join("..", "..", "deploy", "examples", "node"))
	node, err := exec.LookPath("node")
	if err != nil {
		skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "nats")); err != nil {
		skip("run npm ci in deploy/examples/node to enable this test")
	}
	return node, dir
}

// Three runs of the Node.js example, each publishing one line to the same conversation
// within the duplicate window, store three messages: the example's message ids are unique
// per message, not per line number.
func TestNodeExampleSeparatePublishesAreAllStored(t *testing.T) {
	node, dir := nodeExample(t)
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	const conv = "node-turns"
	var seqs []string
	for i := range 3 {
		cmd := exec.Command(node, "compactor.mjs", "publish", conv)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL())
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"role":"user","content":"turn %d"}`+"\n", i))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("node publish %d: %v\n%s", i, err, errOut.String())
		}
		seqs = append(seqs, strings.TrimSpace(out.String()))
	}
	es, err := st.Chat().LoadEntries(ctxFor(t, 10*time.Second), conv, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Fatalf("stored %d messages of 3 separate publishes (node printed sequences %v); want 3", len(es), seqs)
	}
	for i, e := range es {
		if want := fmt.Sprintf("turn %d", i); e.Message.Content.String() != want {
			t.Errorf("message %d is %q; want %q", i, e.Message.Content.String(), want)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// runNodeExample runs the Node.js example against the NATS server at url.
func runNodeExample(t *testing.T, node, dir, url string, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runNodeExampleEnv(t, node, dir, []string{"NATS_URL=" + url}, stdin, args...)
}

// runNodeExampleEnv runs the Node.js example with env added to the test's environment.
func runNodeExampleEnv(t *testing.T, node, dir string, env []string, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(node, append([]string{"compactor.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// Messages over the max payload between the Node.js example and the Go client: what
// Node publishes (a stub and its object) the Go reader restores, what Go publishes the
// Node reader restores, both the same as what was published; both skip and report a
// message whose object is gone and a stub naming another conversation's object, and
// Node refuses a message too large even without its content, naming the limit.
func TestNodeExampleLargeMessages(t *testing.T) {
	node, dir := nodeExample(t)
	const maxPayload = 16 << 10
	ns := jstest.ServerWith(t, jstest.MaxPayload(maxPayload))
	nc := jstest.ConnTo(t, ns.ClientURL())
	st := jstest.Provision(t, nc)
	client := pipeline.NewWithStore(nc, st)
	ctx := ctxFor(t, time.Minute)
	url := ns.ClientURL()

	big := func(id string) schemas.Message {
		m := schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Reasoning: "checked the build",
			Content: schemas.Text("NEEDLE-head " + strings.Repeat("línea del registro de compilación\n", 3*maxPayload/34) + " NEEDLE-tail"),
			Extra:   json.RawMessage(`{"sig":"abc=="}`), Unknown: map[string]json.RawMessage{"x-trace": json.RawMessage(`{"id":7}`)}}
		return m
	}
	conversation := func(id string) []schemas.Message {
		return []schemas.Message{
			{Role: schemas.RoleUser, Content: schemas.Text("build it")},
			{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "make", Arguments: "{}"}}}},
			big(id),
			{Role: schemas.RoleAssistant, Content: schemas.Text("built")},
		}
	}
	jsonl := func(msgs []schemas.Message) []byte {
		var b bytes.Buffer
		for _, m := range msgs {
			e, _ := m.Encode()
			b.Write(e)
			b.WriteByte('\n')
		}
		return b.Bytes()
	}
	// same checks that lines (JSON messages) equal msgs, whatever the key order.
	same := func(t *testing.T, who string, lines []string, msgs []schemas.Message) {
		t.Helper()
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
	goRead := func(t *testing.T, conv string) (*pipeline.Context, []string) {
		t.Helper()
		last, err := st.Chat().LastSeq(ctx, conv)
		if err != nil {
			t.Fatal(err)
		}
		cx, err := client.Context(ctx, conv, pipeline.AtLeastSeq(last))
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, m := range cx.Messages {
			b, _ := m.Encode()
			lines = append(lines, string(b))
		}
		return cx, lines
	}
	nodeRead := func(t *testing.T, conv string) (lines []string, stderr string) {
		t.Helper()
		out, errOut, err := runNodeExample(t, node, dir, url, nil, "context", conv)
		if err != nil {
			t.Fatalf("node context %s: %v\n%s", conv, err, errOut)
		}
		if out = strings.TrimSpace(out); out != "" {
			lines = strings.Split(out, "\n")
		}
		return lines, errOut
	}

	t.Run("node publishes, go reads", func(t *testing.T) {
		msgs := conversation("n1")
		out, errOut, err := runNodeExample(t, node, dir, url, jsonl(msgs), "publish", "from-node-large")
		if err != nil || len(strings.Fields(out)) != len(msgs) {
			t.Fatalf("node publish: %v, printed %q\n%s", err, out, errOut)
		}
		es, err := st.Chat().LoadEntries(ctx, "from-node-large", 0, 0)
		if err != nil || es[2].Message.ContentRef == nil {
			t.Fatalf("CHAT holds %+v (%v); want a stub for the large output", es, err)
		}
		_, lines := goRead(t, "from-node-large")
		same(t, "go", lines, msgs)
		nodeLines, _ := nodeRead(t, "from-node-large")
		same(t, "node", nodeLines, msgs)
	})

	t.Run("go publishes, node reads", func(t *testing.T) {
		msgs := conversation("g1")
		for _, m := range msgs {
			if _, err := client.Publish(ctx, "from-go-large", m); err != nil {
				t.Fatal(err)
			}
		}
		lines, errOut := nodeRead(t, "from-go-large")
		if strings.Contains(errOut, "skipped") {
			t.Fatalf("node skipped messages:\n%s", errOut)
		}
		same(t, "node", lines, msgs)
	})

	t.Run("both skip a missing object and a foreign stub", func(t *testing.T) {
		msgs := conversation("m1")
		for _, m := range msgs {
			if _, err := client.Publish(ctx, "gap-large", m); err != nil {
				t.Fatal(err)
			}
		}
		es, err := st.Chat().LoadEntries(ctx, "gap-large", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// nats.go's ObjectStore below, as on a bucket of an earlier version
		jstest.AllowRollUps(t, nc, st.Config().ObjectsBucket)
		obs, err := jsFor(t, nc).ObjectStore(ctx, st.Config().ObjectsBucket)
		if err != nil {
			t.Fatal(err)
		}
		if err := obs.Delete(ctx, es[2].Message.ContentRef.Name); err != nil {
			t.Fatal(err)
		}
		// A stub of another conversation naming an object of from-go-large that exists.
		victim, err := st.Chat().LoadEntries(ctx, "from-go-large", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		hostile, _ := victim[2].Message.Encode()
		if _, err := st.Chat().Publish(ctx, "gap-large", hostile, ""); err != nil {
			t.Fatal(err)
		}
		want := []schemas.Message{msgs[0], msgs[3]} // the round without its result is left out
		cx, lines := goRead(t, "gap-large")
		same(t, "go", lines, want)
		nodeLines, errOut := nodeRead(t, "gap-large")
		same(t, "node", nodeLines, want)
		for _, reason := range []string{"missing", "outside conversation"} {
			if !skippedWith(cx.Skipped, reason) {
				t.Errorf("go skipped %v; want one with %q", cx.Skipped, reason)
			}
			if !strings.Contains(errOut, reason) {
				t.Errorf("node reported:\n%s\nwant a skip with %q", errOut, reason)
			}
		}
	})

	t.Run("node refuses a message too large without its content", func(t *testing.T) {
		m := schemas.Message{Role: schemas.RoleAssistant, ToolCalls: []schemas.ToolCall{{ID: "x", Type: "function",
			Function: schemas.FunctionCall{Name: "patch", Arguments: `{"diff":"` + strings.Repeat("+", 2*maxPayload) + `"}`}}}}
		_, errOut, err := runNodeExample(t, node, dir, url, jsonl([]schemas.Message{m}), "publish", "too-large")
		limit := strconv.Itoa(maxPayload - jetstream.HeaderRoom - len("00000000-0000-0000-0000-000000000000-1"))
		if err == nil || !strings.Contains(errOut, "max_payload") || !strings.Contains(errOut, limit) {
			t.Fatalf("node publish of huge tool call arguments: %v\n%s\nwant a refusal naming the limit %s", err, errOut, limit)
		}
		if last, err := st.Chat().LastSeq(ctx, "too-large"); err != nil || last != 0 {
			t.Fatalf("CHAT holds a message of too-large at %d (%v); want none", last, err)
		}
	})
}

func skippedWith(sk []pipeline.Skipped, reason string) bool {
	for _, s := range sk {
		if strings.Contains(s.Reason, reason) {
			return true
		}
	}
	return false
}

// The Node.js example forgets a conversation through compactor.forget: its answer says
// what was deleted, nothing of the conversation is stored afterwards, another one is
// untouched, and an invalid id is refused with the rule.
func TestNodeExampleForgets(t *testing.T) {
	node, dir := nodeExample(t)
	s := startStack(t, testEnv(t, 8000), nil)
	runNode := func(stdin string, args ...string) (string, string, error) {
		return runNodeExample(t, node, dir, s.nc.ConnectedUrl(), []byte(stdin), args...)
	}
	for _, conv := range []string{"node-gone", "node-kept"} {
		lines := fmt.Sprintf("{\"role\":\"user\",\"content\":\"NEEDLE-%s one\"}\n{\"role\":\"assistant\",\"content\":\"NEEDLE-%s two\"}\n", conv, conv)
		if _, errOut, err := runNode(lines, "publish", conv); err != nil {
			t.Fatalf("node publish %s: %v\n%s", conv, err, errOut)
		}
	}
	out, errOut, err := runNode("", "forget", "node-gone")
	if err != nil {
		t.Fatalf("node forget: %v\n%s", err, errOut)
	}
	var r schemas.ForgetResponse
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Conversation != "node-gone" || r.Deleted.ChatMessages != 2 || r.ThroughSeq < 2 {
		t.Fatalf("node forget printed %s (%v); want 2 messages deleted", out, err)
	}
	if found, _ := jstest.Scan(t, s.nc, "node-gone"); len(found) > 0 {
		t.Fatalf("after node forget: %v", found)
	}
	cx, err := s.client.Context(ctxFor(t, 10*time.Second), "node-kept")
	if err != nil || len(cx.Messages) != 2 {
		t.Fatalf("the other conversation after the forget: %d messages, %v; want 2", len(cx.Messages), err)
	}
	if _, errOut, err := runNode("", "forget", "a.b"); err == nil || !strings.Contains(errOut, "[A-Za-z0-9_-]") {
		t.Fatalf("node forget a.b: %v, %q; want the id rule", err, errOut)
	}
}

// The Node.js example under the users of deploy/nats/accounts.conf: it publishes as the
// producer and reads as the reader, each on its own inbox prefix; without the prefix its
// replies are refused. It decodes strictly as the Go reader does: a line that is not
// UTF-8 stops the publish at that line, and a stored message that is not UTF-8 is skipped
// and reported by both readers.
func TestNodeExampleUnderRoles(t *testing.T) {
	node, dir := nodeExample(t)
	url, connect := rolestest.Server(t)
	admin := connect("admin")
	ctx := ctxFor(t, time.Minute)
	st, err := jetstream.Provision(ctx, admin.NC, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	as := func(user string, prefix bool) []string {
		env := []string{"NATS_URL=" + url, "NATS_USER=" + user, "NATS_PASSWORD=" + os.Getenv("NATS_"+strings.ToUpper(user)+"_PASSWORD")}
		if prefix {
			env = append(env, "NATS_INBOX_PREFIX=_INBOX_"+user)
		}
		return env
	}
	const conv = "node-roles"
	in := []byte("{\"role\":\"user\",\"content\":\"NEEDLE-node-roles\"}\n{\"role\":\"user\",\"content\":\"bad \xff\"}\n")
	out, errOut, err := runNodeExampleEnv(t, node, dir, as("producer", true), in, "publish", conv)
	if err == nil || !strings.Contains(errOut, "line 2: not valid UTF-8") || strings.TrimSpace(out) != "1" {
		t.Fatalf("node publish as producer: %v, printed %q\n%s\nwant line 1 stored and line 2 refused as not UTF-8", err, out, errOut)
	}
	// Another producer skips the checks: the reader must cope.
	if _, err := st.Chat().Publish(ctx, conv, []byte("{\"role\":\"user\",\"content\":\"raw \xff\"}"), ""); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = runNodeExampleEnv(t, node, dir, as("reader", true), nil, "context", conv)
	if err != nil || !strings.Contains(out, "NEEDLE-node-roles") || !strings.Contains(errOut, "skipped seq 2: invalid message: not valid UTF-8") {
		t.Fatalf("node context as reader: %v\n%s\n%s\nwant the message and seq 2 skipped as not UTF-8", err, out, errOut)
	}
	cx, err := pipeline.NewWithStore(admin.NC, st).Context(ctx, conv)
	if err != nil || len(cx.Skipped) != 1 || cx.Skipped[0].Seq != 2 || !strings.Contains(cx.Skipped[0].Reason, "UTF-8") {
		t.Fatalf("go reader: %+v, %v; want seq 2 skipped as not UTF-8", cx, err)
	}
	if _, errOut, err := runNodeExampleEnv(t, node, dir, as("reader", false), nil, "context", conv); err == nil {
		t.Fatalf("node context as reader on the shared _INBOX: no error; want its replies refused\n%s", errOut)
	}
}

// With a partitioned trigger, CHAT stores messages on chat.<conv>.msg.<N>.<p>: the Node
// example (which reads chat.<conv>.>) reads the same context as the Go client.
func TestNodeExampleReadsPartitionedLayout(t *testing.T) {
	node, dir := nodeExample(t)
	env := testEnv(t, 4000)
	env.TriggerPartitions = 4
	srv := jstest.Server(t)
	nc := jstest.Conn(t, srv)
	st, err := jetstream.Provision(ctxFor(t, 10*time.Second), nc, env.jetstream())
	if err != nil {
		t.Fatal(err)
	}
	s := runStack(t, nc, st, env, fakellm.New(t))
	msgs, _ := fakellm.NeedleConversation(20)
	conv := "node-partitioned"
	for _, m := range msgs {
		if _, err := s.client.Publish(ctxFor(t, 5*time.Second), conv, m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "compaction of "+conv, func() bool {
		cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
		return err == nil && cx.Generation > 0 && cx.Tokens < env.budget().ThresholdTokens()
	})
	settle(t, s)
	cx, err := s.client.Context(ctxFor(t, 10*time.Second), conv)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "compactor.mjs", "context", conv)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("node context: %v\n%s", err, errOut.String())
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(cx.Messages) {
		t.Fatalf("node read %d messages; Go read %d", len(got), len(cx.Messages))
	}
	for i, line := range got {
		want, _ := cx.Messages[i].Encode()
		var a, b any
		_ = json.Unmarshal([]byte(line), &a)
		_ = json.Unmarshal(want, &b)
		if !jsonEqual(a, b) {
			t.Fatalf("message %d differs:\nnode: %.300s\ngo:   %.300s", i, line, want)
		}
	}
}
