package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
)

// A mistyped command gets the nearest command's name; a word far from every command
// gets none, and neither does a hidden command.
func TestUnknownCommandSuggests(t *testing.T) {
	testEnv(t, 128000)
	for _, tc := range []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"stauts"}, `did you mean "status"?`},
		{[]string{"compcat", "conv"}, `did you mean "compact"?`},
		{[]string{"-s", "nats://h:4222", "pubish", "c"}, `did you mean "publish"?`},
		{[]string{"proxi"}, `did you mean "proxy"?`},
		{[]string{"help", "contxt"}, `did you mean "context"?`},
		{[]string{"frobnicate"}, ""},
		{[]string{"bench-worke"}, ""},
	} {
		_, _, err := cli(t, "", tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || exitCode(err) != exitUsage || !strings.Contains(err.Error(), "unknown command") {
			t.Errorf("%v: %v; want an unknown command (exit 2)", tc.args, err)
			continue
		}
		switch {
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("%v: %q; want it to say %s", tc.args, err, tc.want)
		case tc.want == "" && strings.Contains(err.Error(), "did you mean"):
			t.Errorf("%v: %q; want no suggestion", tc.args, err)
		}
	}
}

// A malformed server URL is reported as one, naming what is wrong, before dialling:
// never as a server that did not answer.
func TestMalformedServerURL(t *testing.T) {
	testEnv(t, 128000)
	for _, tc := range []struct {
		url, want string
	}{
		{"htp:/localhost:4222", "scheme"},
		{"htp://localhost:4222", `scheme "htp"`},
		{"nats://:4222", "no host"},
		{"nats:/localhost:4222", "scheme"},
		{"nats://user:s3cret-pw@localhost:4222,nats//other:4222", "server 2 of 2"},
	} {
		for _, args := range [][]string{{"status", "-s", tc.url}, {"serve", "-s", tc.url}} {
			_, _, err := cli(t, "", args...)
			if err == nil || exitCode(err) != exitUsage || strings.Contains(err.Error(), "no server answered") ||
				!strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v (exit %d); want a malformed URL (exit 2) saying %q", args, err, exitCode(err), tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret-pw") {
				t.Errorf("%v: the error shows the password: %v", args, err)
			}
		}
	}
	// What nats.go dials as it is stays accepted: a host and port without a scheme.
	t.Setenv("COMPACTOR_NATS_URL", "")
	if _, _, err := cli(t, "", "status", "-s", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "no server answered") {
		t.Errorf("status -s 127.0.0.1:1: %v; want no server answered", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"status", "status", 0}, {"stauts", "status", 1}, {"pubish", "publish", 1},
		{"", "abc", 3}, {"kitten", "sitting", 3}, {"compcat", "compact", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// compact --wait while a compaction is already pending (the trigger's, or another
// client's) waits for that one's outcome and says so, instead of answering busy.
func TestCompactWaitFollowsThePendingRequest(t *testing.T) {
	env := testEnv(t, 6000)
	env.Policy["keep_last_n"] = "4"
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Block = make(chan struct{}) })
	s := withStack(t, env, llm)
	t.Cleanup(func() { llm.Release(false) }) // before the stack stops
	t.Setenv("COMPACTOR_CONTEXT_WINDOW", "6000")
	msgs, _ := fakellm.NeedleConversation(4)
	if _, _, err := cli(t, jsonl(msgs), "publish", "queued-first"); err != nil {
		t.Fatal(err)
	}
	first, err := s.client.Compact(ctxFor(t, 20*time.Second), "queued-first")
	if err != nil || first.Status != pipeline.StatusQueued {
		t.Fatalf("first request: %+v, %v", first, err)
	}
	eventually(t, 20*time.Second, "the first compaction to reach the LLM", func() bool { return llm.Held() == 1 })

	var out, errOut proctest.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"compact", "queued-first", "--instructions", "mine", "--wait", "1m"},
			stdio{in: strings.NewReader(""), out: &out, err: &errOut}, os.LookupEnv)
	}()
	eventually(t, 20*time.Second, "compact --wait to say it waits for the pending request", func() bool {
		select {
		case err := <-done:
			t.Fatalf("compact --wait returned before the pending request ended: %v (exit %d)\nstdout %q\nstderr %q", err, exitCode(err), out.String(), errOut.String())
		default:
		}
		return strings.Contains(errOut.String(), "already pending")
	})
	if e := errOut.String(); !strings.Contains(e, first.RequestID) || !strings.Contains(e, "not queued") || strings.Contains(e, "compactor:") {
		t.Fatalf("stderr %q; want a note naming the pending request %s and that these instructions were not queued", e, first.RequestID)
	}
	llm.Release(false)
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("compact --wait did not end after the pending request completed")
	}
	if err != nil || !strings.HasPrefix(out.String(), "completed: generation 1") || !strings.Contains(out.String(), first.RequestID) {
		t.Fatalf("compact --wait: %v (exit %d)\nstdout %q; want the pending request's outcome, completed", err, exitCode(err), out.String())
	}
}

// compactor proxy beside a running compactor (its embedded server on COMPACTOR_LISTEN,
// its data directory) says to connect to that one, with the URL to use, instead of
// advising a data directory of its own: a second server, where nothing compacts.
func TestProxyBesideARunningCompactor(t *testing.T) {
	testEnv(t, 128000)
	listen := freeAddr(t)
	t.Setenv("COMPACTOR_LISTEN", listen)
	t.Setenv("COMPACTOR_DATA_DIR", filepath.Join(t.TempDir(), "data"))
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- run(ctx, nil, stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}, os.LookupEnv)
	}()
	t.Cleanup(func() {
		stop()
		<-served
	})
	serveAnswers(t)

	for _, env := range []map[string]string{
		{},                                // the same variables as the running one
		{"COMPACTOR_LISTEN": freeAddr(t)}, // another address, the same data directory
	} {
		for k, v := range env {
			t.Setenv(k, v)
		}
		t.Setenv("COMPACTOR_PROXY_LISTEN", "127.0.0.1:0")
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(pctx, []string{"proxy"}, stdio{in: strings.NewReader(""), out: io.Discard, err: io.Discard}, os.LookupEnv)
		cancel()
		want := "COMPACTOR_NATS_URL=nats://" + listen
		if len(env) > 0 {
			// Its address is not known from the directory: the variable is named.
			want = "COMPACTOR_NATS_URL=nats://<"
		}
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), want) ||
			strings.Contains(err.Error(), "its own COMPACTOR_DATA_DIR") {
			t.Fatalf("proxy beside a running compactor (%v): %v (exit %d); want exit 2 saying to connect with %s",
				env, err, exitCode(err), want)
		}
		t.Setenv("COMPACTOR_LISTEN", listen)
	}
}

// A process that stopped drops out of the policy comparison: a trigger started at an
// 8,000-token window after a worker at 128,000 stopped warns of no difference, and
// status lists none (the stopped worker's record would name a process that is gone).
func TestStoppedProcessLeavesThePolicyComparison(t *testing.T) {
	testEnv(t, 128000)
	srv := jstest.Server(t)
	t.Setenv("COMPACTOR_NATS_URL", srv.ClientURL())
	nc := jstest.Conn(t, srv)
	st := jstest.Provision(t, nc)
	serveAs := func(roles, window string) (*proctest.LogBuffer, func()) {
		t.Setenv("COMPACTOR_ROLES", roles)
		t.Setenv("COMPACTOR_CONTEXT_WINDOW", window)
		t.Setenv("COMPACTOR_LOG_LEVEL", "debug")
		logs := &proctest.LogBuffer{}
		stop, _ := serveFor(t, logs)
		eventually(t, 20*time.Second, "the "+roles+" role's policy check", func() bool {
			return strings.Contains(logs.String(), "agree with the other running processes") || strings.Contains(logs.String(), "differ")
		})
		return logs, stop
	}
	_, stopWorker := serveAs("worker", "128000")
	stopWorker()
	logs, _ := serveAs("trigger", "8000")
	if strings.Contains(logs.String(), "differ") {
		t.Fatalf("the trigger warns of a stopped worker's policy defaults:\n%s", logs)
	}
	if rp, _ := st.RolePolicies(ctxFor(t, 5*time.Second)); rp["worker"] != nil {
		t.Fatalf("the stopped worker's record is still read: %v", rp)
	}
	out, _, err := cli(t, "", "status")
	if err != nil || strings.Contains(out, "different policy defaults") {
		t.Fatalf("status: %v\n%s\nwant no difference listed", err, out)
	}
}

// A record whose process was killed (never withdrawn) drops out once older than
// jetstream.PolicyStaleAfter; the running processes keep theirs fresh.
func TestStalePolicyRecordDropsOut(t *testing.T) {
	srv := jstest.Server(t)
	st := jstest.Provision(t, jstest.Conn(t, srv))
	ctx := ctxFor(t, 20*time.Second)
	if _, err := st.RecordPolicy(ctx, []string{"worker"}, map[string]string{"context_window": "128000"}); err != nil {
		t.Fatal(err)
	}
	if rp, err := st.RolePolicies(ctx); err != nil || rp["worker"] == nil {
		t.Fatalf("a fresh record: %v, %v; want it read", rp, err)
	}
	old := jetstream.PolicyStaleAfter
	t.Cleanup(func() { jetstream.PolicyStaleAfter = old })
	jetstream.PolicyStaleAfter = time.Nanosecond
	if rp, err := st.RolePolicies(ctx); err != nil || len(rp) != 0 {
		t.Fatalf("a stale record: %v, %v; want it left out", rp, err)
	}
}

// A tenant's user (service mode, no events to read) waits for the pending request
// too: it watches the pending request until it is gone and answers the value it wrote.
func TestCompactWaitFollowsThePendingRequestInServiceMode(t *testing.T) {
	env := testEnv(t, 6000)
	env.Policy["keep_last_n"] = "4"
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Block = make(chan struct{}) })
	srv := jstest.ServerWith(t, tenantUsers)
	url := "nats://" + jstest.HostPort(srv)
	admin, err := nats.Connect(url, nats.UserInfo("admin", "admin-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	s := runStack(t, admin, jstest.Provision(t, admin), env, llm)
	t.Cleanup(func() { llm.Release(false) }) // before the stack stops
	t.Setenv("COMPACTOR_NATS_URL", url)
	t.Setenv("COMPACTOR_NATS_USER", "tenant")
	t.Setenv("COMPACTOR_NATS_PASSWORD", "tenant-pw")
	t.Setenv("COMPACTOR_NATS_INBOX_PREFIX", "_INBOX_tenant")
	msgs, _ := fakellm.NeedleConversation(4)
	if _, _, err := cli(t, jsonl(msgs), "publish", "svc-conv"); err != nil {
		t.Fatal(err)
	}
	first, err := s.client.Compact(ctxFor(t, 20*time.Second), "svc-conv")
	if err != nil || first.Status != pipeline.StatusQueued {
		t.Fatalf("first request: %+v, %v", first, err)
	}
	eventually(t, 20*time.Second, "the first compaction to reach the LLM", func() bool { return llm.Held() == 1 })
	var out, errOut proctest.LogBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"compact", "svc-conv", "--wait", "1m"},
			stdio{in: strings.NewReader(""), out: &out, err: &errOut}, os.LookupEnv)
	}()
	eventually(t, 20*time.Second, "compact --wait to say it waits for the pending request", func() bool {
		select {
		case err := <-done:
			t.Fatalf("compact --wait returned before the pending request ended: %v (exit %d)\nstderr %q", err, exitCode(err), errOut.String())
		default:
		}
		return strings.Contains(errOut.String(), "already pending (request "+first.RequestID)
	})
	llm.Release(false)
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("compact --wait did not end after the pending request completed")
	}
	if err != nil || !strings.HasPrefix(out.String(), "completed: generation 1") || !strings.Contains(out.String(), first.RequestID) {
		t.Fatalf("compact --wait as the tenant: %v (exit %d)\nstdout %q", err, exitCode(err), out.String())
	}
}
