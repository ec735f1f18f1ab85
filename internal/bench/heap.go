package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/schemas"
)

// HeapReport is the trigger's heap per tracked conversation and how fast it takes on
// new conversations.
type HeapReport struct {
	Conversations int `json:"conversations"`
	// BytesPerConversation is the live heap (after GC) the process holds once the trigger
	// tracks every conversation, less what it held before the trigger started, per
	// conversation. With the server in another process this is the trigger's state
	// (and its client's buffers); with an embedded one it includes the server's.
	BytesPerConversation float64 `json:"bytes_per_conversation"`
	// RSSPerConversation is the process's resident memory (VmRSS of /proc/self/status,
	// read after GC and returning freed memory to the system) once the trigger tracks
	// every conversation, less before it started, per conversation: what the process
	// costs the machine, the live heap plus the runtime's spare and fragmented pages.
	// 0 where it cannot be read.
	RSSPerConversation float64 `json:"rss_bytes_per_conversation"`
	// TriggerProcessRSSPerConversation is the same conversations taken on by a trigger in
	// a process of its own (the bench-trigger command), its VmRSS once it acknowledged
	// every message less before it started, each read after a GC that returns freed
	// memory to the system, per conversation: nothing but the trigger in it. 0 without
	// a binary to start.
	TriggerProcessRSSPerConversation float64 `json:"trigger_process_rss_bytes_per_conversation"`
	// NewPerSec is new conversations tracked per second (each one's state rebuilt from
	// KV and the stream).
	NewPerSec       float64 `json:"new_conversations_per_sec"`
	ServerInProcess bool    `json:"server_in_process"`
	// NewConversations is the rate of new conversations in every trigger layout (the
	// first row is NewPerSec's): each its own namespace with the same conversations.
	NewConversations []NewConvRow `json:"new_conversations"`
}

// NewConvRow is how fast a trigger of one layout takes on new conversations.
type NewConvRow struct {
	Partitions int     `json:"partitions"`
	Processes  int     `json:"trigger_processes"`
	PerSec     float64 `json:"new_conversations_per_sec"`
}

func measureHeap(ctx context.Context, url, self string, sz sizes, profile string, rep *Report, progress func(string, ...any)) error {
	hr := &rep.Heap
	n := sz.heapConversations
	hr.Conversations, hr.ServerInProcess = n, rep.Server == "embedded"
	r, err := newRig(ctx, url)
	if err != nil {
		return err
	}
	defer r.close()
	progress("heap: publishing one message to each of %d conversations", n)
	if err := r.publishNewConversations(n); err != nil {
		return err
	}
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return err
	}
	before, rssBefore := liveHeap(), residentSet()
	progress("heap: a trigger takes on %d new conversations", n)
	start := time.Now()
	t, stop, err := r.startTrigger(ctx, settings(benchWindow))
	if err != nil {
		return err
	}
	defer stop()
	if err := wait(ctx, 10*time.Minute, "the trigger to track every conversation", func() bool { return t.Tracked() >= n }); err != nil {
		return err
	}
	if err := wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool { return drained(ctx, cons) }); err != nil {
		return err
	}
	hr.NewPerSec = float64(n) / time.Since(start).Seconds()
	hr.NewConversations = append(hr.NewConversations, NewConvRow{Partitions: 1, Processes: 1, PerSec: hr.NewPerSec})
	after, rssAfter := liveHeap(), residentSet()
	hr.BytesPerConversation = float64(int64(after)-int64(before)) / float64(n)
	if rssBefore > 0 && rssAfter > 0 {
		hr.RSSPerConversation = float64(rssAfter-rssBefore) / float64(n)
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	progress("heap: %.0f bytes of live heap and %.0f bytes resident per conversation, %.0f new conversations/s",
		hr.BytesPerConversation, hr.RSSPerConversation, hr.NewPerSec)
	stop()
	r.close()
	if self != "" {
		progress("heap: a trigger in its own process takes on %d new conversations", n)
		if hr.TriggerProcessRSSPerConversation, err = triggerProcessRSS(ctx, url, self, n); err != nil {
			return fmt.Errorf("trigger process: %w", err)
		}
		progress("heap: the trigger process's resident set grew %.0f bytes per conversation", hr.TriggerProcessRSSPerConversation)
	}
	for _, l := range triggerLayouts {
		if l.partitions == 1 {
			continue
		}
		progress("new conversations: a trigger of %s takes on %d new conversations", l, n)
		perSec, err := newConversations(ctx, url, n, l)
		if err != nil {
			return fmt.Errorf("new conversations, %s: %w", l, err)
		}
		hr.NewConversations = append(hr.NewConversations, NewConvRow{Partitions: l.partitions, Processes: l.processes, PerSec: perSec})
		progress("new conversations: %s: %.0f/s", l, perSec)
	}
	return nil
}

// triggerProcessRSS stores one message each of n conversations, then has a trigger
// process (self's bench-trigger command) take them on: its resident set's growth per
// conversation, from before it started consuming until it acknowledged every message.
func triggerProcessRSS(ctx context.Context, url, self string, n int) (float64, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	if err := r.publishNewConversations(n); err != nil {
		return 0, err
	}
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return 0, err
	}
	p, err := r.startTriggerProcess(self, benchWindow)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	before, err := p.rssAfterGC()
	if err != nil {
		return 0, err
	}
	if err := p.start(); err != nil {
		return 0, err
	}
	if err := wait(ctx, 10*time.Minute, "the trigger process to acknowledge every message", func() bool { return drained(ctx, cons) }); err != nil {
		return 0, err
	}
	after, err := p.rssAfterGC()
	if err != nil {
		return 0, err
	}
	if before < 0 || after < 0 {
		return 0, nil
	}
	return float64(after-before) / float64(n), nil
}

// newConversations stores one message each of n conversations, then starts a trigger
// of layout l and times it until it acknowledged every message (the clock starts
// before the trigger, as for the unpartitioned trigger's figure).
func newConversations(ctx context.Context, url string, n int, l triggerLayout) (float64, error) {
	r, err := newRigParts(ctx, url, l.partitions)
	if err != nil {
		return 0, err
	}
	defer r.close()
	if err := r.publishNewConversations(n); err != nil {
		return 0, err
	}
	cons, err := r.triggerConsumers(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	trig, err := r.startTriggers(ctx, settings(benchWindow), l.processes)
	if err != nil {
		return 0, err
	}
	defer trig.stop()
	if err := wait(ctx, 5*time.Minute, "the trigger to acknowledge every message", func() bool { return drained(ctx, cons) }); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// publishNewConversations stores one message of each of n conversations.
func (r *rig) publishNewConversations(n int) error {
	user := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("please run the build")}
	data, err := user.Encode()
	if err != nil {
		return err
	}
	return r.storeRaw(n, func(i int) (string, []byte) { return fmt.Sprintf("conversation-%08d", i), data })
}

// residentSet is this process's resident set (VmRSS) in bytes, after a GC that
// returns freed memory to the system, or -1 where it cannot be read.
func residentSet() int64 {
	debug.FreeOSMemory()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	return vmRSS(data)
}

// vmRSS is the VmRSS line of a /proc/PID/status, in bytes, or -1.
func vmRSS(status []byte) int64 {
	for _, line := range strings.Split(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return -1
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return -1
		}
		return kb * 1024
	}
	return -1
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
