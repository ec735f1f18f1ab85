package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
)

// The test of this file runs the real binary: `compactor serve` processes against an
// external NATS, one of them killed with SIGKILL while a compaction is in flight.

// buildCompactor builds this directory's binary into a temporary directory.
func buildCompactor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "compactor")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// victimRoute picks the process to kill: the first whose route sees an LLM call. From
// then on its calls are held open until the process dies, so the kill always lands on a
// compaction in flight; every other process's calls go to the fake LLM as they come.
type victimRoute struct {
	chosen atomic.Pointer[llmRoute]
	held   atomic.Int32
	stop   chan struct{} // closed at cleanup: lets held calls go
	once   sync.Once
}

// llmRoute is one process's way to the shared fake LLM.
type llmRoute struct {
	srv   *httptest.Server
	calls atomic.Int32
}

func (v *victimRoute) route(t *testing.T, llm *fakeLLM) *llmRoute {
	t.Helper()
	r := &llmRoute{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.calls.Add(1)
		v.chosen.CompareAndSwap(nil, r)
		if v.chosen.Load() == r {
			v.held.Add(1)
			// Read the body so the server notices the connection closing.
			_, _ = io.Copy(io.Discard, req.Body)
			select {
			case <-req.Context().Done(): // the process died
			case <-v.stop:
			}
			return
		}
		llm.srv.Config.Handler.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { v.once.Do(func() { close(v.stop) }) }) // before Close
	return r
}

// serveProc is one `compactor serve` process.
type serveProc struct {
	name  string
	cmd   *exec.Cmd
	route *llmRoute
	logs  *logBuffer
	done  chan struct{}
	err   error // set when done is closed
}

func startServeProc(t *testing.T, bin, name, natsURL string, route *llmRoute, env []string) *serveProc {
	t.Helper()
	p := &serveProc{name: name, route: route, logs: &logBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Env = append(p.cmd.Env, "COMPACTOR_NATS_URL="+natsURL, "COMPACTOR_LLM_BASE_URL="+route.srv.URL)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("logs of %s (pid %d):\n%s", name, p.cmd.Process.Pid, p.logs.String())
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *serveProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tagNeedles makes the needles of a needleConversation its own: NEEDLE-<tag>….
func tagNeedles(msgs []schemas.Message, needles []string, tag string) ([]schemas.Message, []string) {
	out := slices.Clone(msgs)
	for i, m := range out {
		if m.Role == schemas.RoleUser {
			out[i].Content = schemas.Text(strings.ReplaceAll(m.Content.String(), "NEEDLE-", "NEEDLE-"+tag))
		}
	}
	var ns []string
	for _, n := range needles {
		ns = append(ns, strings.Replace(n, "NEEDLE-", "NEEDLE-"+tag, 1))
	}
	return out, ns
}

// TestNothingLostAcrossProcesses runs two `compactor serve` processes of the real binary
// on an external NATS, SIGKILLs one while its compaction is in flight, starts another
// in its place, and checks from outside that nothing was lost or done twice.
func TestNothingLostAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	start := time.Now()
	const (
		convs    = 4
		turns    = 20
		cutTurns = 11 // turns of each conversation published before the kill: over the threshold
	)
	env := testEnv(t, 4000)
	env.AckWait = 3 * time.Second
	cfg := env.jetstream()
	bin := buildCompactor(t)

	srv := jstest.Server(t)
	llm := newFakeLLM(t)
	llm.set(func(f *fakeLLM) { f.delay = 400 * time.Millisecond })
	victim := &victimRoute{stop: make(chan struct{})}
	procEnv := []string{
		"COMPACTOR_CONTEXT_WINDOW=4000",
		"COMPACTOR_LLM_API_KEY=test-key",
		"COMPACTOR_LOG_LEVEL=warn",
		"COMPACTOR_RETRY_DELAY=200ms",
		"COMPACTOR_WORKER_ACK_WAIT=3s",
		"COMPACTOR_DRAIN_TIMEOUT=10s",
	}
	procs := []*serveProc{
		startServeProc(t, bin, "serve-1", srv.ClientURL(), victim.route(t, llm), procEnv),
		startServeProc(t, bin, "serve-2", srv.ClientURL(), victim.route(t, llm), procEnv),
	}

	// The checker's own connection, bound to what the processes provisioned.
	nc := jstest.Conn(t, srv)
	var st *jetstream.Store
	waitFor(t, 30*time.Second, "the processes to provision the streams", func() error {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited at start: %v\n%s", p.name, p.err, p.logs.String())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		st, err = jetstream.Open(ctx, nc, cfg)
		return err
	})
	client := pipeline.NewWithStore(nc, st)
	reader := &stack{nc: nc, st: st, client: client} // runs no roles
	kv := resultsFor(t, nc, cfg)
	js := jsFor(t, nc)
	events := collectEvents(t, nc, cfg.EventPrefix+".>")

	type conversation struct {
		id      string
		msgs    []schemas.Message
		needles []string
		log     *valueLog
		seqs    []uint64
	}
	var all []*conversation
	for c := 0; c < convs; c++ {
		msgs, needles := needleConversation(turns)
		msgs, needles = tagNeedles(msgs, needles, fmt.Sprintf("c%d", c))
		cv := &conversation{id: fmt.Sprintf("proc-%d", c), msgs: msgs, needles: needles,
			log: &valueLog{values: map[uint64]*schemas.Result{}}}
		// Every value the bucket ever holds for it, from before the first publish.
		cv.log.watch(t, kv, cv.id, natsjs.IncludeHistory())
		all = append(all, cv)
	}

	// publish publishes msgs[from:to] of every conversation at once, each reading its own
	// write back, and returns when all are stored.
	publish := func(from func(*conversation) int, to func(*conversation) int) {
		var wg sync.WaitGroup
		for _, cv := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from(cv); i < to(cv); i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					seq, err := client.Publish(ctx, cv.id, cv.msgs[i], pipeline.MsgID(fmt.Sprintf("%s-%d", cv.id, i)))
					if err != nil {
						cancel()
						t.Errorf("publish %s message %d: %v", cv.id, i, err)
						return
					}
					cx, err := client.Context(ctx, cv.id, pipeline.AtLeastSeq(seq))
					cancel()
					if err != nil {
						t.Errorf("read %s after seq %d: %v", cv.id, seq, err)
						return
					}
					m := cv.msgs[i]
					if seq >= cx.TailStartSeq && !slices.Contains(cx.Seqs, seq) && !(m.HasToolCalls() || m.Role == schemas.RoleTool) {
						t.Errorf("read-your-writes: %s seq %d missing from the context (tail from %d)", cv.id, seq, cx.TailStartSeq)
						return
					}
					cv.seqs = append(cv.seqs, seq)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	cut := 1 + 4*cutTurns
	publish(func(*conversation) int { return 0 }, func(*conversation) int { return cut })

	// The first process to call the LLM holds its call open; kill it then.
	waitFor(t, 30*time.Second, "a compaction in flight", func() error {
		if victim.held.Load() == 0 || events.count(schemas.EventStarted) == 0 {
			return fmt.Errorf("%d calls held, %d started events", victim.held.Load(), events.count(schemas.EventStarted))
		}
		return nil
	})
	var killed *serveProc
	for _, p := range procs {
		if p.route == victim.chosen.Load() {
			killed = p
		}
	}
	startedAtKill := events.count(schemas.EventStarted)
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-killed.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still running 10s after SIGKILL", killed.name)
	}
	t.Logf("SIGKILLed %s with %d LLM calls in flight, %d started events so far", killed.name, victim.held.Load(), startedAtKill)
	replacement := startServeProc(t, bin, "serve-3", srv.ClientURL(), victim.route(t, llm), procEnv)
	var running []*serveProc
	for _, p := range procs {
		if p != killed {
			running = append(running, p)
		}
	}
	running = append(running, replacement)

	// Keep publishing while the replacement starts and the killed process's request
	// waits out its ack wait, three turns at a time, letting the queue drain between
	// chunks after the first so that later generations are written on the way.
	for from := cut; from < len(all[0].msgs); from += 12 {
		to := min(from+12, len(all[0].msgs))
		publish(func(*conversation) int { return from }, func(*conversation) int { return to })
		if from > cut {
			drained(t, js, cfg.RequestsStream, 45*time.Second)
		}
	}

	// The work queue drains: the held request came back and nothing is pending forever.
	drained(t, js, cfg.RequestsStream, 45*time.Second)
	total := 0
	for _, cv := range all {
		total += len(cv.msgs)
		var cx *pipeline.Context
		eventually(t, 30*time.Second, cv.id+" to fall under the threshold", func() bool {
			var err error
			cx, err = client.Context(ctxFor(t, 10*time.Second), cv.id)
			return err == nil && cx.Tokens < env.budget().ThresholdTokens()
		})
		if err := rounds.CheckPairs(cx.Messages); err != nil {
			t.Fatalf("%s: %v", cv.id, err)
		}
		// Every published message is stored once, at the sequence its publish returned.
		stored := mustEntries(t, reader, cv.id)
		if len(stored) != len(cv.msgs) {
			t.Fatalf("%s: %d messages stored; %d published", cv.id, len(stored), len(cv.msgs))
		}
		for k, e := range stored {
			if e.Seq != cv.seqs[k] {
				t.Fatalf("%s: stored message %d has seq %d; its publish returned %d", cv.id, k, e.Seq, cv.seqs[k])
			}
		}
		// Every value the conversation had, in order: generations one apart, none
		// repeated, tail_start_seq never back, and the rest of the invariants.
		cur, rev, err := st.GetResult(ctxFor(t, 10*time.Second), cv.id, true)
		if err != nil || cur == nil {
			t.Fatalf("%s: current value %v, %v", cv.id, cur, err)
		}
		values := cv.log.upTo(t, rev)
		invariants(t, reader, cv.id, env, values, llm)
		checkNeedles(t, cx, cv.needles, cur.Generation)
		gens := map[uint64]bool{}
		for _, v := range values {
			gens[v.Generation] = true
		}
		for _, ev := range conversationEvents(t, nc, cfg, cv.id) {
			if ev.Type == schemas.EventCompleted && !gens[ev.Generation] {
				t.Fatalf("%s: completed event for generation %d (request %s), which the bucket never held", cv.id, ev.Generation, ev.RequestID)
			}
		}
		t.Logf("%s: %d messages, %d values, generation %d, final context %d tokens", cv.id, len(cv.msgs), len(values), cur.Generation, cx.Tokens)
	}

	// The request the killed process held was started again and completed.
	events.mu.Lock()
	started, completed := map[string]int{}, map[string]bool{}
	for _, ev := range events.events {
		switch ev.Type {
		case schemas.EventStarted:
			started[ev.RequestID]++
		case schemas.EventCompleted, schemas.EventDeclined:
			completed[ev.RequestID] = true
		}
	}
	events.mu.Unlock()
	redone := 0
	for id, n := range started {
		if n > 1 && completed[id] {
			redone++
		}
	}
	if redone == 0 {
		t.Fatalf("no request was started twice and then finished: the killed process's request was not taken over (%d started)", len(started))
	}
	if n := events.count(schemas.EventFailed); n > 0 {
		t.Errorf("%d failed events with a working LLM", n)
	}
	// Dead letters: none with a working LLM.
	dead, err := js.Stream(ctxFor(t, 10*time.Second), cfg.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := dead.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("%d dead letters with a working LLM", n)
	}

	// SIGTERM: every running process drains and exits 0 within the drain timeout.
	for _, p := range running {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range running {
		select {
		case <-p.done:
			if p.err != nil {
				t.Fatalf("%s exited with %v after SIGTERM", p.name, p.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still running 10s (its drain timeout) after SIGTERM", p.name)
		}
	}
	t.Logf("%d conversations, %d messages, 1 kill (%d requests started again), lost: 0, LLM calls %d; %s",
		convs, total, redone, llm.callCount(), time.Since(start).Round(time.Millisecond))
}

// upTo waits until the watchers saw revision last and returns the values seen through
// it in revision order. Unlike complete, the bucket may hold other conversations, so
// the revisions of this one are not 1, 2, …: the watcher's ordered consumer is what
// guarantees none is skipped.
func (l *valueLog) upTo(t *testing.T, last uint64) []*schemas.Result {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("the watcher to see revision %d", last), func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.values[last] == nil {
			return errors.New("not yet")
		}
		return nil
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	var revs []uint64
	for rev := range l.values {
		if rev <= last {
			revs = append(revs, rev)
		}
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	var out []*schemas.Result
	for _, rev := range revs {
		out = append(out, l.values[rev])
	}
	return out
}
