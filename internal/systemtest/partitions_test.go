package systemtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/fakellm"
	"github.com/compactor/compactor/internal/proctest"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/jstest"
)

// The test of this file runs three `compactor serve` processes of the real binary with
// a partitioned trigger and SIGKILLs one.

// logLine is one JSON log line of a process.
type logLine struct {
	Message      string `json:"message"`
	Partition    string `json:"partition"`
	Member       string `json:"member"`
	Conversation string `json:"conversation"`
}

// logLines parses a process's JSON log lines (others are skipped).
func logLines(p *proctest.Proc) []logLine {
	var out []logLine
	for _, l := range strings.Split(p.Logs.String(), "\n") {
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil {
			out = append(out, ll)
		}
	}
	return out
}

// ownedPartitions is what a process's log says it owns now: the partitions it took
// ("partition owned") and has not begun to give away since.
func ownedPartitions(p *proctest.Proc) map[string]bool {
	owned := map[string]bool{}
	for _, l := range logLines(p) {
		switch l.Message {
		case "partition owned":
			owned[l.Partition] = true
		case "partition moves away; draining it", "partition released":
			delete(owned, l.Partition)
		}
	}
	return owned
}

// requestedBy returns the conversations a process's trigger asked compactions for, with
// the partition of the trigger that asked, and how many times.
func requestedBy(p *proctest.Proc) map[string]int {
	out := map[string]int{}
	for _, l := range logLines(p) {
		if l.Message == "compaction requested" && l.Partition != "" {
			out[l.Conversation+"@"+l.Partition]++
		}
	}
	return out
}

// sharedOut checks that procs own every one of n partitions between them, each
// partition once, and each process at least one.
func sharedOut(procs []*serveProc, n int) error {
	seen := map[string]string{}
	for _, p := range procs {
		owned := ownedPartitions(p.Proc)
		if len(owned) == 0 {
			return fmt.Errorf("%s owns no partition", p.Name)
		}
		for part := range owned {
			if other, ok := seen[part]; ok {
				return fmt.Errorf("partition %s owned by %s and %s", part, other, p.Name)
			}
			seen[part] = p.Name
		}
	}
	if len(seen) != n {
		return fmt.Errorf("%d of %d partitions owned: %v", len(seen), n, seen)
	}
	return nil
}

// TestTriggerPartitionsAcrossProcesses runs three trigger (and worker) processes with
// six trigger partitions: the partitions are shared out, each process handles the
// conversations of its own, and after one process is SIGKILLed its partitions move to
// the others, which go on compacting their conversations; the checker verifies from
// outside that nothing was lost or done twice.
func TestTriggerPartitionsAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	start := time.Now()
	const (
		parts    = 6
		turns    = 20
		cutTurns = 11 // over the threshold before the kill
	)
	env := testEnv(t, 4000)
	env.AckWait = 3 * time.Second
	env.TriggerPartitions = parts
	env.TriggerHeartbeat = 300 * time.Millisecond
	bin := proctest.Compactor(t)

	srv := jstest.Server(t)
	llm := fakellm.New(t)
	procEnv := []string{
		"COMPACTOR_CONTEXT_WINDOW=4000",
		"COMPACTOR_LLM_API_KEY=test-key",
		"COMPACTOR_LOG_LEVEL=info",
		"COMPACTOR_RETRY_DELAY=200ms",
		"COMPACTOR_WORKER_ACK_WAIT=3s",
		"COMPACTOR_DRAIN_TIMEOUT=10s",
		fmt.Sprintf("COMPACTOR_TRIGGER_PARTITIONS=%d", parts),
		"COMPACTOR_TRIGGER_HEARTBEAT=300ms",
	}
	var procs []*serveProc
	for i := range 3 {
		procs = append(procs, startServeProc(t, bin, fmt.Sprintf("serve-%d", i+1), srv.ClientURL(), newLLMRoute(t, llm, nil), procEnv))
	}
	nc := jstest.Conn(t, srv)
	chk := newChecker(t, nc, env, llm, procs[0].Proc, procs[1].Proc, procs[2].Proc)
	proctest.WaitFor(t, 30*time.Second, "the partitions to be shared out", func() error {
		for _, p := range procs {
			if msg := p.UnexpectedExit(); msg != "" {
				t.Fatal(msg)
			}
		}
		return sharedOut(procs, parts)
	})
	for _, p := range procs {
		t.Logf("%s owns %v", p.Name, slices.Sorted(maps.Keys(ownedPartitions(p.Proc))))
	}

	// One conversation in each partition.
	byPart := map[int]string{}
	for i := 0; len(byPart) < parts; i++ {
		id := fmt.Sprintf("part-%d", i)
		if p := jetstream.PartitionOf(id, parts); byPart[p] == "" {
			byPart[p] = id
		}
	}
	var ids []string
	for p := range parts {
		msgs, needles := fakellm.NeedleConversation(turns)
		msgs, needles = tagNeedles(msgs, needles, fmt.Sprintf("p%d", p))
		chk.add(t, byPart[p], msgs, needles, "")
		ids = append(ids, byPart[p])
	}
	publish := func(ids []string, from, to int) {
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
	publish(ids, 0, cut)

	// Every conversation is asked for by the process that owns its partition, so every
	// process does its share.
	partName := func(p int) string { return jetstream.Partition{N: parts, P: p}.String() }
	ownerOf := func(part string, among []*serveProc) *serveProc {
		for _, p := range among {
			if ownedPartitions(p.Proc)[part] {
				return p
			}
		}
		return nil
	}
	proctest.WaitFor(t, 30*time.Second, "each conversation's compaction asked for by its partition's owner", func() error {
		for p, id := range byPart {
			owner := ownerOf(partName(p), procs)
			if owner == nil {
				return fmt.Errorf("partition %s has no owner", partName(p))
			}
			if requestedBy(owner.Proc)[id+"@"+partName(p)] == 0 {
				return fmt.Errorf("%s (partition %s) not asked for by its owner %s", id, partName(p), owner.Name)
			}
		}
		return nil
	})
	for _, p := range procs {
		t.Logf("%s asked for %v", p.Name, requestedBy(p.Proc))
	}

	// SIGKILL the first process: no leave, no unpin. Its membership expires after 3
	// heartbeats and its pins after the pinned TTL; then the others own its partitions.
	killed, survivors := procs[0], procs[1:]
	lost := slices.Sorted(maps.Keys(ownedPartitions(killed.Proc)))
	idOf := func(part string) string {
		for p, c := range byPart {
			if partName(p) == part {
				return c
			}
		}
		return ""
	}
	genAtKill := map[string]uint64{}
	for _, part := range lost {
		v, _, err := chk.st.Results().Get(ctxFor(t, 5*time.Second), idOf(part), true)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil {
			genAtKill[idOf(part)] = v.Generation
		}
	}
	killed.Kill(t)
	killedAt := time.Now()
	proctest.WaitFor(t, 30*time.Second, "the killed process's partitions to move to the others", func() error {
		return sharedOut(survivors, parts)
	})
	t.Logf("partitions %v of %s moved to the others in %s", lost, killed.Name, time.Since(killedAt).Round(100*time.Millisecond))

	// The rest of every conversation: those of the moved partitions are compacted
	// again by their new owners.
	publish(ids, cut, 1+4*turns)
	// Compaction goes on for them: a new generation after the kill. (The request may be
	// the new owner's, or the follow-up a worker queues after a completed compaction.)
	proctest.WaitFor(t, 45*time.Second, "the conversations of the moved partitions compacted again", func() error {
		for _, part := range lost {
			id := idOf(part)
			v, _, err := chk.st.Results().Get(ctxFor(t, 5*time.Second), id, false)
			if err != nil {
				return err
			}
			if v == nil || v.Generation <= genAtKill[id] {
				return fmt.Errorf("%s (partition %s) still at generation %d", id, part, genAtKill[id])
			}
		}
		return nil
	})
	t.Logf("their conversations compacted again %s after the SIGKILL (the pinned TTL is 10 s)", time.Since(killedAt).Round(100*time.Millisecond))
	// Settled: every chat message of every partition acknowledged, those of the moved
	// partitions by their new owners (the killed process's in hand after their ack wait).
	chk.settled(t, 60*time.Second)
	for _, p := range survivors {
		t.Logf("%s asked for %v", p.Name, requestedBy(p.Proc))
	}
	fig := chk.verify(t)
	for _, p := range survivors {
		if msg := p.UnexpectedExit(); msg != "" {
			t.Fatal(msg)
		}
	}
	if fig.Failed > 0 || fig.DeadLetters > 0 {
		t.Fatalf("%d failed events and %d dead letters with a working LLM: %v", fig.Failed, fig.DeadLetters, fig.DeadCauses)
	}
	for _, p := range survivors {
		p.Signal(t, syscall.SIGTERM)
	}
	for _, p := range survivors {
		if err := p.Wait(t, 15*time.Second, "SIGTERM (its drain timeout)"); err != nil {
			t.Fatalf("%s exited with %v after SIGTERM", p.Name, err)
		}
	}
	t.Logf("%d partitions over 3 processes, 1 SIGKILLed; %d conversations, %d messages, %d revisions, generations %d–%d, lost: 0; %s",
		parts, fig.Conversations, fig.Published, fig.Revisions, fig.MinGeneration, fig.MaxGeneration, time.Since(start).Round(time.Millisecond))
}
