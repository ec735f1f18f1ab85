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
	// Slots is the worker slots in all; Processes how many pools (each on its own
	// connection, as separate processes would be) share them.
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

func measureScaleOut(ctx context.Context, url string, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
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
		perSec, err := scaleRun(ctx, url, c, l.slots, l.procs, jobs)
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

// scaleRun queues jobs compactions of fresh conversations, then starts procs pools of
// slots/procs workers each and times them until every compaction completed.
func scaleRun(ctx context.Context, url string, c *Corpus, slots, procs, jobs int) (float64, error) {
	r, err := newRig(ctx, url)
	if err != nil {
		return 0, err
	}
	defer r.close()
	s := settings(scaleWindow)
	for k := range jobs {
		msgs := c.historyFrom(k, 30)
		conv := "s" + strconv.Itoa(k)
		last, err := r.publishHistory(ctx, conv, msgs)
		if err != nil {
			return 0, err
		}
		if _, err := r.store.Enqueue(ctx, schemas.Request{RequestID: "scale-" + conv, Conversation: conv, Trigger: "manual",
			Reason: "bench", RequestedAt: time.Now().UTC(), UpToSeq: last}); err != nil {
			return 0, err
		}
	}
	done, unsub, err := r.countEvents("completed")
	if err != nil {
		return 0, err
	}
	defer unsub()
	failed, unsubF, err := r.countEvents("declined")
	if err != nil {
		return 0, err
	}
	defer unsubF()
	llm := newFakeLLM(scaleLLMDelay, 300)
	defer llm.close()
	start := time.Now()
	for range procs {
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
	if err := wait(ctx, 10*time.Minute, "every compaction to complete", func() bool {
		return done.Load()+failed.Load() >= int64(jobs)
	}); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d of %d compactions declined", n, jobs)
	}
	return float64(jobs) / elapsed.Seconds(), nil
}
