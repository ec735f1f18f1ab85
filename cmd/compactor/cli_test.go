package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func cli(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, args, stdio{in: strings.NewReader(stdin), out: &out, err: &errOut}, os.LookupEnv)
	return out.String(), errOut.String(), err
}

// serveAnswers waits until the serve started by a test on COMPACTOR_LISTEN has
// provisioned (the status command reads the streams itself) and runs its service,
// which registers after them.
func serveAnswers(t *testing.T) {
	t.Helper()
	eventually(t, 10*time.Second, "serve to listen, provision and run its service", func() bool {
		if _, _, err := cli(t, "", "status"); err != nil {
			return false
		}
		nc, err := nats.Connect("nats://" + os.Getenv("COMPACTOR_LISTEN"))
		if err != nil {
			return false
		}
		defer nc.Close()
		m, err := nc.Request("compactor.status", []byte(`{}`), time.Second)
		return err == nil && m.Header.Get("Nats-Service-Error") == ""
	})
}

// jsonl is msgs as publish reads them.
func jsonl(msgs []schemas.Message) string {
	var in strings.Builder
	for _, m := range msgs {
		b, _ := m.Encode()
		in.Write(b)
		in.WriteByte('\n')
	}
	return in.String()
}

// The default run: serve with the embedded server, driven by the CLI as a user would.
func TestServeAndCLI(t *testing.T) {
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_LISTEN", freeAddr(t))
	t.Setenv("COMPACTOR_DATA_DIR", filepath.Join(t.TempDir(), "data"))
	t.Setenv("COMPACTOR_CONTEXT_WINDOW", "6000")
	t.Setenv("COMPACTOR_KEEP_LAST_N", "4")
	t.Setenv("COMPACTOR_LOG_LEVEL", "warn")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var logs strings.Builder
	go func() {
		served <- run(ctx, nil, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &logs}, os.LookupEnv)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	serveAnswers(t)

	msgs, _ := fakellm.NeedleConversation(4)
	in := jsonl(msgs) + `{"role":"robot","content":"x"}` + "\n"
	out, errOut, err := cli(t, in, "publish", "cli-conv")
	if err == nil || exitCode(err) != exitError || !strings.Contains(errOut, "line 18") || !strings.Contains(errOut, "unknown role") {
		t.Fatalf("publish with one bad line: err %v (exit %d), stderr %q; want line 18 reported and exit 1", err, exitCode(err), errOut)
	}
	if want := "read 18 lines: 17 published (seq 1 to 17), 1 not published (lines 18; see above)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("publish report = %q; want %q", err, want)
	}
	if n := len(strings.Fields(out)); n != len(msgs) {
		t.Fatalf("publish printed %d sequences; want %d", n, len(msgs))
	}

	out, _, err = cli(t, "", "compact", "cli-conv", "--instructions", "keep the needles", "--wait", "20s", "--json")
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	// One JSON answer: the outcome, with the new value.
	dec := json.NewDecoder(strings.NewReader(out))
	var answer struct {
		Status    string `json:"status"`
		RequestID string `json:"request_id"`
		Result    *struct {
			Generation int    `json:"generation"`
			RequestID  string `json:"request_id"`
			Trigger    string `json:"trigger"`
		} `json:"result"`
	}
	if err := dec.Decode(&answer); err != nil || answer.Status != "completed" || answer.RequestID == "" {
		t.Fatalf("compact --wait answered %s (%v); want status completed", out, err)
	}
	if answer.Result == nil || answer.Result.Generation != 1 || answer.Result.RequestID != answer.RequestID || answer.Result.Trigger != "manual" {
		t.Fatalf("compact --wait result = %+v; want generation 1 of this manual request", answer.Result)
	}
	if dec.More() {
		t.Fatalf("compact --wait printed more than one JSON answer:\n%s", out)
	}

	// Without --wait: queued, or busy (exit 4) while another request is pending.
	// Which one depends on how fast the worker is, so both are accepted.
	for range 2 {
		out, _, err = cli(t, "", "compact", "cli-conv", "--instructions", "more")
		queued := strings.HasPrefix(out, "queued: request ") && err == nil
		busy := exitCode(err) == exitBusy && strings.Contains(err.Error(), "not queued")
		if !queued && !busy {
			t.Fatalf("compact = %q, %v; want queued, or busy (exit 4) saying the instructions were not queued", out, err)
		}
	}

	// Any NATS client can use the service; the context endpoint answers pointers only.
	nc, err := nats.Connect("nats://" + os.Getenv("COMPACTOR_LISTEN"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	m, err := nc.Request("compactor.context", []byte(`{"conversation":"cli-conv"}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var cx struct {
		Value        map[string]any `json:"value"`
		TailStartSeq uint64         `json:"tail_start_seq"`
		LastSeq      uint64         `json:"last_seq"`
	}
	if err := json.Unmarshal(m.Data, &cx); err != nil || cx.Value == nil || cx.TailStartSeq <= 1 || cx.LastSeq != uint64(len(msgs)) {
		t.Fatalf("compactor.context = %s, %v", m.Data, err)
	}
	if m, err := nc.Request("compactor.compact", []byte(`{"conversation":"bad id"}`), 10*time.Second); err != nil ||
		m.Header.Get("Nats-Service-Error-Code") != "400" || !strings.Contains(m.Header.Get("Nats-Service-Error"), "conversation") {
		t.Fatalf("compactor.compact with a bad id = %v, %v; want a 400 naming the conversation", m, err)
	}

	out, errOut, err = cli(t, "", "context", "cli-conv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], `"role":"system"`) || !strings.Contains(lines[1], "Summary of the earlier conversation") {
		t.Fatalf("context does not start with the pinned prompt and the summary:\n%s", out)
	}
	if !strings.Contains(errOut, "generation 1") {
		t.Fatalf("context summary line = %q", errOut)
	}

	out, _, err = cli(t, "", "status", "cli-conv", "--json")
	if err != nil || !strings.Contains(out, `"generation": 1`) || !strings.Contains(out, `"trigger": "manual"`) {
		t.Fatalf("status cli-conv --json = %s, %v", out, err)
	}
	out, _, err = cli(t, "", "status", "cli-conv")
	if err != nil || !strings.Contains(out, "generation      1\n") || !strings.Contains(out, "tail from seq   ") {
		t.Fatalf("status cli-conv = %s, %v; want aligned rows", out, err)
	}
	out, _, err = cli(t, "", "status", "--json")
	if err != nil || !strings.Contains(out, `"name": "CHAT"`) {
		t.Fatalf("status --json = %s, %v", out, err)
	}
	if _, _, err := cli(t, "", "context", "bad id"); err == nil || !strings.Contains(err.Error(), "[A-Za-z0-9_-]") || exitCode(err) != exitUsage {
		t.Fatalf("context with a bad id: %v; want the id rule, exit 2", err)
	}

	stop() // SIGINT
	select {
	case err := <-served:
		served <- nil // for the cleanup
		if err != nil {
			t.Fatalf("serve stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not drain")
	}
}

// A serve process runs the compactor service when it has the api role (the default
// roles include it), and only then: a worker or trigger process may run as a NATS user
// that cannot write policies.
func TestOnlyTheAPIRoleRunsTheService(t *testing.T) {
	for _, tc := range []struct {
		roles string
		want  int
	}{
		{"trigger", 0}, {"worker", 0}, {"trigger,worker", 0},
		{"api", 1}, {"worker,api", 1}, {"trigger,worker,api", 1}, {"", 1},
	} {
		env := testEnv(t, 8000)
		if tc.roles != "" {
			env.Roles = tc.roles
		}
		st := &jetstream.Store{}
		nd, err := build(env, &nats.Conn{}, st, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if nd.Service() != nil {
			n++
		}
		if n != tc.want {
			t.Errorf("roles %q: %d compactor services; want %d", tc.roles, n, tc.want)
		}
	}
}

// Every command answers -h, --help and `compactor help <command>` with its usage on
// stdout and exit 0 (status --help used to read a conversation named --help); an
// unknown flag is a usage error (exit 2) with the command's usage.
func TestHelpForEveryCommand(t *testing.T) {
	testEnv(t, 128000)
	// No server: help must not connect (nor serve --help start one).
	t.Setenv("COMPACTOR_NATS_URL", "nats://"+freeAddr(t))
	n := 0
	for _, c := range commands {
		if c.hidden {
			continue
		}
		n++
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}, {c.name, "x", "--help"}} {
			out, errOut, err := cli(t, "", args...)
			if err != nil || errOut != "" || !strings.HasPrefix(out, "Usage: compactor "+c.name) || !strings.Contains(out, "-h, --help") {
				t.Errorf("%v: err %v, stderr %q, stdout %q; want the usage on stdout", args, err, errOut, out)
			}
		}
		_, _, err := cli(t, "", c.name, "--no-such-flag")
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != exitUsage || err.Error() != "unknown flag --no-such-flag" ||
			!strings.Contains(ue.usage, "Usage: compactor "+c.name) {
			t.Errorf("%s --no-such-flag: %v (usage %q); want a usage error with the usage", c.name, err, ue.usage)
		}
	}
	if n < 9 {
		t.Fatalf("only %d commands", n)
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		out, _, err := cli(t, "", args...)
		if err != nil || !strings.Contains(out, "compactor status [<conv>]") || !strings.Contains(out, "130  interrupted") {
			t.Errorf("%v: %v; want the overview with the exit codes:\n%s", args, err, out)
		}
	}
	for _, args := range [][]string{{"nope"}, {"help", "nope"}, {"-s", "nats://x", "nope"}} {
		_, _, err := cli(t, "", args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), `unknown command "nope"`) || !strings.Contains(ue.usage, "compactor publish <conv>") {
			t.Errorf("%v: %v; want unknown command with the list of commands", args, err)
		}
	}
	// Values are checked with the flag's own words.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"compact", "c", "--wait", "soon"}, `--wait "soon": want a duration with its unit`},
		{[]string{"context", "c", "--max-tokens", "many"}, `--max-tokens "many": want a whole number`},
		{[]string{"context", "c", "--at-least-seq", "-1"}, `--at-least-seq "-1": want a whole number, 0 or more`},
		{[]string{"context", "c", "--max-tokens"}, `--max-tokens needs a value`},
		{[]string{"status", "--json=maybe"}, `--json "maybe": want true or false`},
		{[]string{"status", "a", "b"}, "status takes at most one conversation id"},
		{[]string{"context"}, "context needs a conversation id"},
		{[]string{"publish", "a", "b"}, `publish takes one conversation id, got 2 arguments: "a" "b"`},
	} {
		_, _, err := cli(t, "", tc.args...)
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (exit %d); want a usage error saying %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	sigterm, cancelTerm := context.WithCancelCause(context.Background())
	cancelTerm(signalled{syscall.SIGTERM})
	sigint, cancelInt := context.WithCancelCause(context.Background())
	cancelInt(signalled{os.Interrupt})
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errors.New("something"), 1},
		{usagef("bad"), 2},
		{newError(errConfig, nil, "configuration: x"), 2},
		{fmt.Errorf("wrapped: %w", schemas.ErrInvalid), 2},
		{notFound("c"), 3},
		{newError(errBusy, nil, "busy"), 4},
		{fmt.Errorf("x: %w", &pipeline.ServiceError{Code: 503}), 4},
		{newError(errFailed, nil, "failed"), 5},
		{newError(errTimeout, nil, "late"), 6},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), 6},
		{newError(errUnavailable, nil, "down"), 7},
		{fmt.Errorf("x: %w", pipeline.ErrNoService), 7},
		{interrupted(canceled, "interrupted"), 130},
		{interrupted(sigint, "interrupted"), 130},
		{interrupted(sigterm, "interrupted"), 143},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// withStack runs a compactor (trigger, workers, service) on an in-process server and
// points the commands at it.
func withStack(t *testing.T, env Env, llm *fakellm.LLM) *stack {
	t.Helper()
	s := startStack(t, env, llm)
	t.Setenv("COMPACTOR_NATS_URL", s.nc.ConnectedUrl())
	return s
}

// A conversation with nothing stored is not found (exit 3) for status, context, recall
// and compact, and compact of one writes nothing.
func TestUnknownConversationIsNotFound(t *testing.T) {
	env := testEnv(t, 128000)
	s := withStack(t, env, nil)
	for _, args := range [][]string{{"status", "ghost"}, {"context", "ghost"}, {"compact", "ghost"}, {"compact", "ghost", "--wait", "5s"},
		{"status", "ghost", "--json"}, {"context", "ghost", "--json"}, {"recall", "ghost"}, {"recall", "ghost", "--json"}} {
		out, _, err := cli(t, "", args...)
		if exitCode(err) != exitNotFound || !strings.Contains(err.Error(), "conversation ghost not found") || out != "" {
			t.Errorf("%v: %v (exit %d), stdout %q; want not found (exit 3) naming it, nothing on stdout", args, err, exitCode(err), out)
		}
	}
	// "--" ends the flags: a conversation named --help.
	if _, _, err := cli(t, "", "status", "--", "--help"); exitCode(err) != exitNotFound || !strings.Contains(err.Error(), "--help not found") {
		t.Errorf("status -- --help: %v; want --help not found", err)
	}
	if found, _ := jstest.Scan(t, s.nc, "ghost"); len(found) > 0 {
		t.Fatalf("compact of an unknown conversation stored: %v", found)
	}
	// Forgetting one is no error: a forget can be repeated.
	if _, _, err := cli(t, "", "forget", "ghost"); err != nil {
		t.Fatalf("forget ghost: %v", err)
	}
	if _, _, err := cli(t, `{"role":"user","content":"now it exists"}`+"\n", "publish", "ghost"); err != nil {
		t.Fatal(err)
	}
	out, _, err := cli(t, "", "status", "ghost")
	if err != nil || !strings.Contains(out, "0 (nothing compacted yet)") || !strings.Contains(out, "1 messages") {
		t.Fatalf("status of a conversation with a message: %q, %v", out, err)
	}
}

// Every command that prints has --json, and what it prints is one JSON document.
func TestJSONOnEveryCommandThatPrints(t *testing.T) {
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	one := func(args []string, stdin string, into any) {
		t.Helper()
		out, errOut, err := cli(t, stdin, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(into); err != nil || dec.More() {
			t.Fatalf("%v printed %q; want one JSON document (%v)", args, out, err)
		}
	}
	var pub publishReport
	one([]string{"publish", "j1", "--json"}, "{\"role\":\"user\",\"content\":\"one\"}\n\n{\"role\":\"assistant\",\"content\":\"two\"}\n", &pub)
	if pub.Lines != 3 || pub.Published != 2 || pub.Blank != 1 || pub.FirstSeq == 0 || pub.LastSeq <= pub.FirstSeq || pub.Interrupted {
		t.Errorf("publish --json = %+v", pub)
	}
	var cx struct {
		Messages []map[string]any `json:"messages"`
		Seqs     []uint64         `json:"seqs"`
		Tokens   int              `json:"tokens"`
	}
	one([]string{"context", "j1", "--json"}, "", &cx)
	if len(cx.Messages) != 2 || len(cx.Seqs) != 2 || cx.Seqs[1] != pub.LastSeq || cx.Tokens == 0 {
		t.Errorf("context --json = %+v", cx)
	}
	var compact schemas.CompactResponse
	one([]string{"compact", "j1", "--json"}, "", &compact)
	if compact.Status != "queued" || compact.RequestID == "" {
		t.Errorf("compact --json = %+v", compact)
	}
	var st map[string]any
	one([]string{"status", "j1", "--json"}, "", &st)
	if st["context_messages"] != float64(2) {
		t.Errorf("status j1 --json = %v", st)
	}
	var pst jetstream.Status
	one([]string{"status", "--json"}, "", &pst)
	if len(pst.Streams) == 0 || pst.Streams[0].Name != "CHAT" {
		t.Errorf("status --json = %+v", pst)
	}
	var pol schemas.PolicyResponse
	one([]string{"policy", "set", "j1", "threshold=0.7", "--json"}, "", &pol)
	if pol.Policy["threshold"] != "0.7" {
		t.Errorf("policy set --json = %+v", pol)
	}
	var v versionInfo
	one([]string{"version", "--json"}, "", &v)
	if v.WireContract != schemas.SchemaVersion || v.Go == "" || v.Version == "" {
		t.Errorf("version --json = %+v", v)
	}
	var rc schemas.RecallResponse
	one([]string{"recall", "j1", "--query", "TWO", "--json"}, "", &rc)
	if rc.Returned != 1 || rc.Messages[0].Seq != pub.LastSeq {
		t.Errorf("recall --json = %+v", rc)
	}
	var fr schemas.ForgetResponse
	one([]string{"forget", "j1", "--json"}, "", &fr)
	if fr.Deleted.ChatMessages != 2 {
		t.Errorf("forget --json = %+v", fr)
	}
}

// The text of status without a conversation is aligned tables.
func TestStatusTablesAreAligned(t *testing.T) {
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	out, _, err := cli(t, "", "status")
	if err != nil {
		t.Fatal(err)
	}
	tables := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(tables) < 2 || !strings.HasPrefix(tables[0], "STREAM ") || !strings.HasPrefix(strings.TrimSpace(tables[1]), "CONSUMER ") {
		t.Fatalf("status printed:\n%s\nwant a table of streams, then one of consumers", out)
	}
	for _, table := range tables[:2] {
		rows := strings.Split(strings.Trim(table, "\n"), "\n")
		header := rows[0]
		col := strings.Index(header, "STREAM")
		if strings.HasPrefix(header, "STREAM") {
			col = strings.Index(header, "MESSAGES")
		}
		for _, r := range rows[1:] {
			if len(r) <= col || r[col-1] != ' ' || r[col] == ' ' {
				t.Errorf("row %q does not start its second column at %d, under the header:\n%s", r, col, table)
			}
		}
	}
	if !strings.Contains(out, "compactor-workers") || !strings.Contains(out, "KV_compaction") {
		t.Errorf("status does not list the workers' consumer and the results bucket:\n%s", out)
	}
}

// syncBuffer is a buffer the test reads while a command writes to it.
type syncBuffer = proctest.LogBuffer

// publish reports what it did also when interrupted: ctrl-C lets the message in flight
// finish, reads no more, and exits 130 with the counts.
func TestPublishReportWhenInterrupted(t *testing.T) {
	env := testEnv(t, 128000)
	s := withStack(t, env, nil)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	out, errOut := &syncBuffer{}, &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"publish", "intr"}, stdio{in: pr, out: out, err: errOut}, os.LookupEnv)
	}()
	for i := range 3 {
		fmt.Fprintf(pw, `{"role":"user","content":"message %d"}`+"\n", i)
	}
	fmt.Fprintln(pw, `{"role":"nobody"}`)
	eventually(t, 10*time.Second, "three sequences and one refused line", func() bool {
		return len(strings.Fields(out.String())) == 3 && strings.Contains(errOut.String(), "line 4: ")
	})
	cancel() // ctrl-C; stdin stays open
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish did not stop on ctrl-C while waiting for input")
	}
	want := "interrupted: intr: read 4 lines: 3 published (seq 1 to 3), 1 not published (lines 4; see above); the rest of the input was not read"
	if exitCode(err) != exitInterrupted || err.Error() != want {
		t.Fatalf("publish interrupted: %v (exit %d); want %q, exit 130", err, exitCode(err), want)
	}
	if n, _ := s.st.Chat().LastSeq(ctxFor(t, 5*time.Second), "intr"); n != 3 {
		t.Fatalf("CHAT holds intr through seq %d; want 3", n)
	}
	if strings.Contains(errOut.String(), "\r") {
		t.Errorf("a progress bar was drawn into captured stderr: %q", errOut)
	}
}

// compact --wait interrupted by ctrl-C names the request to follow (exit 130); while it
// is pending another compact is busy (exit 4); no outcome in time is exit 6; a failed
// compaction is exit 5.
func TestCompactExitCodes(t *testing.T) {
	env := testEnv(t, 6000)
	env.Policy["keep_last_n"] = "4"
	env.MaxAttempts = 1
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Block = make(chan struct{}) })
	s := withStack(t, env, llm)
	t.Setenv("COMPACTOR_CONTEXT_WINDOW", "6000")
	msgs, _ := fakellm.NeedleConversation(4)
	for _, conv := range []string{"held", "late", "broken"} {
		if _, _, err := cli(t, jsonl(msgs), "publish", conv); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"compact", "held", "--wait", "1m"}, stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}, os.LookupEnv)
	}()
	eventually(t, 20*time.Second, "the compaction to reach the LLM", func() bool { return llm.Held() == 1 })
	cancel()
	err := <-done
	pending, perr := s.st.Queue().Pending(ctxFor(t, 5*time.Second), "held")
	if perr != nil || pending == nil {
		t.Fatalf("pending request of held: %v, %v", pending, perr)
	}
	if exitCode(err) != exitInterrupted || !strings.Contains(err.Error(), "request "+pending.RequestID) || !strings.Contains(err.Error(), "compact.event.held") {
		t.Fatalf("compact --wait interrupted: %v (exit %d); want exit 130 naming request %s and where to follow it", err, exitCode(err), pending.RequestID)
	}

	_, _, err = cli(t, "", "compact", "held", "--instructions", "other")
	if exitCode(err) != exitBusy || !strings.Contains(err.Error(), pending.RequestID) || !strings.Contains(err.Error(), "not queued") {
		t.Fatalf("compact while one is pending: %v (exit %d); want busy (4) naming the pending request", err, exitCode(err))
	}

	_, _, err = cli(t, "", "compact", "late", "--wait", "300ms")
	if exitCode(err) != exitTimeout || !strings.Contains(err.Error(), "no outcome within 300ms") {
		t.Fatalf("compact --wait 300ms of a held compaction: %v (exit %d); want timed out (6)", err, exitCode(err))
	}

	llm.Set(func(f *fakellm.LLM) { f.Status = 500 })
	llm.Release(false)
	out, _, err := cli(t, "", "compact", "broken", "--wait", "20s", "--json")
	var r schemas.CompactResponse
	if exitCode(err) != exitFailed || !strings.Contains(err.Error(), "failed") || json.Unmarshal([]byte(out), &r) != nil || r.Status != "failed" {
		t.Fatalf("compact --wait of a failing LLM: %v (exit %d), stdout %q; want failed (5) and the answer as JSON", err, exitCode(err), out)
	}
}

// A message too large for NATS names the limit and what to change.
func TestPublishTooLargeSaysWhatToDo(t *testing.T) {
	env := testEnv(t, 128000)
	srv := jstest.ServerWith(t, jstest.MaxPayload(16<<10))
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	env.MaxObject = 64 << 10
	st, err := jetstream.Provision(ctxFor(t, 10*time.Second), nc, env.jetstream())
	if err != nil {
		t.Fatal(err)
	}
	runStack(t, nc, st, env, nil)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	t.Setenv("COMPACTOR_MAX_OBJECT_SIZE", "65536")
	args := strings.Repeat("a", 20<<10)
	calls := fmt.Sprintf(`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":%q}}]}`, args)
	content := fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat("b", 100<<10))
	fits := fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat("c", 40<<10))
	out, errOut, err := cli(t, calls+"\n"+content+"\n"+fits+"\n", "publish", "big")
	if err == nil || strings.TrimSpace(out) != "1" {
		t.Fatalf("publish: %v, stdout %q; want the third line stored (as an object) and an error", err, out)
	}
	for _, want := range []string{"line 1: message too large", "over the limit of", "raise max_payload in the NATS server's configuration",
		"line 2: message too large", "max object size of 65536 bytes", "raise COMPACTOR_MAX_OBJECT_SIZE"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errOut)
		}
	}
}

// A line longer than the limit is reported by its length and skipped, and the next
// lines are read.
func TestReadLinesSkipsOverlongLines(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 50) + "\nnext\nlast-without-newline"
	lines := make(chan inputLine)
	go readLines(strings.NewReader(in), 20, lines, make(chan struct{}))
	var got []string
	for l := range lines {
		switch {
		case l.err != nil:
			t.Fatal(l.err)
		case l.tooLong > 0:
			got = append(got, fmt.Sprintf("too long: %d", l.tooLong))
		default:
			got = append(got, strings.TrimSpace(string(l.text)))
		}
	}
	want := []string{"short", "too long: 51", "next", "last-without-newline"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lines = %q; want %q", got, want)
	}
}

// A variable of the wrong type says what it wants, not the parser's words.
func TestBadVariableSaysWhatItWants(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"COMPACTOR_WORKERS", "many", `configuration: COMPACTOR_WORKERS is "many": want a whole number`},
		{"COMPACTOR_DRAIN_TIMEOUT", "5", `configuration: COMPACTOR_DRAIN_TIMEOUT is "5": want a duration with its unit, e.g. 30s, 2m or 1h30m`},
		{"COMPACTOR_UPDATE_STREAMS", "maybe", `configuration: COMPACTOR_UPDATE_STREAMS is "maybe": want true or false`},
		{"COMPACTOR_MAX_OBJECT_SIZE", "big", `configuration: COMPACTOR_MAX_OBJECT_SIZE is "big": want a whole number`},
	} {
		testEnv(t, 128000)
		t.Setenv(tc.key, tc.value)
		for _, cmd := range []string{"serve", "status"} {
			_, _, err := cli(t, "", cmd)
			if err == nil || err.Error() != tc.want || exitCode(err) != exitUsage {
				t.Errorf("%s with %s=%s: %v (exit %d); want %q, exit 2", cmd, tc.key, tc.value, err, exitCode(err), tc.want)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, err := cli(t, "", "version")
	if err != nil || !strings.Contains(out, "compactor ") || !strings.Contains(out, "go1.") || !strings.Contains(out, "wire contract   v1") {
		t.Fatalf("version = %q, %v", out, err)
	}
	out2, _, err := cli(t, "", "--version")
	if err != nil || out2 != out {
		t.Fatalf("--version = %q, %v; want the same as version", out2, err)
	}
}

// Flags before the command's name are the command's (compactor -s URL status).
func TestFlagsBeforeTheCommand(t *testing.T) {
	env := testEnv(t, 128000)
	s := startStack(t, env, nil)
	out, _, err := cli(t, "", "-s", s.nc.ConnectedUrl(), "status", "--json")
	if err != nil || !strings.Contains(out, `"name": "CHAT"`) {
		t.Fatalf("-s URL status: %q, %v", out, err)
	}
	out, _, err = cli(t, "", "status", "--json", "--server="+s.nc.ConnectedUrl())
	if err != nil || !strings.Contains(out, `"name": "CHAT"`) {
		t.Fatalf("status --server=URL: %q, %v", out, err)
	}
}

func TestProgressBar(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	p := startProgress(&b, "publish demo", "B", 4<<20, func() time.Time { return now })
	now = now.Add(1500 * time.Millisecond)
	p.set(1<<20, "line 12")
	if got, want := p.render(), "publish demo [======>                 ]  25%  1.0 MiB/4.0 MiB  2s  line 12"; got != want {
		t.Errorf("render = %q; want %q", got, want)
	}
	p.println("line 13: refused")
	now = now.Add(50 * time.Millisecond)
	p.set(2<<20, "line 14") // within 100ms of the last draw: not drawn
	p.finish()
	s := b.String()
	if !strings.Contains(s, "\rline 13: refused\n") || strings.Contains(s, "line 14") || !strings.HasSuffix(s, "\r") {
		t.Errorf("drawn %q; want the line above the bar, no redraw within 100ms, and the bar cleared", s)
	}
	counter := startProgress(&b, "bench", "measurements", 0, func() time.Time { return now })
	counter.set(3, "")
	if got := counter.render(); got != "bench  3 measurements  0s" {
		t.Errorf("counter = %q", got)
	}
	if newProgress(&b, func(string) (string, bool) { return "", false }, "x", "B", 1) != nil {
		t.Error("a progress bar on a writer that is not a terminal")
	}
}

// On a terminal the bench's progress lines scroll above a bar of the measurements,
// which moves to the measurement each line names.
func TestBenchProgressFollowsTheMeasurements(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	bar := startProgress(&b, "bench", "measurements", 3, func() time.Time { now = now.Add(time.Second); return now })
	p := &benchProgress{bar: bar, steps: []string{"tokens", "ingest", "heap"}}
	fmt.Fprintf(p, "[   0.1s] token economics: 3 sessions\n[   2.0s] server: a nats-server process\n[   3.0s] ingest: raw Jet")
	if !strings.Contains(b.String(), "server: a nats-server process") || strings.Contains(b.String(), "raw Jet") {
		t.Fatalf("drawn %q; want whole lines only", b.String())
	}
	fmt.Fprintf(p, "Stream, 4000 messages\n")
	if got := bar.render(); !strings.Contains(got, "[========>               ]  33%  1 measurements/3 measurements") || !strings.HasSuffix(got, "ingest (2 of 3)") {
		t.Fatalf("bar = %q; want the second of three measurements", got)
	}
	fmt.Fprintf(p, "[  9.0s] new conversations: a trigger of 4 partitions\n")
	if got := bar.render(); !strings.HasSuffix(got, "heap (3 of 3)") {
		t.Fatalf("bar = %q; want the heap measurement", got)
	}
}

// A real ctrl-C (SIGINT) ends a command with exit 130 and its report, SIGTERM with 143:
// main turns the signal into the command's cancellation and its exit code.
func TestSignalsEndCommandsWithTheirCodes(t *testing.T) {
	bin := proctest.Compactor(t)
	env := testEnv(t, 128000)
	withStack(t, env, nil)
	for i, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		conv := fmt.Sprintf("sig-%d", i)
		cmd := exec.Command(bin, "publish", conv)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		out, errOut := &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(stdin, `{"role":"user","content":"hi"}`)
		eventually(t, 10*time.Second, "the first sequence", func() bool {
			if strings.Contains(errOut.String(), "compactor: ") {
				t.Fatalf("publish failed: %s", errOut)
			}
			return strings.TrimSpace(out.String()) != ""
		})
		if err := cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
			t.Fatalf("publish after %v: %v; want exit %d\n%s", tc.sig, err, tc.code, errOut)
		}
		if want := "compactor: interrupted: " + conv + ": read 1 lines: 1 published (seq " + strings.TrimSpace(out.String()); !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr after %v = %q; want %q", tc.sig, errOut, want)
		}
	}
}

// A second ctrl-C ends a command at once, even one stuck where the first cannot reach
// (dialling a server that accepts the connection but never speaks NATS).
func TestASecondSignalEndsACommandAtOnce(t *testing.T) {
	bin := proctest.Compactor(t)
	testEnv(t, 128000)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // held open, silent
		}
	}()
	cmd := exec.Command(bin, "status", "stuck", "-s", "nats://"+ln.Addr().String())
	errOut := &syncBuffer{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatalf("the command never dialled the server\n%s", errOut)
	}
	// Two different signals: two of one kind sent together may reach the process as one.
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatalf("signal: %v (the command ended after the first one: %s)", err, errOut)
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || (ee.ExitCode() != 130 && ee.ExitCode() != 143) || !strings.Contains(errOut.String(), "again; exiting now") {
		t.Fatalf("after SIGINT and SIGTERM: %v; want exit 130 or 143 at the second\n%s", err, errOut)
	}
}

// Issue 18: status lists the summarizer windows the workers learned, one row each.
func TestStatusShowsLearnedWindows(t *testing.T) {
	var b strings.Builder
	at := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	err := writePipelineStatus(&b, jetstream.Status{LearnedWindows: []jetstream.LearnedWindow{
		{Endpoint: "http://llm:8000/v1", Model: "small-local-model", Tokens: 3041, StatedTokens: 3000, RefusedTokens: 8884, LearnedAt: at},
		{Endpoint: "https://proxy.example.com/v1", Model: "m", Tokens: 5000, RefusedTokens: 7500, LearnedAt: at},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LEARNED WINDOW", "http://llm:8000/v1", "small-local-model", "3,041", "3,000", "2026-11-27T08:00:00Z", "https://proxy.example.com/v1"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
