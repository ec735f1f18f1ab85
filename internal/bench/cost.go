package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/compactor/compactor/schemas"
)

// CostRow is what one compaction costs besides the LLM, for a conversation of History
// messages: the first compaction (everything is new) and an incremental one (the same
// conversation, compacted before, with NewMessages added since).
type CostRow struct {
	// History is the conversation's length: Block messages of the corpus repeated, the
	// same block at every length, so every row reads the same mix of content.
	History     int `json:"history"`
	Block       int `json:"block"`
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
	block := closedPrefix(c.history(sz.costHistories[0]))
	fresh := c.historyFrom(1, costRounds*costNew)
	for _, want := range sz.costHistories {
		h := repeatBlock(block, want)
		n := len(h)
		h = append(h, fresh...)
		conv := fmt.Sprintf("h%d", n)
		progress("cost: compaction of a %d-message conversation (a block of %d repeated), then %d times of %d more", n, len(block), costRounds, costNew)
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
		row := CostRow{History: n, Block: len(block), NewMessages: costNew, FirstMs: ms(first), FirstLLMCalls: calls, IncrementalMs: ms(inc)}
		rep.Cost = append(rep.Cost, row)
		progress("cost: %d messages: first %.1f ms (%d LLM calls), incremental %.1f ms", n, row.FirstMs, calls, row.IncrementalMs)
	}
	return nil
}

// closedPrefix is the longest prefix of msgs that leaves no tool call open (every call
// answered by a tool message), so the block can repeat without leaving a call open
// in the middle of the history; all of msgs when none is closed.
func closedPrefix(msgs []CorpusMessage) []CorpusMessage {
	open := map[string]bool{}
	end := 0
	for i, m := range msgs {
		for _, tc := range m.Message.ToolCalls {
			open[tc.ID] = true
		}
		if m.Message.Role == schemas.RoleTool {
			delete(open, m.Message.ToolCallID)
		}
		if len(open) == 0 {
			end = i + 1
		}
	}
	if end == 0 {
		return msgs
	}
	return msgs[:end]
}

// repeatBlock is block repeated to about n messages: a whole number of blocks (at
// least one), the one nearest n.
func repeatBlock(block []CorpusMessage, n int) []CorpusMessage {
	times := max(1, (n+len(block)/2)/len(block))
	out := make([]CorpusMessage, 0, times*len(block))
	for range times {
		out = append(out, block...)
	}
	return out
}
