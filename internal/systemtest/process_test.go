package systemtest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream/jstest"
	"github.com/compactor/compactor/schemas"
)

// The test of this file runs the real binary: `compactor serve` processes against an
// external NATS, one of them killed with SIGKILL while a compaction is in flight.

// victimRoute picks the process to kill: the first whose route sees an LLM call. From
// then on its calls are held open until the process dies, so the kill always lands on a
// compaction in flight; every other process's calls go to the fake LLM as they come.
type victimRoute struct {
	chosen atomic.Pointer[llmRoute]
}

func (v *victimRoute) route(t *testing.T, llm *fakellm.LLM) *llmRoute {
	t.Helper()
	return newLLMRoute(t, llm, func(r *llmRoute) {
		if v.chosen.CompareAndSwap(nil, r) {
			r.holdCalls()
		}
	})
}

// held is how many calls of the chosen process are held.
func (v *victimRoute) held() int32 {
	if r := v.chosen.Load(); r != nil {
		return r.held.Load()
	}
	return 0
}

// tagNeedles makes the needles of a fakellm.NeedleConversation its own: NEEDLE-<tag>….
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
	bin := proctest.Compactor(t)

	srv := jstest.Server(t)
	llm := fakellm.New(t)
	llm.Set(func(f *fakellm.LLM) { f.Delay = 400 * time.Millisecond })
	victim := &victimRoute{}
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
	chk := newChecker(t, nc, env, llm, procs[0].Proc, procs[1].Proc)
	var ids []string
	for c := 0; c < convs; c++ {
		msgs, needles := fakellm.NeedleConversation(turns)
		msgs, needles = tagNeedles(msgs, needles, fmt.Sprintf("c%d", c))
		id := fmt.Sprintf("proc-%d", c)
		chk.add(t, id, msgs, needles, "")
		ids = append(ids, id)
	}

	// publish publishes messages [from, to) of every conversation at once, each read
	// back at once, and returns when all are stored.
	publish := func(from, to int) {
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() {
				for i := from; i < to; i++ {
					if _, err := chk.publish(id, i, 10*time.Second); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	cut := 1 + 4*cutTurns
	publish(0, cut)

	// The first process to call the LLM holds its call open; kill it then.
	proctest.WaitFor(t, 30*time.Second, "a compaction in flight", func() error {
		if victim.held() == 0 {
			return fmt.Errorf("%d calls held", victim.held())
		}
		return nil
	})
	var killed *serveProc
	for _, p := range procs {
		if p.route == victim.chosen.Load() {
			killed = p
		}
	}
	killed.Kill(t)
	t.Logf("SIGKILLed %s with %d LLM calls in flight", killed.Name, victim.held())
	replacement := startServeProc(t, bin, "serve-3", srv.ClientURL(), victim.route(t, llm), procEnv)
	var running []*serveProc
	for _, p := range procs {
		if p != killed {
			running = append(running, p)
		}
	}
	running = append(running, replacement)

	// Keep publishing while the replacement starts and the killed process's requests
	// wait out their ack wait, three turns at a time, letting the queue drain between
	// chunks after the first so that later generations are written on the way.
	total := 1 + 4*turns
	js := jsFor(t, nc)
	for from := cut; from < total; from += 12 {
		publish(from, min(from+12, total))
		if from > cut {
			drained(t, js, chk.cfg.RequestsStream, 45*time.Second)
		}
	}

	// Nothing is pending forever: the held requests came back, the queue drains and
	// every conversation falls under its threshold.
	chk.settled(t, 45*time.Second)
	fig := chk.verify(t)
	for _, p := range running {
		if msg := p.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
	}
	// The killed process's requests were started again and finished.
	if fig.StartedAgain == 0 {
		t.Fatalf("no request was started twice: the killed process's requests were not taken over (%d started)", fig.Requests)
	}
	if fig.Failed > 0 || fig.DeadLetters > 0 {
		t.Fatalf("%d failed events and %d dead letters with a working LLM: %v", fig.Failed, fig.DeadLetters, fig.DeadCauses)
	}

	// SIGTERM: every running process drains and exits 0 within the drain timeout.
	for _, p := range running {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range running {
		if err := p.Wait(t, 10*time.Second, "SIGTERM (its drain timeout)"); err != nil {
			t.Fatalf("%s exited with %v after SIGTERM", p.Name, err)
		}
	}
	t.Logf("%d conversations, %d messages, %d revisions, generations %d–%d, 1 kill (%d requests started again), lost: 0, LLM calls %d; %s",
		fig.Conversations, fig.Published, fig.Revisions, fig.MinGeneration, fig.MaxGeneration, fig.StartedAgain,
		llm.Calls(), time.Since(start).Round(time.Millisecond))
}
