package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// compactor recall against a server that holds a conversation: JSONL with seq, a
// summary on stderr, --json, and the exit codes of a usage error and an unknown
// conversation.
func TestRecallCommand(t *testing.T) {
	srv := jstest.Server(t)
	st := jstest.Provision(t, jstest.Conn(t, srv))
	testEnv(t, 128000)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	ctx := ctxFor(t, 30*time.Second)
	var seqs []uint64
	for _, m := range []string{
		`{"role":"user","content":"Open config.yaml"}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"read","arguments":"{\"path\":\"config.yaml\"}"}}]}`,
		`{"role":"tool","tool_call_id":"t1","content":"port: 8443\nhost: db.internal"}`,
		`{"role":"assistant","content":"The port is 8443."}`,
	} {
		seq, err := st.Chat().Publish(ctx, "cli-recall", []byte(m), "")
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}

	out, errOut, err := cli(t, "", "recall", "cli-recall", "--query", "DB.INTERNAL")
	if err != nil {
		t.Fatalf("recall: %v (%s)", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("recall printed %d lines; want the tool call and its result:\n%s", len(lines), out)
	}
	for i, want := range []uint64{seqs[1], seqs[2]} {
		var m schemas.RecalledMessage
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil || m.Seq != want {
			t.Fatalf("line %d = %s (%v); want the message of seq %d", i+1, lines[i], err, want)
		}
	}
	if !strings.Contains(errOut, "cli-recall: matched 2, returned 2") || !strings.Contains(errOut, "not cut by the budget") {
		t.Fatalf("stderr = %q; want the summary", errOut)
	}

	out, errOut, err = cli(t, "", "recall", "cli-recall", "--max-tokens", "30")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, `{"seq":4,`) || !strings.Contains(errOut, "cut by the budget, left out from seq 2") {
		t.Fatalf("recall with a small budget printed %q, %q; want the newest message and the round at 2 named", out, errOut)
	}

	out, _, err = cli(t, "", "recall", "cli-recall", "--from-seq", "1", "--to-seq", "1", "--json")
	var r schemas.RecallResponse
	if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Returned != 1 || r.Messages[0].Seq != seqs[0] || !r.ScanComplete {
		t.Fatalf("recall --json = %s, %v", out, err)
	}

	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"recall", "cli-recall", "--from-seq", "9", "--to-seq", "2"}, "--from-seq: must not be after to_seq", exitUsage},
		{[]string{"recall", "cli-recall", "--max-tokens", "-3"}, "--max-tokens: must be between 0", exitUsage},
		{[]string{"recall", "cli-recall", "--scan-limit", "-1"}, "--scan-limit must be 0", exitUsage},
		{[]string{"recall", "cli-recall", "--scan-limit", "2000000"}, "--scan-limit must be 0", exitUsage},
		{[]string{"recall", "bad.id"}, "[A-Za-z0-9_-]", exitUsage},
		{[]string{"recall", "nobody-here"}, "nobody-here", exitNotFound},
	} {
		_, _, err := cli(t, "", tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != tc.code {
			t.Errorf("%v: %v (exit %d); want %q, exit %d", tc.args, err, exitCode(err), tc.want, tc.code)
		}
	}
}
