package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
)

// ScaleRow is the compaction throughput of one worker layout.
type ScaleRow struct {
	// Slots is the worker slots in all; Processes how many processes share them (see
	// Report.ScaleOutProcesses).
	Slots     int `json:"slots"`
	Processes int `json:"processes"`
	Jobs      int `json:"jobs"`
	// Declined is how many of the jobs the workers declined (their workloads are made
	// over the target, so a decline is a finding, reported, not an abort); PerSec counts
	// only the completed ones.
	Declined int     `json:"declined"`
	PerSec   float64 `json:"compactions_per_sec"`
	// Speedup is PerSec ÷ the one-slot row's.
	Speedup float64 `json:"speedup"`
}

// scaleLLMDelay is how long the fake LLM takes to answer in the scale-out measurement.
const scaleLLMDelay = 200 * time.Millisecond

// scaleWindow is the window of the scale-out conversations; each workload is made at
// least scaleMinTokens, twice its target, so the split always has messages to cover
// and the summary shrinks the context well past min_progress.
const scaleWindow = 4000

// scaleMinMessages and scaleMinTokens bound a scale-out workload from below: at least
// this many corpus messages, and messages added until its estimate reaches the tokens.
const (
	scaleMinMessages = 30
	scaleMinTokens   = scaleWindow
)

// scaleWorkload is the k-th scale-out workload: corpus messages from file k on, at
// least scaleMinMessages of them, extended until their estimate (tokens.Message) is at
// least scaleMinTokens.
func (c *Corpus) scaleWorkload(k int) []CorpusMessage {
	var out []CorpusMessage
	n := 0
	for f := k; len(out) < scaleMinMessages || n < scaleMinTokens; f++ {
		for _, m := range c.Files[f%len(c.Files)] {
			out = append(out, m)
			n += tokens.Message(&m.Message)
			if len(out) >= scaleMinMessages && n >= scaleMinTokens {
				break
			}
		}
	}
	return out
}

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
		work := make([][]CorpusMessage, jobs)
		for k := range work {
			work[k] = c.scaleWorkload(k)
		}
		row, err := scaleRun(ctx, url, self, work, l.slots, l.procs)
		if err != nil {
			return fmt.Errorf("%d slots, %d processes: %w", l.slots, l.procs, err)
		}
		if l.slots == 1 && l.procs == 1 {
			one = row.PerSec
		}
		if one > 0 {
			row.Speedup = row.PerSec / one
		}
		rep.ScaleOut = append(rep.ScaleOut, row)
		rep.ScaleOutDeclined += row.Declined
		progress("scale-out: %d slots in %d process(es): %.1f compactions/s (%.1fx one slot), %d of %d declined",
			l.slots, l.procs, row.PerSec, row.Speedup, row.Declined, jobs)
	}
	return nil
}

// scaleRun starts procs pools of slots/procs workers each (in this process when procs
// is 1 or there is no self binary to start, else each in a process of its own), then
// queues one compaction of each workload (a fresh conversation each) and times them
// until every one completed or was declined.
func scaleRun(ctx context.Context, url, self string, work [][]CorpusMessage, slots, procs int) (ScaleRow, error) {
	row := ScaleRow{Slots: slots, Processes: procs, Jobs: len(work)}
	r, err := newRig(ctx, url)
	if err != nil {
		return row, err
	}
	defer r.close()
	s := settings(scaleWindow)
	lasts := make([]uint64, len(work))
	for k, w := range work {
		if lasts[k], err = r.publishHistory(ctx, "s"+strconv.Itoa(k), w); err != nil {
			return row, err
		}
	}
	done, unsub, err := r.countEvents("completed")
	if err != nil {
		return row, err
	}
	defer unsub()
	declined, unsubD, err := r.countEvents("declined")
	if err != nil {
		return row, err
	}
	defer unsubD()
	llm := newFakeLLM(scaleLLMDelay, 300)
	defer llm.close()
	for range procs {
		if procs > 1 && self != "" {
			w, err := r.startWorkerProcess(self, llm.srv.URL, slots/procs, scaleWindow)
			if err != nil {
				return row, err
			}
			defer w.stop()
			continue
		}
		sum, err := llm.summarizer()
		if err != nil {
			return row, err
		}
		stop, err := r.startPool(ctx, s, slots/procs, sum)
		if err != nil {
			return row, err
		}
		defer stop()
	}
	start := time.Now()
	for k := range work {
		conv := "s" + strconv.Itoa(k)
		if _, err := r.store.Queue().Enqueue(ctx, schemas.Request{RequestID: "scale-" + conv, Conversation: conv, Trigger: "manual",
			Reason: "bench", RequestedAt: time.Now().UTC(), UpToSeq: lasts[k]}); err != nil {
			return row, err
		}
	}
	if err := wait(ctx, 10*time.Minute, "every compaction to complete or be declined", func() bool {
		return done.Load()+declined.Load() >= int64(len(work))
	}); err != nil {
		return row, err
	}
	elapsed := time.Since(start)
	row.Declined = int(declined.Load())
	row.PerSec = float64(done.Load()) / elapsed.Seconds()
	return row, nil
}
