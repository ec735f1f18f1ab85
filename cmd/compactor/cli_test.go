package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline/service"
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

	msgs, _ := needleConversation(4)
	var in strings.Builder
	for _, m := range msgs {
		b, _ := m.Encode()
		in.Write(b)
		in.WriteByte('\n')
	}
	in.WriteString(`{"role":"robot","content":"x"}` + "\n")
	out, errOut, err := cli(t, in.String(), "publish", "cli-conv")
	if err == nil || !strings.Contains(errOut, "line 18") || !strings.Contains(errOut, "unknown role") {
		t.Fatalf("publish with one bad line: err %v, stderr %q; want line 18 reported", err, errOut)
	}
	if n := len(strings.Fields(out)); n != len(msgs) {
		t.Fatalf("publish printed %d sequences; want %d", n, len(msgs))
	}

	out, _, err = cli(t, "", "compact", "cli-conv", "--instructions", "keep the needles", "--wait", "20s")
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

	// Without --wait: queued, or busy (an error) while another request is pending.
	// Which one depends on how fast the worker is, so both are accepted.
	for range 2 {
		out, _, err = cli(t, "", "compact", "cli-conv", "--instructions", "more")
		queued, busy := strings.Contains(out, `"status": "queued"`), strings.Contains(out, `"status": "busy"`)
		if !(queued && err == nil) && !(busy && err != nil && strings.Contains(err.Error(), "not queued")) {
			t.Fatalf("compact = %s, %v; want queued, or busy with an error saying the instructions were not queued", out, err)
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

	out, _, err = cli(t, "", "status", "cli-conv")
	if err != nil || !strings.Contains(out, `"generation": 1`) || !strings.Contains(out, `"trigger": "manual"`) {
		t.Fatalf("status cli-conv = %s, %v", out, err)
	}
	out, _, err = cli(t, "", "status")
	if err != nil || !strings.Contains(out, `"name": "CHAT"`) {
		t.Fatalf("status = %s, %v", out, err)
	}
	if _, _, err := cli(t, "", "context", "bad id"); err == nil || !strings.Contains(err.Error(), "[A-Za-z0-9_-]") {
		t.Fatalf("context with a bad id: %v", err)
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
		comps, err := build(env, &nats.Conn{}, st, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range comps {
			if _, ok := c.(*service.Service); ok {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("roles %q: %d compactor services; want %d", tc.roles, n, tc.want)
		}
	}
}
