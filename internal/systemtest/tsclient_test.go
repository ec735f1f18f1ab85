package systemtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/rolestest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
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
	for _, m := range []string{"@nats-io/transport-node", "@nats-io/jetstream", "typescript"} {
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
	stk := startStack(t, testEnv(t, 8000), fakellm.New(t))
	slow := fakellm.New(t)
	slow.Set(func(f *fakellm.LLM) { f.Delay = 3 * time.Second })
	held := startStack(t, testEnv(t, 8000), slow)
	small := jstest.ServerWith(t, jstest.MaxPayload(16<<10))
	jstest.Provision(t, jstest.ConnTo(t, small.ClientURL()))
	env := []string{
		"NATS_URL=" + stk.nc.ConnectedUrl(),
		"NATS_HELD_URL=" + held.nc.ConnectedUrl(),
		"NATS_SMALL_URL=" + small.ClientURL(),
		"COMPACTOR_FIXTURE_SERVERS=" + string(fixtureURLs),
	}
	for _, f := range []string{"fixtures.test.js", "client.test.js", "agent.test.js", "unit.test.js", "ai-sdk-adapter.test.js", "openai-agents-adapter.test.js", "langchain-adapter.test.js"} {
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
	s := startStack(t, env, fakellm.New(t))
	url := "NATS_URL=" + s.nc.ConnectedUrl()
	cases := interopCases(t, s.st, loadCorpus(t, 1), "ts-corpus", "ts-user-messages")
	for conv, msgs := range cases {
		t.Run(conv, func(t *testing.T) {
			out, errOut, err := runTS(t, node, dir, []string{url}, jsonlOf(msgs), "dist/examples/jsonl.js", "publish", conv)
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
				v, _, _ := s.st.Results().Get(ctxFor(t, 5*time.Second), conv, false)
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
		if out, errOut, err := runTS(t, node, dir, []string{url}, jsonlOf(msgs), "dist/examples/jsonl.js", "publish", "from-ts-large"); err != nil {
			t.Fatalf("ts publish: %v, %s\n%s", err, out, errOut)
		}
		es, err := st.Chat().LoadEntries(ctx, "from-ts-large", 0, 0)
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
	url, connect := rolestest.Server(t)
	admin := connect("admin")
	st, err := jetstream.Provision(ctxFor(t, time.Minute), admin.NC, jetstream.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, admin.NC, st, testEnv(t, 100000), nil) // the compactor service, for forget
	runTSTests(t, node, dir, []string{"NATS_ROLES_URL=" + url}, "roles.test.js")
}

// decodeCases are stored payloads for the decoder comparison: real messages of the
// corpus, the fuzz seeds, and each field of the contract given every kind of JSON value.
func decodeCases(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	for _, msgs := range loadCorpus(t, 3) {
		for _, m := range msgs[:min(len(msgs), 40)] {
			b, _ := m.Encode()
			out = append(out, b)
		}
	}
	values := []string{`null`, `0`, `-1`, `1.5`, `1.0`, `1e2`, `-0`, `9007199254740993`, `18446744073709551615`, `""`, `"x"`,
		`"\ud800"`, `true`, `[]`, `[null]`, `[1]`, `["a"]`, `{}`, `{"a":1}`, `{"pin":"true"}`, `{"pin":null}`, `{"pin":1}`}
	bases := []string{
		`{"role":"user","content":"hi"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]}`,
		`{"role":"tool","content":"42","tool_call_id":"c1"}`,
	}
	fields := []string{"role", "content", "name", "tool_calls", "tool_call_id", "reasoning", "extra", "tokens", "usage",
		"context_generation", "meta", "content_ref", "Role", "TOKENS", "__proto__", "1"}
	for _, base := range bases {
		for _, f := range fields {
			for _, v := range values {
				out = append(out, []byte(base[:len(base)-1]+`,"`+f+`":`+v+`}`))
			}
		}
	}
	// Nested fields: tool calls, usage, content parts and references of every shape.
	for _, tc := range []string{`{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}`,
		`{"ID":"a","TYPE":"function","Function":{"NAME":"f","Arguments":"x"}}`, `{"id":"a","type":"function","function":{"name":"f","argumentſ":"k"}}`,
		`{"id":"a","type":"function","function":{"name":"f"},"function":{"arguments":"x"}}`, `{"id":"a","type":"function","function":null}`,
		`{"id":"a","type":"tool","function":{"name":"f"}}`, `{"id":1,"type":"function","function":{"name":"f"}}`, `{"id":"a","type":"function","function":{"name":"f","arguments":{}}}`,
		`{"id":"","type":"function","function":{"name":"f"}}`, `{"id":"a","type":"function","function":{"name":""}}`, `null`, `"a"`, `{"id":"a","id":"b","type":"function","function":{"name":"f"}}`} {
		out = append(out, []byte(`{"role":"assistant","content":null,"tool_calls":[`+tc+`]}`))
		out = append(out, []byte(`{"role":"assistant","content":"x","tool_calls":[`+tc+`,`+tc+`]}`))
	}
	for _, u := range []string{`{"prompt_tokens":1,"completion_tokens":2}`, `{"PROMPT_TOKENS":1}`, `{"prompt_tokens":-1}`, `{"prompt_tokens":1.0}`,
		`{"prompt_tokens":null,"total_tokens":3}`, `{"cached":{"x":1}}`, `{"prompt_tokens":"1"}`,
		`{"prompt_tokens":9,"completion_tokens":2,"cached_tokens":8}`, `{"prompt_tokens":1,"cached_tokens":-1}`, `{"prompt_tokens":1,"cached_tokens":0.5}`} {
		out = append(out, []byte(`{"role":"assistant","content":"x","usage":`+u+`}`))
	}
	for _, c := range []string{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]`, `[{"type":"text","text":1}]`,
		`[{"type":"image_url"}]`, `[{"type":"image_url","image_url":null}]`, `[{"type":"x-new","x":1}]`, `[{"type":""}]`, `[{"Type":"text","text":"a"}]`,
		`[null]`, `[[]]`, `[]`, `[{"type":"text","text":"a","type":"refusal"}]`, `[{"type":"refusal","refusal":"no"}]`, `[{"type":"file","file":{"filename":"a"}}]`} {
		out = append(out, []byte(`{"role":"user","content":`+c+`}`))
	}
	sha := strings.Repeat("ab", 32)
	for _, r := range []string{
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":99,"sha256":"` + sha + `","tokens":3}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":13,"sha256":"` + sha + `","tokens":3}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":99,"sha256":"` + strings.ToUpper(sha) + `","tokens":3}`,
		`{"bucket":"compaction objects","name":"c/` + sha + `","size":99,"sha256":"` + sha + `","tokens":3}`,
		`{"bucket":"compaction-objects","name":"c.d/` + sha + `","size":99,"sha256":"` + sha + `","tokens":3}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":99,"sha256":"` + sha + `"}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":"99","sha256":"` + sha + `","tokens":3}`,
		`{"BUCKET":"compaction-objects","name":"c/` + sha + `","size":99,"sha256":"` + sha + `","tokens":3}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":99,"sha256":"` + sha + `","tokens":-3}`,
		`{"bucket":"compaction-objects","name":"c/` + sha + `","size":99.0,"sha256":"` + sha + `","tokens":3}`,
	} {
		out = append(out, []byte(`{"role":"tool","content":"[stored]","tool_call_id":"c1","content_ref":`+r+`}`))
	}
	for _, raw := range []string{`null`, `[1]`, `"s"`, `1`, ``, ` {"role":"user","content":"x"} `, `{"role":"user","content":"x"} x`, "{\"role\":\"user\",\"content\":\"\xff\"}",
		"{\"role\":\"user\",\"content\":\"ok\",\"x\":\"\xed\xa0\x80\"}", `{"role":"user","content":"a","role":"robot"}`, `{"role":"robot","content":"a","role":"user"}`,
		`{"role":"user","content":"a","extra":"s"}`, `{"role":"user","content":"a","extra":[]}`, `{"role":"system","content":null}`,
		`{"role":"user","content":"a","tool_call_id":"x"}`, `{"role":"tool","content":"a"}`, `{"role":"user","content":"\u0000"}`} {
		out = append(out, []byte(raw))
	}
	return out
}

// The TypeScript client decodes every stored payload as the Go reader does: the same
// payloads accepted, to the same message, and the same refused, naming the same field.
func TestTSClientDecodesAsGo(t *testing.T) {
	node, dir := tsClient(t)
	cases := decodeCases(t)
	var in bytes.Buffer
	for _, c := range cases {
		in.WriteString(base64.StdEncoding.EncodeToString(c))
		in.WriteByte('\n')
	}
	out, errOut, err := runTS(t, node, dir, nil, in.Bytes(), "dist/tools/decode.js")
	if err != nil {
		t.Fatalf("ts decode: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("ts decoded %d payloads of %d", len(lines), len(cases))
	}
	for i, c := range cases {
		var got struct {
			OK      bool            `json:"ok"`
			Message json.RawMessage `json:"message"`
			Field   string          `json:"field"`
			Error   string          `json:"error"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		m, err := schemas.DecodeMessage(c)
		var ve *schemas.ValidationError
		switch {
		case err != nil && !errors.As(err, &ve):
			t.Fatalf("go: %v", err)
		case err != nil && got.OK:
			t.Errorf("%s\n go refuses it (%v); ts accepts it as %s", c, err, got.Message)
		case err != nil && got.Field != ve.Field:
			t.Errorf("%s\n go refuses %s (%v); ts refuses %s (%s)", c, ve.Field, err, got.Field, got.Error)
		case err == nil && !got.OK:
			t.Errorf("%s\n go accepts it; ts refuses it: %s", c, got.Error)
		case err == nil:
			want, _ := m.Encode()
			var a, b any
			_ = json.Unmarshal(got.Message, &a)
			_ = json.Unmarshal(want, &b)
			if !jsonEqual(a, noNegativeZero(b)) {
				t.Errorf("%s\n go: %s\n ts: %s", c, want, got.Message)
			}
		}
	}
	t.Logf("%d payloads decoded alike", len(cases))
}

// noNegativeZero turns -0 into 0 in a decoded JSON value: JavaScript reads -0 but
// JSON.stringify writes it as 0, and both are the number zero.
func noNegativeZero(v any) any {
	switch x := v.(type) {
	case float64:
		if x == 0 {
			return 0.0
		}
	case []any:
		for i := range x {
			x[i] = noNegativeZero(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = noNegativeZero(x[k])
		}
	}
	return v
}

// The TypeScript client decodes KV values as the Go reader does: the same refused
// (naming the same field) and the same read, to the same summary, tail start, pinned
// sequences and overrides.
func TestTSClientDecodesValuesAsGo(t *testing.T) {
	node, dir := tsClient(t)
	const conv = "c"
	base := `{"schema_version":1,"conversation":"c","generation":2,"summary":"s","summary_role":"system","tail_start_seq":5,"covered_through_seq":4,` +
		`"pinned_seqs":[1,3],"overrides":[{"seq":5,"keep_head":3,"keep_tail":2,"note":"n"}],"llm_base_generation":1,"fallback":false,` +
		`"tokens_before":10,"tokens_after":5,"messages_before":4,"messages_after":2,"created_at":"2026-01-02T03:04:05Z"}`
	cases := []string{base, `null`, `[]`, `{}`, `"x"`, `{"schema_version":2}`, `{"schema_version":"1"}`, `{"schema_version":1.0,"conversation":"c","tail_start_seq":1}`,
		`{"schema_version":1,"conversation":"c","tail_start_seq":1}`, `{"schema_version":1,"conversation":"d","tail_start_seq":1}`,
		`{"schema_version":1,"conversation":"a.b","tail_start_seq":1}`}
	values := []string{`null`, `0`, `-1`, `1.5`, `1.0`, `7`, `9007199254740993`, `""`, `"x"`, `"user"`, `true`, `[]`, `[0]`, `[null]`, `[2,"3"]`, `{}`,
		`[{"seq":5}]`, `[{"SEQ":6,"Keep_Head":1}]`, `[{"seq":-1}]`, `[{"keep_head":-3,"keep_tail":1.5}]`, `[null]`, `{"prompt_tokens":1}`, `{"prompt_tokens":1.5}`, `{"prompt_tokens":9,"cached_tokens":8}`, `{"prompt_tokens":9,"cached_tokens":"8"}`,
		`"2026-02-29T00:00:00Z"`, `"2024-02-29T00:00:00Z"`, `"0000-02-29T00:00:00Z"`, `"2026-01-02T03:04:05.123456789+02:00"`, `"2026-01-02t03:04:05z"`,
		`"2026-01-02T24:00:00Z"`, `"2026-01-02T03:04:60Z"`, `"2026-01-02T03:04:05+24:00"`, `"2026-01-02T03:04:05+25:00"`, `"2026-01-02T03:04:05-01:61"`,
		`"2026-01-02T3:04:05Z"`, `"2026-01-02T03:04:05,5Z"`, `"2026-01-02T03:4:05Z"`, `"2026-04-31T03:04:05Z"`, `"2026-01-02 03:04:05Z"`, `"2026-01-02T03:04:05."`, `"2026-1-02T03:04:05Z"`}
	for _, f := range []string{"schema_version", "conversation", "generation", "summary", "summary_role", "tail_start_seq", "covered_through_seq",
		"pinned_seqs", "kept_seqs", "overrides", "fallback", "usage", "created_at", "request_seq", "tokens_before", "Summary", "future",
		"evidence_text", "evidence"} {
		for _, v := range values {
			cases = append(cases, base[:len(base)-1]+`,"`+f+`":`+v+`}`)
		}
	}
	for _, v := range []string{`{"through_seq":3,"items":[{"kind":"file","value":"a.go","count":2,"last_seq":3,"changed":true}]}`,
		`{"through_seq":-1}`, `{"through_seq":1.5}`, `{"items":{}}`, `{"items":[null,{}]}`, `{"items":[1]}`, `{"items":[{"kind":1}]}`,
		`{"items":[{"value":null,"count":-2,"last_seq":0}]}`, `{"items":[{"count":"1"}]}`, `{"items":[{"last_seq":-1}]}`,
		`{"items":[{"changed":"yes"}]}`, `{"Items":[{"Count":1.5}]}`, `{"through_seq":1,"future":[1]}`} {
		cases = append(cases, base[:len(base)-1]+`,"evidence":`+v+`}`)
	}
	var in bytes.Buffer
	for _, c := range cases {
		in.WriteString(base64.StdEncoding.EncodeToString([]byte(c)))
		in.WriteByte('\n')
	}
	out, errOut, err := runTS(t, node, dir, nil, in.Bytes(), "dist/tools/decode.js", "value", conv)
	if err != nil {
		t.Fatalf("ts decode: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("ts decoded %d values of %d", len(lines), len(cases))
	}
	for i, c := range cases {
		var got struct {
			OK    bool   `json:"ok"`
			Field string `json:"field"`
			Error string `json:"error"`
			Value struct {
				Generation        uint64             `json:"generation"`
				Summary           string             `json:"summary"`
				EvidenceText      string             `json:"evidenceText"`
				SummaryRole       string             `json:"summaryRole"`
				TailStartSeq      uint64             `json:"tailStartSeq"`
				CoveredThroughSeq uint64             `json:"coveredThroughSeq"`
				PinnedSeqs        []uint64           `json:"pinnedSeqs"`
				Overrides         []schemas.Override `json:"overrides"`
			} `json:"value"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		v, err := schemas.DecodeResult([]byte(c))
		if err == nil && v.Conversation != conv {
			err = &schemas.ValidationError{Field: "conversation", Rule: "is not the key's"}
		}
		field := ""
		var ve *schemas.ValidationError
		var newer *schemas.ErrNewerSchema
		switch {
		case errors.As(err, &ve):
			field = ve.Field
		case errors.As(err, &newer):
			field = "schema_version"
		case err != nil:
			t.Fatalf("go: %v", err)
		}
		switch {
		case err != nil && (got.OK || got.Field != field):
			t.Errorf("%s\n go refuses %s (%v); ts: %s", c, field, err, lines[i])
		case err == nil && !got.OK:
			t.Errorf("%s\n go reads it; ts refuses it: %s", c, got.Error)
		case err == nil && strings.Contains(c, "9007199254740993"):
			// Past 2^53 a JavaScript number is the nearest one (README, "TypeScript client").
		case err == nil:
			g := got.Value
			if g.Generation != v.Generation || g.Summary != v.Summary || g.EvidenceText != v.EvidenceText || g.SummaryRole != string(v.SummaryRole) || g.TailStartSeq != v.TailStartSeq ||
				g.CoveredThroughSeq != v.CoveredThroughSeq || !slices.Equal(g.PinnedSeqs, v.PinnedSeqs) && len(g.PinnedSeqs)+len(v.PinnedSeqs) > 0 ||
				!slices.Equal(g.Overrides, v.Overrides) && len(g.Overrides)+len(v.Overrides) > 0 {
				t.Errorf("%s\n go: %+v\n ts: %+v", c, v, g)
			}
		}
	}
	t.Logf("%d values decoded alike", len(cases))
}

// randomReaderInput makes what a reader loads for conversation "c", from seed: entries
// of every kind (text, parts, tool rounds answered in any order, orphan and repeated
// results, invalid payloads, producer counts, pins) at growing sequences with gaps, and
// a value with a summary, a tail start anywhere, pinned sequences (duplicated, in the
// tail, missing) and overrides; raw output and a read-time budget at times.
func randomReaderInput(r *rand.Rand) (in assemble.Input, opts assemble.Options, ts map[string]any) {
	text := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteString([]string{"word ", "línea ", "✓ ", "😀", "\n", "x"}[r.IntN(6)])
		}
		return b.String()
	}
	ids := []string{"a", "b", "c", "d"}
	var stored []map[string]any
	var es []schemas.Entry
	seq := uint64(0)
	for range r.IntN(30) {
		seq += 1 + uint64(r.IntN(3))
		var m map[string]any
		switch r.IntN(9) {
		case 0, 1:
			m = map[string]any{"role": "user", "content": text(r.IntN(1500))}
		case 2:
			m = map[string]any{"role": "assistant", "content": text(r.IntN(300))}
		case 3:
			var calls []any
			for _, id := range ids[:1+r.IntN(3)] {
				calls = append(calls, map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "f" + id, "arguments": text(r.IntN(40))}})
			}
			m = map[string]any{"role": "assistant", "content": nil, "tool_calls": calls}
		case 4, 5:
			m = map[string]any{"role": "tool", "tool_call_id": ids[r.IntN(len(ids))], "content": text(r.IntN(2500))}
		case 6:
			m = map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text(r.IntN(400))},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": "u"}}, map[string]any{"type": "text", "text": text(r.IntN(100))}}}
		case 7:
			m = map[string]any{"role": "system", "content": text(r.IntN(200)), "meta": map[string]string{"pin": "true"}, "tokens": r.IntN(50)}
		case 8:
			m = map[string]any{"role": []string{"robot", ""}[r.IntN(2)], "content": "bad"}
		}
		data, _ := json.Marshal(m)
		stored = append(stored, map[string]any{"seq": seq, "data": base64.StdEncoding.EncodeToString(data)})
		es = append(es, jetstream.StoredMsg{Seq: seq, Data: data}.Entry())
	}
	opts = assemble.Options{Raw: r.IntN(3) == 0}
	if r.IntN(3) == 0 {
		opts.MaxTokens = 50 + r.IntN(2000)
	}
	ts = map[string]any{"value": nil, "raw": opts.Raw, "max_tokens": opts.MaxTokens}
	if r.IntN(4) == 0 {
		in.Tail = es
		ts["tail"] = stored
		return in, opts, ts
	}
	t := r.IntN(len(es) + 1)
	v := map[string]any{"schema_version": 1, "conversation": "c", "generation": 1 + r.IntN(5), "summary": text(r.IntN(600)),
		"summary_role": []string{"", "system", "user", "assistant"}[r.IntN(4)], "tail_start_seq": seq + 1, "covered_through_seq": seq,
		"created_at": "2026-01-02T03:04:05Z"}
	if t < len(es) {
		v["tail_start_seq"], v["covered_through_seq"] = es[t].Seq, es[t].Seq-1
	}
	var pinned []uint64
	var pinnedStored []map[string]any
	for i := range es {
		if (i < t || r.IntN(8) == 0) && r.IntN(3) == 0 {
			pinned = append(pinned, es[i].Seq)
			in.Pinned = append(in.Pinned, es[i])
			pinnedStored = append(pinnedStored, stored[i])
		}
	}
	if r.IntN(3) == 0 && len(pinned) > 0 { // a duplicate, and a sequence no longer there
		pinned = append(pinned, pinned[0], seq+7)
		in.Pinned = append(in.Pinned, in.Pinned[0], schemas.Entry{Seq: seq + 7, Err: fmt.Errorf("pinned message %d: %w", seq+7, jetstream.ErrMissingMessage)})
		pinnedStored = append(pinnedStored, pinnedStored[0], map[string]any{"seq": seq + 7, "error": fmt.Sprintf("pinned message %d: %v", seq+7, jetstream.ErrMissingMessage)})
	}
	v["pinned_seqs"] = pinned
	var ovs []map[string]any
	for range r.IntN(4) {
		if len(es) > 0 {
			ovs = append(ovs, map[string]any{"seq": es[r.IntN(len(es))].Seq, "keep_head": r.IntN(300) - 10, "keep_tail": r.IntN(300), "note": []string{"", "cut"}[r.IntN(2)]})
		}
	}
	v["overrides"] = ovs
	if r.IntN(2) == 0 {
		v["evidence_text"] = text(r.IntN(400))
	}
	vb, _ := json.Marshal(v)
	res, err := schemas.DecodeResult(vb)
	if err != nil {
		panic(err)
	}
	in.Value, in.Tail = res, es[t:]
	ts["value"], ts["pinned"], ts["tail"] = string(vb), pinnedStored, stored[t:]
	return in, opts, ts
}

// The TypeScript reader assembles what the Go reader assembles from the same loaded
// inputs, on random conversations: the same messages, sequences, token count, cut and
// skipped entries with the same reasons.
func TestTSClientAssemblesAsGo(t *testing.T) {
	node, dir := tsClient(t)
	r := rand.New(rand.NewPCG(11, 1))
	const n = 400
	var in bytes.Buffer
	var goOut []assemble.Context
	for range n {
		input, opts, ts := randomReaderInput(r)
		goOut = append(goOut, assemble.Assemble(input, opts))
		b, _ := json.Marshal(ts)
		in.WriteString(base64.StdEncoding.EncodeToString(b))
		in.WriteByte('\n')
	}
	out, errOut, err := runTS(t, node, dir, nil, in.Bytes(), "dist/tools/decode.js", "assemble", "c")
	if err != nil {
		t.Fatalf("ts assemble: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n {
		t.Fatalf("ts assembled %d inputs of %d", len(lines), n)
	}
	degraded, skipped := 0, 0
	for i, want := range goOut {
		var got struct {
			Context struct {
				Messages     []json.RawMessage `json:"messages"`
				Seqs         []uint64          `json:"seqs"`
				Generation   uint64            `json:"generation"`
				TailStartSeq uint64            `json:"tailStartSeq"`
				HasSummary   bool              `json:"hasSummary"`
				Tokens       int               `json:"tokens"`
				Degraded     bool              `json:"degraded"`
				Skipped      []rounds.Skipped  `json:"skipped"`
			} `json:"context"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		g := got.Context
		if !slices.Equal(g.Seqs, want.Seqs) || g.Generation != want.Generation || g.TailStartSeq != want.TailStartSeq ||
			g.HasSummary != want.HasSummary || g.Tokens != want.Tokens || g.Degraded != want.Degraded {
			t.Errorf("input %d: ts seqs %v, generation %d, tail %d, summary %v, tokens %d, degraded %v; go %v, %d, %d, %v, %d, %v",
				i, g.Seqs, g.Generation, g.TailStartSeq, g.HasSummary, g.Tokens, g.Degraded,
				want.Seqs, want.Generation, want.TailStartSeq, want.HasSummary, want.Tokens, want.Degraded)
			continue
		}
		for k, m := range want.Messages {
			b, _ := m.Encode()
			var a, c any
			_ = json.Unmarshal(g.Messages[k], &a)
			_ = json.Unmarshal(b, &c)
			if !jsonEqual(a, c) {
				t.Errorf("input %d message %d:\n ts %.300s\n go %.300s", i, k, g.Messages[k], b)
			}
		}
		if len(g.Skipped) != len(want.Skipped) {
			t.Errorf("input %d: ts skipped %v; go %v", i, g.Skipped, want.Skipped)
			continue
		}
		for k, s := range want.Skipped {
			gs := g.Skipped[k]
			// An invalid payload's reason names the field and the rule; a JSON parser's
			// words after it differ between languages.
			same := gs.Reason == s.Reason || strings.Contains(s.Reason, "invalid message: role:") && strings.HasPrefix(gs.Reason, s.Reason[:strings.Index(s.Reason, "role:")+5])
			if gs.Seq != s.Seq || !same {
				t.Errorf("input %d skipped %d: ts %d %q; go %d %q", i, k, gs.Seq, gs.Reason, s.Seq, s.Reason)
			}
		}
		if want.Degraded {
			degraded++
		}
		skipped += len(want.Skipped)
	}
	t.Logf("%d random inputs assembled alike (%d cut at read time, %d entries skipped)", n, degraded, skipped)
}
