package bench

import (
	"context"
	"fmt"
	"time"
)

// CostRow is what one compaction costs besides the LLM, for a conversation of History
// messages: the first compaction (everything is new) and an incremental one (the same
// conversation, compacted before, with NewMessages added since).
type CostRow struct {
	History     int `json:"history"`
	NewMessages int `json:"new_messages"`
	// FirstMs and IncrementalMs are the time from queueing the request to its completed
	// event, less the time the summarizer's LLM calls took; IncrementalMs is the median
	// of costRounds compactions, each after NewMessages more.
	FirstMs       float64 `json:"first_ms"`
	FirstLLMCalls int     `json:"first_llm_calls"`
	IncrementalMs float64 `json:"incremental_ms"`
}

// costNew is how many messages arrive between two compactions in the cost measurement,
// and costRounds how many incremental compactions are timed (the median is reported).
const (
	costNew    = 40
	costRounds = 5
)

func measureCost(ctx context.Context, url string, c *Corpus, sz sizes, rep *Report, progress func(string, ...any)) error {
	r, err := newRig(ctx, url)
	if err != nil {
		return err
	}
	defer r.close()
	llm := newFakeLLM(0, 400)
	defer llm.close()
	sum, err := llm.summarizer()
	if err != nil {
		return err
	}
	// One slot: the LLM time the summarizer adds up is this job's alone.
	stop, err := r.startPool(ctx, settings(benchWindow), 1, sum)
	if err != nil {
		return err
	}
	defer stop()
	timed := func(conv string, upTo uint64) (time.Duration, int, error) {
		llm0, calls0 := sum.llmTime(), sum.calls.Load()
		start := time.Now()
		if _, err := r.compact(ctx, conv, upTo); err != nil {
			return 0, 0, err
		}
		return time.Since(start) - (sum.llmTime() - llm0), int(sum.calls.Load() - calls0), nil
	}
	for _, n := range sz.costHistories {
		conv := fmt.Sprintf("h%d", n)
		progress("cost: compaction of a %d-message conversation, then %d times of %d more", n, costRounds, costNew)
		h := c.history(n + costRounds*costNew)
		last, err := r.publishHistory(ctx, conv, h[:n])
		if err != nil {
			return err
		}
		first, calls, err := timed(conv, last)
		if err != nil {
			return err
		}
		var incs []time.Duration
		for i := range costRounds {
			if last, err = r.publishHistory(ctx, conv, h[n+i*costNew:n+(i+1)*costNew]); err != nil {
				return err
			}
			inc, _, err := timed(conv, last)
			if err != nil {
				return err
			}
			incs = append(incs, inc)
		}
		inc := pct(incs, 50)
		row := CostRow{History: n, NewMessages: costNew, FirstMs: ms(first), FirstLLMCalls: calls, IncrementalMs: ms(inc)}
		rep.Cost = append(rep.Cost, row)
		progress("cost: %d messages: first %.1f ms (%d LLM calls), incremental %.1f ms", n, row.FirstMs, calls, row.IncrementalMs)
	}
	return nil
}
