package summarizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// PromptOverhead is what a summarization request costs besides its input: the
// summarizer's own prompt, the tags around each block and the model's formatting.
const PromptOverhead = 1500

// fitMargin is the share of the summarizer's window that chars/4 input may fill: chars/4
// under-counts code and JSON, and the model counts its own tokens.
const fitMargin = 0.75

// maxShrinks bounds how often a refused request is retried with chunks half the size
// (the floor of four summaries per chunk usually ends it first).
const maxShrinks = 10

// summarizeToFit summarizes in with sum so that no request exceeds the summarizer's
// window: input too large for one request is split into chunks that fit, each chunk is
// summarized, and the chunk summaries are merged with the previous summary (map-reduce).
// When the endpoint still refuses a request as too long (ErrContextLength), it tries
// again with chunks half the size. Nothing is dropped: a single message too large for a
// chunk is cut to its head and tail, with a marker.
func (p *Pool) summarizeToFit(ctx context.Context, j *job, sum Summarizer, in Input, window int) (Output, error) {
	limit := int(float64(window)*fitMargin) - in.MaxSummaryTokens - PromptOverhead
	var lastErr error
	for range maxShrinks {
		if limit < 4*in.MaxSummaryTokens {
			break
		}
		out, err := p.mapReduce(ctx, j, sum, in, limit, 0)
		if !errors.Is(err, ErrContextLength) {
			return out, err
		}
		j.log.Warn().Err(err).Int("chunk_tokens", limit).Msg("summarizer refused the input as too long; retrying with smaller chunks")
		lastErr = err
		limit /= 2
	}
	if lastErr == nil {
		lastErr = ErrContextLength
	}
	return Output{}, fmt.Errorf("%w: summarizer_context_window %d leaves too little room for input besides a %d-token summary: %v",
		errPermanent, window, in.MaxSummaryTokens, lastErr)
}

// inputTokens is the size of a request's input, prompt overhead excluded.
func inputTokens(in Input) int {
	return tokens.Text(in.PreviousSummary) + tokens.Text(in.SystemPrompt) + tokens.Text(in.Instructions) + tokens.Messages(in.Messages)
}

// maxDepth bounds the levels of merging (each level merges at least two summaries
// into one, so it is never reached with a sane window).
const maxDepth = 8

// mapReduce summarizes in directly when it fits limit, otherwise in chunks.
func (p *Pool) mapReduce(ctx context.Context, j *job, sum Summarizer, in Input, limit, depth int) (Output, error) {
	if inputTokens(in) <= limit {
		return p.summarize(ctx, j, sum, in)
	}
	if depth >= maxDepth {
		return Output{}, fmt.Errorf("%w: still over the window after %d levels of merging", ErrContextLength, depth)
	}
	room := limit - tokens.Text(in.SystemPrompt) - tokens.Text(in.Instructions)
	if room < 3*in.MaxSummaryTokens {
		return Output{}, fmt.Errorf("%w: no room for messages beside the system prompt and instructions", ErrContextLength)
	}
	chunks := chunk(in.Messages, room)
	if len(chunks) < 2 && tokens.Text(in.PreviousSummary) > 0 {
		// The messages fit alone; it is the previous summary that tips it over: summarize
		// them alone and merge below.
		chunks = [][]schemas.Message{in.Messages}
	}
	j.log.Info().Int("chunks", len(chunks)).Int("chunk_tokens", room).Msg("input over the summarizer's window; summarizing in chunks")
	parts := make([]Output, len(chunks))
	if len(chunks) == 1 && in.PreviousSummary == "" && tokens.Messages(chunks[0]) >= tokens.Messages(in.Messages) {
		return Output{}, fmt.Errorf("%w: the messages cannot be cut to fit %d tokens", ErrContextLength, room)
	}
	for i, c := range chunks {
		part := in
		part.PreviousSummary = ""
		part.Messages = c
		part.Instructions = joinInstructions(in.Instructions,
			fmt.Sprintf("This is part %d of %d of the newly covered messages; summarize this part only.", i+1, len(chunks)))
		out, err := p.mapReduce(ctx, j, sum, part, limit, depth+1)
		if err != nil {
			return Output{}, fmt.Errorf("chunk %d of %d: %w", i+1, len(chunks), err)
		}
		parts[i] = out
	}
	if len(parts) == 1 && in.PreviousSummary == "" {
		return parts[0], nil
	}
	merge := in
	merge.Messages = make([]schemas.Message, len(parts))
	for i, part := range parts {
		merge.Messages[i] = schemas.Message{Role: schemas.RoleUser,
			Content: schemas.Text(fmt.Sprintf("[Summary of part %d of %d of the newly covered messages]\n\n%s", i+1, len(parts), part.Summary))}
	}
	merge.Instructions = joinInstructions(in.Instructions,
		"The transcript holds summaries of consecutive parts of the new messages, in order; merge them with the previous summary into one.")
	out, err := p.mapReduce(ctx, j, sum, merge, limit, depth+1)
	if err != nil {
		return Output{}, fmt.Errorf("merge of %d chunk summaries: %w", len(parts), err)
	}
	for _, part := range parts {
		out.Usage = addUsage(out.Usage, part.Usage)
	}
	return out, nil
}

// chunk splits msgs, in order, into runs of at most room tokens; a message larger than
// room is cut to its head and tail so it fits alone.
func chunk(msgs []schemas.Message, room int) [][]schemas.Message {
	var out [][]schemas.Message
	var cur []schemas.Message
	size := 0
	for _, m := range msgs {
		t := tokens.Message(&m)
		if t > room {
			m = cutToFit(m, room)
			t = tokens.Message(&m)
		}
		if size+t > room && len(cur) > 0 {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, m)
		size += t
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// cutNote marks what was cut so a message fits one summarizer request.
const cutNote = "cut so the summarizer can read it in one request"

// cutToFit shortens a message to about room tokens: its text, its reasoning and its
// tool calls' arguments each keep their head and tail, in proportion to their size.
func cutToFit(m schemas.Message, room int) schemas.Message {
	m.Tokens = 0
	chars := max(room*4-600, 400) // characters in all; room for markers and fixed costs
	text := utf8.RuneCountInString(m.Content.String())
	total := text + utf8.RuneCountInString(m.Reasoning)
	for _, tc := range m.ToolCalls {
		total += utf8.RuneCountInString(tc.Function.Arguments)
	}
	if total <= chars {
		return m
	}
	share := func(n int) (int, int) {
		keep := max(n*chars/total, 100)
		return keep / 2, keep - keep/2
	}
	h, tl := share(text)
	m = assemble.ApplyOverride(m, schemas.Override{KeepHead: h, KeepTail: tl, Note: cutNote})
	h, tl = share(utf8.RuneCountInString(m.Reasoning))
	m.Reasoning, _ = assemble.Truncate(m.Reasoning, h, tl, cutNote)
	if len(m.ToolCalls) > 0 {
		calls := slices.Clone(m.ToolCalls)
		for i := range calls {
			h, tl = share(utf8.RuneCountInString(calls[i].Function.Arguments))
			calls[i].Function.Arguments, _ = assemble.Truncate(calls[i].Function.Arguments, h, tl, cutNote)
		}
		m.ToolCalls = calls
	}
	return m
}

func addUsage(a, b *schemas.Usage) *schemas.Usage {
	if b == nil {
		return a
	}
	if a == nil {
		a = &schemas.Usage{}
	}
	return &schemas.Usage{PromptTokens: a.PromptTokens + b.PromptTokens, CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		TotalTokens: a.TotalTokens + b.TotalTokens}
}

// keepAlive calls InProgress on the job's request every interval until stop is called.
func (j *job) keepAlive(every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := j.d.InProgress(); err != nil {
					j.log.Warn().Err(err).Msg("in-progress ack")
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
