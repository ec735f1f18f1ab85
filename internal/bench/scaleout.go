package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/compactor/compactor/schemas"
)

// ScaleRow is the compaction throughput of one worker layout.
type ScaleRow struct {
	// Slots is the worker slots in all; Processes how many processes share them (see
	// Report.ScaleOutProcesses).
	Slots     int     `json:"slots"`
	Processes int     `json:"processes"`
	Jobs      int     `json:"jobs"`
	PerSec    float64 `json:"compactions_per_sec"`
	// Speedup is PerSec ÷ the one-slot row's.
	Speedup float64 `json:"speedup"`
}

// scaleLLMDelay is how long the fake LLM takes to answer in the scale-out measurement.
const scaleLLMDelay = 200 * time.Millisecond

// scaleWindow is the window of the scale-out conversations: 30 corpus messages are
// well over its target, so every job compacts.
const scaleWindow = 4000

func measureScaleOut(ctx context.Context, url, self string, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	rep.ScaleOutProcesses = "two worker processes (the compactor binary's bench-worker command)"
	if self == "" {
		rep.ScaleOutProcesses = "no binary to start (Config.Self): the two processes are two pools in this process, each on its own connection"
	}
	type layout struct{ slots, procs int }
	var layouts []layout
	for _, s := range sz.scaleSlots {
		layouts = append(layouts, layout{s, 1})
	}
	top := sz.scaleSlots[len(sz.scaleSlots)-1]
	layouts = append(layouts, layout{top, 2})
	var one float64
	for _, l := range layouts {
		jobs := l.slots * sz.scaleJobsPerSlot
		progress("scale-out: %d slots in %d process(es), %d compactions, LLM answering in %s", l.slots, l.procs, jobs, scaleLLMDelay)
		perSec, err := scaleRun(ctx, url, self, c, l.slots, l.procs, jobs)
		if err != nil {
			return fmt.Errorf("%d slots, %d processes: %w", l.slots, l.procs, err)
		}
		if l.slots == 1 && l.procs == 1 {
			one = perSec
		}
		row := ScaleRow{Slots: l.slots, Processes: l.procs, Jobs: jobs, PerSec: perSec}
		if one > 0 {
			row.Speedup = perSec / one
		}
		rep.ScaleOut = append(rep.ScaleOut, row)
		progress("scale-out: %d slots in %d process(es): %.1f compactions/s (%.1fx one slot)", l.slots, l.procs, perSec, row.Speedup)
	}
	return nil
}

// scaleRun starts procs pools of slots/procs workers each (in this process when procs
// is 1 or there is no self binary to start, else each in a process of its own), then
// queues jobs compactions of fresh conversations and times them until every one
// completed.
func scaleRun(ctx context.Context, url, self string, c *Corpus, slots, procs, jobs int) (float64, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	s := settings(scaleWindow)
	lasts := make([]uint64, jobs)
	for k := range jobs {
		if lasts[k], err = r.publishHistory(ctx, "s"+strconv.Itoa(k), c.historyFrom(k, 30)); err != nil {
			return 0, err
		}
	}
	done, unsub, err := r.countEvents("completed")
	if err != nil {
		return 0, err
	}
	defer unsub()
	declined, unsubD, err := r.countEvents("declined")
	if err != nil {
		return 0, err
	}
	defer unsubD()
	llm := newFakeLLM(scaleLLMDelay, 300)
	defer llm.close()
	for range procs {
		if procs > 1 && self != "" {
			w, err := r.startWorkerProcess(self, llm.srv.URL, slots/procs, scaleWindow)
			if err != nil {
				return 0, err
			}
			defer w.stop()
			continue
		}
		sum, err := llm.summarizer()
		if err != nil {
			return 0, err
		}
		stop, err := r.startPool(ctx, s, slots/procs, sum)
		if err != nil {
			return 0, err
		}
		defer stop()
	}
	start := time.Now()
	for k := range jobs {
		conv := "s" + strconv.Itoa(k)
		if _, err := r.store.Queue().Enqueue(ctx, schemas.Request{RequestID: "scale-" + conv, Conversation: conv, Trigger: "manual",
			Reason: "bench", RequestedAt: time.Now().UTC(), UpToSeq: lasts[k]}); err != nil {
			return 0, err
		}
	}
	if err := wait(ctx, 10*time.Minute, "every compaction to complete", func() bool {
		return done.Load()+declined.Load() >= int64(jobs)
	}); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if n := declined.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d compactions declined", n, jobs)
	}
	return float64(jobs) / elapsed.Seconds(), nil
}
