package summarizer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/tokens"
)

// PromptOverhead is what a summarization request costs besides its input, for a
// Summarizer that cannot size its own requests (see requestSizer): the summarizer's
// own prompt, the tags around each block and the model's formatting.
const PromptOverhead = 1500

// fitMargin is the share of the summarizer's window one request may fill, as counted
// (chars/4): chars/4 under-counts code and JSON, and the model counts its own tokens.
const fitMargin = 0.75

// messageOverhead is what planning a chunk adds to tokens.Message for each message:
// its tag and attributes in the transcript. It only plans: every chunk is then
// measured whole before it is sent.
const messageOverhead = 16

// labelOverhead is what the label of a summary costs when summaries are merged.
const labelOverhead = 16

// defaultSummaryTokens is the cap a Summarizer applies when Input.MaxSummaryTokens is
// not positive (llm and extractive both use 2,048).
const defaultSummaryTokens = 2048

// maxShrinks bounds how often a refused request is retried with a budget half the size
// of the request refused (the floor usually ends it first).
const maxShrinks = 10

// maxLevels bounds the levels of merging. Each level must shrink the summaries, so it
// is only a backstop.
const maxLevels = 32

// requestSizer is a Summarizer that can tell what a request for in takes of its model's
// window: everything it sends (its prompt, the instructions, the transcript's markup,
// the chat format) plus the completion tokens it reserves. *llm.Summarizer has it.
type requestSizer interface {
	RequestTokens(in Input) int
}

// requestTokens is the size of the request sum makes for in: what sum says, or an
// estimate (PromptOverhead, the summary's cap, the input and messageOverhead per
// message) for a Summarizer that cannot say.
func requestTokens(sum Summarizer, in Input) int {
	if rs, ok := sum.(requestSizer); ok {
		return rs.RequestTokens(in)
	}
	return PromptOverhead + in.MaxSummaryTokens + inputTokens(in) + messageOverhead*len(in.Messages)
}

// inputTokens is the size of a request's input, prompt overhead excluded.
func inputTokens(in Input) int {
	return tokens.Text(in.PreviousSummary) + tokens.Text(in.SystemPrompt) + tokens.Text(in.Instructions) + tokens.Messages(in.Messages)
}

// summarizeToFit summarizes in with sum so that no request exceeds fitMargin of the
// summarizer's window, counting everything a request holds (see requestTokens). Input
// too large for one request is split into chunks that fit, each chunk is summarized,
// and the chunk summaries are merged with the previous summary, in as many levels as it
// takes (map-reduce); every level must shrink the summaries. Nothing is dropped: a
// single message too large for a chunk is cut to its head and tail, with a marker.
//
// The window is the configured one, or the smaller one learned of the endpoint and
// model (see learnedWindow). The summary's cap is lowered until a request can merge two
// summaries, and a summarizer that has a compact form uses it when that keeps more of
// the cap (see fitCap). When the endpoint still refuses a request as too long
// (ErrContextLength), the window it names (or, when it names none, two thirds of the
// request refused) is learned and shared, and the summarization starts again with
// requests of at most fitMargin of it, so every retry sends strictly less. When the
// room a request leaves falls below what merging needs even with the smallest cap, it
// fails with ErrNothingFits, a permanent failure.
func (p *Pool) summarizeToFit(ctx context.Context, j *job, sum Summarizer, in Input, window int) (Output, error) {
	ep := endpointOf(sum)
	if learned := p.learnedWindow(ctx, j, ep); learned > 0 && learned < window {
		window = learned
	}
	budget := int(float64(window) * fitMargin)
	var lastErr error
	for range maxShrinks {
		f := &fitter{p: p, j: j, sum: sum, budget: budget}
		fitIn := f.fitCap(f.fitPrompt(in))
		if err := f.checkFloor(fitIn); err != nil {
			return Output{}, withLast(err, lastErr)
		}
		out, err := f.reduce(ctx, fitIn)
		if err == nil || errors.Is(err, ErrNothingFits) || !errors.Is(err, ErrContextLength) || f.refused == 0 {
			return out, withLast(err, lastErr)
		}
		lastErr = err
		learned := learnedFrom(err, f.refused)
		p.learnWindow(ctx, j, ep, learned, f.refused, err)
		budget = min(budget, int(float64(learned)*fitMargin), f.refused-1)
		j.log.Warn().Err(err).Int("refused_tokens", f.refused).Int("learned_window", learned).Int("request_tokens", budget).
			Msg("summarizer refused a request as too long; retrying with requests sized by the window it names")
	}
	return Output{}, fmt.Errorf("%w: refused %d times as too long, down to requests of %d tokens: %w: %w",
		ErrNothingFits, maxShrinks, budget, errPermanent, lastErr)
}

// fitPrompt cuts the agent's system prompt to a quarter of the budget, and leaves out
// pinned messages that would take more than that.
func (f *fitter) fitPrompt(in Input) Input {
	in.SystemPrompt = cutText(in.SystemPrompt, f.budget/4, "cut so the summarizer can read it beside the conversation")
	if len(in.Pinned) > 0 && tokens.Messages(in.Pinned) > f.budget/4 {
		// The agent's pinned messages would crowd out the conversation: the system
		// prompt alone (cut like above) stands for them, and the request no longer
		// starts like the agent's.
		in.Pinned = nil
	}
	return in
}

// minSummaryTokens is the smallest summary cap fitCap lowers a request to: below it a
// summary keeps too little to be worth writing, and nothing fits.
const minSummaryTokens = 128

// compacter is a Summarizer with a compact form: the same endpoint and model, a shorter
// prompt. *llm.Summarizer has it.
type compacter interface {
	Compact() Summarizer
}

// fitCap lowers in's summary cap to the largest with which a request still leaves room
// to merge two summaries of that cap, when the cap asked for leaves less; with a
// summarizer that has a compact form, the form that keeps the larger cap is used. The
// map-reduce then needs as many levels as it takes, and every summary it writes, the
// last included, is within the lowered cap.
func (f *fitter) fitCap(in Input) Input {
	asked := summaryTokens(in)
	most := f.capRoom(in)
	if most >= asked {
		return in
	}
	if c, ok := f.sum.(compacter); ok {
		short := &fitter{p: f.p, j: f.j, sum: c.Compact(), budget: f.budget}
		if m := short.capRoom(in); m > most {
			f.sum, most = short.sum, m
		}
	}
	if most >= asked || most < minSummaryTokens {
		return in // checkFloor says why nothing fits
	}
	f.j.log.Info().Int("max_summary_tokens", asked).Int("request_tokens", f.budget).Int("summary_tokens", most).
		Msg("summary cap lowered to fit the summarizer's window")
	in.MaxSummaryTokens = most
	return in
}

// capRoom is the largest summary cap S with which a request (the prompt, in's system
// prompt and instructions, the longest line a chunk adds) leaves room for two summaries
// of S with their labels: S ≤ (budget − prompt − 2 × (messageOverhead+labelOverhead)) / 3.
func (f *fitter) capRoom(in Input) int {
	probe := in
	probe.MaxSummaryTokens = 1
	base := f.budget - f.room(probe, longestLine(len(in.Messages))) - 1 // the request without messages, cap excluded
	// The cap's digits are in the prompt too: a few tokens of slack.
	return (f.budget - base - 2*(messageOverhead+labelOverhead) - 4) / 3
}

// longestLine is the longest instruction line a chunk or a merge of n messages adds.
func longestLine(n int) string {
	longest := max(len(partLine(n, n)), len(groupLine(n, n)), len(finalLine(true)))
	return strings.Repeat("x", longest)
}

// endpoint names a summarizer's endpoint and model, for the window learned of them.
type endpoint struct{ url, model string }

// endpointer is a Summarizer that can name its endpoint and model. *llm.Summarizer has
// it; the extractive one does not (it has no window to learn).
type endpointer interface {
	Endpoint() (baseURL, model string)
}

func endpointOf(sum Summarizer) endpoint {
	if e, ok := sum.(endpointer); ok {
		url, model := e.Endpoint()
		return endpoint{url, model}
	}
	return endpoint{}
}

// contextLimiter is the error of a refusal for length that says what the endpoint named
// of its window and of the request (see llm's ContextLimit).
type contextLimiter interface {
	ContextLimit() (window, requested int)
}

// learnedFrom is the window a refusal of a request of refused tokens teaches, as
// Compactor counts tokens: the window the endpoint named, scaled by how its count of the
// request compares with ours when it said both, never the request refused or more; two
// thirds of the request when it named no window (requests are then at most half of the
// one refused).
func learnedFrom(err error, refused int) int {
	var cl contextLimiter
	if !errors.As(err, &cl) {
		return refused * 2 / 3
	}
	window, requested := cl.ContextLimit()
	switch {
	case window <= 0:
		return refused * 2 / 3
	case requested > 0:
		window = int(int64(window) * int64(refused) / int64(requested))
	}
	return max(min(window, refused-1), 1)
}

// learnedWindow is the window on record for ep (0: none, or no endpoint, or no store).
// A store that cannot be read leaves the configured window.
func (p *Pool) learnedWindow(ctx context.Context, j *job, ep endpoint) int {
	if ep.url == "" || p.store == nil {
		return 0
	}
	lw, err := p.store.Windows().Get(ctx, ep.url, ep.model)
	if err != nil {
		// Said once a minute: the handle then rests (ErrWindowsUnavailable).
		ev := j.log.Warn()
		if errors.Is(err, jetstream.ErrWindowsUnavailable) {
			ev = j.log.Debug()
		}
		ev.Err(err).Msg("read the learned window of the summarizer; using the configured one")
		return 0
	}
	if lw == nil {
		return 0
	}
	return lw.Tokens
}

// learnWindow shares what a refusal taught of ep's window with every worker.
func (p *Pool) learnWindow(ctx context.Context, j *job, ep endpoint, window, refused int, err error) {
	if ep.url == "" || p.store == nil {
		return
	}
	lw := jetstream.LearnedWindow{Endpoint: ep.url, Model: ep.model, Tokens: window, RefusedTokens: refused, LearnedAt: p.now().UTC()}
	var cl contextLimiter
	if errors.As(err, &cl) {
		lw.StatedTokens, _ = cl.ContextLimit()
	}
	if _, err := p.store.Windows().Learn(ctx, lw); err != nil {
		j.log.Warn().Err(err).Msg("share the learned window of the summarizer; this job still uses it")
	}
}

// withLast adds the refusal that led to err, when err is ErrNothingFits after one.
func withLast(err, last error) error {
	if last == nil || !errors.Is(err, ErrNothingFits) {
		return err
	}
	return fmt.Errorf("%w; after the endpoint refused: %w", err, last)
}

// fitter is one try of summarizeToFit, at one request budget.
type fitter struct {
	p   *Pool
	j   *job
	sum Summarizer
	// budget is the most tokens one request may take, as requestTokens counts them.
	budget int
	// refused is the size of the last request the summarizer refused as too long.
	refused int
	usage   *schemas.Usage
}

func (f *fitter) cost(in Input) int { return requestTokens(f.sum, in) }

// nothingFits is a permanent ErrNothingFits.
func (f *fitter) nothingFits(format string, args ...any) error {
	return fmt.Errorf("%w: %s (requests of at most %d tokens): %w", ErrNothingFits, fmt.Sprintf(format, args...), f.budget, errPermanent)
}

// withoutPrevious is in without the previous summary, as text and as message: a chunk
// of the messages, or summaries merged without it. Such a request shares the agent's
// prefix only as far as the pinned messages.
func withoutPrevious(in Input) Input {
	in.PreviousSummary, in.SummaryMessage = "", nil
	return in
}

// summaryTokens is the summary's cap as a Summarizer applies it.
func summaryTokens(in Input) int {
	if in.MaxSummaryTokens > 0 {
		return in.MaxSummaryTokens
	}
	return defaultSummaryTokens
}

// The instructions added to a chunk: which part of the messages it holds, or that it
// holds summaries to merge.
func partLine(i, n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf("This is part %d of %d of the newly covered messages; summarize this part only.", i, n)
}

func groupLine(i, n int) string {
	return fmt.Sprintf("The transcript holds summaries of consecutive parts of the conversation, in order (group %d of %d); merge them into one summary that keeps the facts of each.", i, n)
}

// finalLine asks for the last merge, with the previous summary when there is one (a
// previous summary merged like a part is the first summary of the transcript).
func finalLine(withPrevious bool) string {
	if withPrevious {
		return "The transcript holds summaries of consecutive parts of the new messages, in order; merge them with the previous summary into one."
	}
	return "The transcript holds summaries of consecutive parts of the conversation, in order; merge them into one."
}

// room is what a request leaves for messages beside base (its system prompt and
// instructions, with the longest line any chunk adds): the budget less the request
// without messages and without a previous summary.
func (f *fitter) room(base Input, line string) int {
	probe := withoutPrevious(base)
	probe.Messages = nil
	probe.Instructions = joinInstructions(base.Instructions, line)
	return f.budget - f.cost(probe)
}

// checkFloor fails with ErrNothingFits when a request leaves too little room to merge
// two summaries, so merging could never shrink them.
func (f *fitter) checkFloor(in Input) error {
	room := f.room(in, longestLine(len(in.Messages)))
	if floor := 2 * (summaryTokens(in) + messageOverhead + labelOverhead); room < floor {
		return f.nothingFits("a request leaves %d tokens for input beside the prompt and a %d-token summary, fewer than the %d that merging two summaries needs",
			room, summaryTokens(in), floor)
	}
	return nil
}

// call summarizes one request.
func (f *fitter) call(ctx context.Context, in Input) (Output, error) {
	out, err := f.p.summarize(ctx, f.j, f.sum, in)
	if err != nil {
		if errors.Is(err, ErrContextLength) {
			f.refused = f.cost(in)
		}
		return Output{}, err
	}
	f.usage = addUsage(f.usage, out.Usage)
	out.Usage = f.usage
	return out, nil
}

// reduce summarizes in in one request when it fits, otherwise its messages in chunks
// (without the previous summary), then merges.
func (f *fitter) reduce(ctx context.Context, in Input) (Output, error) {
	if f.cost(in) <= f.budget {
		return f.call(ctx, in)
	}
	base := withoutPrevious(in)
	chunks, err := f.pack(base, in.Messages, partLine)
	if err != nil {
		return Output{}, err
	}
	f.j.log.Info().Int("chunks", len(chunks)).Int("request_tokens", f.budget).Msg("input over the summarizer's window; summarizing in chunks")
	parts := make([]piece, len(chunks))
	for i, c := range chunks {
		out, err := f.call(ctx, c)
		if err != nil {
			return Output{}, fmt.Errorf("chunk %d of %d: %w", i+1, len(chunks), err)
		}
		parts[i] = piece{out: out}
	}
	return f.merge(ctx, in, parts)
}

// piece is a summary waiting to be merged; previous marks the previous summary, when it
// had to be merged like a part because it did not fit beside the others.
type piece struct {
	out      Output
	previous bool
}

// merge merges the summaries of consecutive parts with in's previous summary: in one
// request when they fit, otherwise level by level, each level merging groups of at least
// two summaries, until they do. A level that does not shrink them fails.
func (f *fitter) merge(ctx context.Context, in Input, parts []piece) (Output, error) {
	prev := in.PreviousSummary
	base := withoutPrevious(in)
	base.Messages = nil
	half := max(f.room(base, groupLine(len(parts)+1, len(parts)+1))/2-labelOverhead-messageOverhead, 1)
	for level := 1; ; level++ {
		if prev == "" && len(parts) == 1 && !parts[0].previous {
			return parts[0].out, nil
		}
		final := in // with the previous summary, as long as it was not merged like a part
		if prev == "" {
			final = withoutPrevious(in)
		}
		final.Messages = labelled(parts, 0)
		final.Instructions = joinInstructions(in.Instructions, finalLine(prev != ""))
		if f.cost(final) <= f.budget {
			out, err := f.call(ctx, final)
			if err != nil {
				return Output{}, fmt.Errorf("merge of %d summaries: %w", len(parts), err)
			}
			return out, nil
		}
		if level > maxLevels {
			return Output{}, f.nothingFits("%d summaries still over the window after %d levels of merging", len(parts), maxLevels)
		}
		if prev != "" && (len(parts) <= 1 || tokens.Text(prev) > half) {
			// The previous summary does not fit beside the others: merge it like a part.
			parts = append([]piece{{out: Output{Summary: prev}, previous: true}}, parts...)
			prev = ""
		}
		items := labelled(parts, half)
		chunks, err := f.pack(base, items, groupLine)
		if err != nil {
			return Output{}, err
		}
		f.j.log.Info().Int("level", level).Int("summaries", len(parts)).Int("groups", len(chunks)).Msg("merging chunk summaries")
		merged := make([]piece, len(chunks))
		for i, c := range chunks {
			out, err := f.call(ctx, c)
			if err != nil {
				return Output{}, fmt.Errorf("merge level %d, group %d of %d: %w", level, i+1, len(chunks), err)
			}
			merged[i] = piece{out: out}
		}
		before, after := summaryTokensOf(parts), summaryTokensOf(merged)
		if after >= before {
			return Output{}, f.nothingFits("merge level %d turned %d summaries of %d tokens into %d of %d tokens: the summaries do not shrink",
				level, len(parts), before, len(merged), after)
		}
		parts = merged
	}
}

func summaryTokensOf(parts []piece) int {
	n := 0
	for _, p := range parts {
		n += tokens.Text(p.out.Summary)
	}
	return n
}

// labelled turns summaries into transcript messages, each with a label saying what it
// summarizes. With most > 0, a summary over most tokens is split at line ends into
// pieces of at most most tokens, so any two fit one request together.
func labelled(parts []piece, most int) []schemas.Message {
	var out []schemas.Message
	for i, p := range parts {
		label := fmt.Sprintf("[Summary of part %d of %d of the newly covered messages", i+1, len(parts))
		if p.previous {
			label = "[The previous summary: the conversation before the newly covered messages"
		}
		texts := []string{p.out.Summary}
		if most > 0 {
			texts = splitText(p.out.Summary, most)
		}
		for k, t := range texts {
			l := label
			if len(texts) > 1 {
				l += fmt.Sprintf(", piece %d of %d", k+1, len(texts))
			}
			out = append(out, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(l + "]\n\n" + t)})
		}
	}
	return out
}

// splitText splits s into pieces of at most most tokens, at line ends where it can, at
// rune boundaries where a line is longer. Nothing is lost.
func splitText(s string, most int) []string {
	if tokens.Text(s) <= most {
		return []string{s}
	}
	limit := most * 4 // runes
	var out []string
	var cur strings.Builder
	n := 0
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
			n = 0
		}
	}
	for line := range strings.SplitAfterSeq(s, "\n") {
		for line != "" {
			r := utf8.RuneCountInString(line)
			if n+r <= limit {
				cur.WriteString(line)
				n += r
				break
			}
			if n > 0 {
				flush()
				continue
			}
			head := string([]rune(line)[:limit])
			out = append(out, head)
			line = line[len(head):]
		}
	}
	flush()
	return out
}

// pack splits msgs, in order, into requests like base, each with line(i, n) added to
// its instructions, that fit the budget. Chunks are planned with tokens.Message plus
// messageOverhead, then each is measured whole (sized with the longest line) and
// trimmed until it fits; a message that does not fit alone is cut to its head and tail.
func (f *fitter) pack(base Input, msgs []schemas.Message, line func(i, n int) string) ([]Input, error) {
	widest := line(len(msgs), len(msgs))
	room := f.room(base, widest)
	if room <= messageOverhead {
		return nil, f.nothingFits("no room for messages beside the prompt, the system prompt and the instructions")
	}
	probe := withoutPrevious(base)
	probe.Instructions = joinInstructions(base.Instructions, widest)
	plan := func(m *schemas.Message) int { return tokens.Message(m) + messageOverhead }
	var chunks [][]schemas.Message
	for i := 0; i < len(msgs); {
		k, size := i, 0
		for k < len(msgs) {
			t := plan(&msgs[k])
			if k > i && size+t > room {
				break
			}
			size += t
			k++
		}
		c := slices.Clone(msgs[i:k])
		if len(c) == 1 && size > room {
			c[0] = cutToFit(c[0], room-messageOverhead)
		}
		for {
			probe.Messages = c
			cost := f.cost(probe)
			if cost <= f.budget {
				break
			}
			over := cost - f.budget
			if len(c) > 1 {
				// Drop about as many messages from the end as the excess, at least one.
				drop, n := 0, 0
				for drop < len(c)-1 && n < over {
					n += plan(&c[len(c)-1-drop])
					drop++
				}
				c = c[:len(c)-max(drop, 1)]
				continue
			}
			t := tokens.Message(&c[0])
			cut := cutToFit(c[0], t-over-messageOverhead)
			if tokens.Message(&cut) >= t {
				return nil, f.nothingFits("a message cannot be cut to fit")
			}
			c[0] = cut
		}
		chunks = append(chunks, c)
		i += len(c)
	}
	out := make([]Input, len(chunks))
	for i, c := range chunks {
		out[i] = withoutPrevious(base)
		out[i].Messages = c
		out[i].Instructions = joinInstructions(base.Instructions, line(i+1, len(chunks)))
	}
	return out, nil
}

// cutText shortens s to about most tokens, keeping its head and tail, with a marker.
func cutText(s string, most int, note string) string {
	if tokens.Text(s) <= most {
		return s
	}
	chars := max(most*4-200, 400)
	out, _ := assemble.Truncate(s, chars/2, chars-chars/2, note)
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
		TotalTokens: a.TotalTokens + b.TotalTokens, CachedTokens: a.CachedTokens + b.CachedTokens}
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
