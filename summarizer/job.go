package summarizer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/pretrim"
	"github.com/compactor/compactor/summarizer/split"
)

// loaded is what a job read before summarizing.
type loaded struct {
	cur     *schemas.Result
	rev     uint64
	pinned  []schemas.Entry // pinned forever: cur.PinnedSeqs without cur.KeptSeqs
	kept    []schemas.Entry // kept ahead of the summary by the last split: cur.KeptSeqs
	entries []schemas.Entry // everything from the current tail start
	leading bool            // entries start at the conversation's first message
	lastSeq uint64
}

// process runs steps 2–6 of the job protocol. A nil error means the request was acked.
func (p *Pool) process(ctx context.Context, j *job) error {
	conv := j.req.Conversation
	// 2. The current value, from the leader. Holding this request's sequence means the
	// work was done before a crash: report it and ack.
	cur, rev, err := p.store.GetResult(ctx, conv, true)
	if err != nil {
		var newer *schemas.ErrNewerSchema
		if errors.As(err, &newer) {
			return fmt.Errorf("%w: %v", errPermanent, err)
		}
		return err
	}
	if cur != nil && cur.RequestSeq == j.seq {
		j.log.Info().Uint64("generation", cur.Generation).Msg("request already done before a restart; acking")
		return p.finish(ctx, j, cur, 0, policy.Settings{}, nil)
	}
	s, err := p.policies.Settings(ctx, conv)
	if err != nil {
		if errors.Is(err, policy.ErrPolicy) {
			return fmt.Errorf("%w: %v", errPermanent, err)
		}
		return err
	}
	sum, err := p.summarizers(s)
	if err != nil {
		return fmt.Errorf("%w: summarizer of profile %q: %v", errPermanent, s.Profile, err)
	}
	count, err := p.cfg.counter(s.Tokenizer)
	if err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventStarted, Generation: genOf(cur)})

	// 3. Load, split, pre-trim, summarize.
	ld, err := p.load(ctx, conv, cur, rev)
	if err != nil {
		return err
	}
	pl, err := p.plan(ld, escalate(s, j.req.Escalation), count)
	if err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	for _, sk := range pl.skipped {
		j.log.Warn().Uint64("seq", sk.Seq).Str("reason", sk.Reason).Msg("message not summarized")
	}
	before := assemble.Assemble(assemble.Input{Value: ld.cur, Pinned: sortedBySeq(ld.pinned, ld.kept), Tail: ld.entries}, assemble.Options{Counter: count})
	if len(pl.covered) == 0 {
		return p.decline(ctx, j, ld, before.Tokens, before.Tokens, "nothing to compact: every message is pinned, kept or must stay in the tail")
	}
	b := s.Budget()
	in := Input{
		Conversation:    conv,
		PreviousSummary: summaryOf(ld.cur),
		SystemPrompt:    pl.systemPrompt,
		Messages:        pretrim.TotalBudget(pretrim.ToolOutputs(pl.covered, s.ToolOutputCap), s.ToolOutputBudget),
		Instructions:    joinInstructions(s.Instructions, j.req.Instructions),
		// Ask for less than the cap: the model counts its own tokens, the guard counts
		// chars/4, and a summary a little over the cap would be declined.
		MaxSummaryTokens: b.SummaryCap() * 85 / 100,
	}
	out, err := p.summarizeToFit(ctx, j, sum, in, s.SummarizerContextWindow)
	if err != nil {
		lastTry := j.attempt >= uint64(p.cfg.MaxAttempts) || errors.Is(err, errPermanent) || (p.retryable != nil && !p.retryable(err))
		if !errors.Is(err, ErrNothingFits) && (!lastTry || before.Tokens < b.HardLimitTokens()) {
			return err
		}
		// The LLM is down and the context is past the hard limit, or nothing fits the
		// summarizer's window: keep the bound with the deterministic summary, and still
		// report the failure.
		j.log.Warn().Err(err).Msg("summarizer failed for good (nothing fits its window, or the last attempt past the hard limit); writing the fallback summary")
		fb, ferr := p.fallback.Summarize(ctx, in)
		if ferr != nil {
			return fmt.Errorf("%w; fallback summary: %v", err, ferr)
		}
		_ = p.store.PublishDead(ctx, schemas.DeadLetter{Request: j.req, Error: err.Error() + " (fallback summary written)", Attempts: j.attempt, At: p.now()})
		out = fb
		out.Fallback = true
		j.fallbackFor = err
	}

	// 4. Guard.
	next := p.result(j, ld, pl, out, before, s)
	after := assemble.Assemble(assemble.Input{Value: next, Pinned: pl.pinned, Tail: pl.tail}, assemble.Options{Counter: count})
	next.TokensAfter, next.MessagesAfter = after.Tokens, len(after.Messages)
	if st, limit := count.Count(out.Summary), b.SummaryCap(); st > limit {
		return p.decline(ctx, j, ld, before.Tokens, after.Tokens,
			fmt.Sprintf("summary has %d tokens, over max_summary_tokens %d", st, limit))
	}
	if float64(after.Tokens) > float64(before.Tokens)*(1-s.MinProgress) {
		return p.decline(ctx, j, ld, before.Tokens, after.Tokens,
			fmt.Sprintf("context would shrink from %d to %d tokens, less than min_progress %g", before.Tokens, after.Tokens, s.MinProgress))
	}

	// 5. Compare-and-set on the revision read in step 2.
	if _, err := p.store.PutResult(ctx, next, ld.rev); err != nil {
		if !errors.Is(err, jetstream.ErrRevisionMismatch) {
			return err
		}
		now, _, rerr := p.store.GetResult(ctx, conv, true)
		if rerr != nil {
			return rerr
		}
		if now == nil || now.RequestSeq != j.seq {
			return fmt.Errorf("compaction value changed while summarizing; result discarded: %w", err)
		}
		next = now // our own write, acknowledged before a lost reply
	}
	j.log.Info().Uint64("generation", next.Generation).Int("tokens_before", next.TokensBefore).
		Int("tokens_after", next.TokensAfter).Uint64("tail_start_seq", next.TailStartSeq).
		Str("strategy", next.Strategy).Bool("fallback", next.Fallback).Msg("compacted")
	// 6. Ack, report, re-evaluate.
	return p.finish(ctx, j, next, ld.lastSeq, s, count)
}

func joinInstructions(parts ...string) string {
	var out []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n\n")
}

func genOf(r *schemas.Result) uint64 {
	if r == nil {
		return 0
	}
	return r.Generation
}

func summaryOf(r *schemas.Result) string {
	if r == nil {
		return ""
	}
	return r.Summary
}

// sortedBySeq merges entry lists into one in sequence order.
func sortedBySeq(lists ...[]schemas.Entry) []schemas.Entry {
	var out []schemas.Entry
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortFunc(out, func(a, b schemas.Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// load reads the pinned and kept messages and everything from the current tail start.
func (p *Pool) load(ctx context.Context, conv string, cur *schemas.Result, rev uint64) (*loaded, error) {
	ld := &loaded{cur: cur, rev: rev}
	from := uint64(1)
	if cur != nil && cur.TailStartSeq > 0 {
		from = cur.TailStartSeq
	}
	ld.leading = cur == nil || cur.CoveredThroughSeq == 0
	if cur != nil {
		pinned, err := p.store.LoadPinned(ctx, cur.PinnedSeqs)
		if err != nil {
			return nil, err
		}
		for _, e := range pinned {
			if slices.Contains(cur.KeptSeqs, e.Seq) {
				ld.kept = append(ld.kept, e)
			} else {
				ld.pinned = append(ld.pinned, e)
			}
		}
	}
	msgs, err := p.store.LoadConversation(ctx, conv, from, 0)
	if err != nil {
		return nil, fmt.Errorf("load conversation: %w", err)
	}
	ld.entries = make([]schemas.Entry, len(msgs))
	for i, m := range msgs {
		ld.entries[i] = m.Entry()
	}
	if n := len(msgs); n > 0 {
		ld.lastSeq = msgs[n-1].Seq
	} else if cur != nil {
		ld.lastSeq = cur.TailStartSeq - 1
	}
	return ld, nil
}

// plan is the split of one job.
type plan struct {
	tailStartSeq uint64
	tail         []schemas.Entry    // the new verbatim tail
	pinned       []schemas.Entry    // pinned and kept entries of the new value, by sequence
	keptSeqs     []uint64           // the kept part of pinned
	overrides    []schemas.Override // the strategy's truncations of kept messages
	covered      []schemas.Message  // the newly covered messages the summarizer sees
	skipped      []rounds.Skipped   // covered entries the summarizer does not see, and why
	systemPrompt string
}

// escalate makes the split more aggressive for a conversation still over budget right
// after a compaction: level 1 halves what the strategy keeps, level 2 summarizes
// everything (strategy all).
func escalate(s policy.Settings, level int) policy.Settings {
	switch {
	case level >= 2:
		s.Strategy = split.StrategyAll
	case level == 1:
		s.KeepLastN = max(s.KeepLastN/2, 1)
		s.ToolRounds = max(s.ToolRounds/2, 1)
		s.UserMessageTokens /= 2
		s.TokenFraction /= 2
		s.RecentTurns = max(s.RecentTurns/2, 1)
		s.Target /= 2 // halves the tail budget
	}
	return s
}

// plan runs the conversation's strategy over the kept messages and everything from
// the tail start, and sorts every entry into pinned, kept, covered or tail.
func (p *Pool) plan(ld *loaded, s policy.Settings, count tokens.Counter) (plan, error) {
	var pl plan
	cand := append(slices.Clone(ld.kept), ld.entries...)
	flags := make([]bool, len(cand))
	copy(flags[len(ld.kept):], split.Pinned(ld.entries, ld.leading))
	knobs := split.DefaultKnobs()
	knobs.KeepLastN, knobs.ToolRounds, knobs.UserMessageTokens = s.KeepLastN, s.ToolRounds, s.UserMessageTokens
	knobs.TokenFraction, knobs.RecentTurns = s.TokenFraction, s.RecentTurns
	sp, err := split.Apply(s.Strategy, split.Input{Entries: cand, Pinned: flags, Carried: len(ld.kept),
		OtherPinnedTokens: tokens.EntriesWith(count, ld.pinned), Budget: s.Budget(), Knobs: knobs, Counter: count})
	if err != nil {
		return pl, err
	}
	keep := make(map[int]bool, len(sp.Keep))
	for _, i := range sp.Keep {
		keep[i] = true
	}
	tailStart := sp.TailStart // never among the carried messages (split.Input.Carried)
	pl.pinned = slices.Clone(ld.pinned)
	var covered []schemas.Entry
	for i := 0; i < tailStart; i++ {
		switch {
		case flags[i]:
			pl.pinned = append(pl.pinned, cand[i])
		case keep[i] && cand[i].Err == nil:
			pl.pinned = append(pl.pinned, cand[i])
			pl.keptSeqs = append(pl.keptSeqs, cand[i].Seq)
		default:
			covered = append(covered, cand[i])
		}
	}
	pl.pinned = sortedBySeq(pl.pinned)
	pl.tail = cand[tailStart:]
	if tailStart < len(cand) {
		pl.tailStartSeq = cand[tailStart].Seq
	} else {
		pl.tailStartSeq = ld.lastSeq + 1
	}
	pl.overrides = sp.Overrides
	// The summarizer sees the same messages a reader would: orphans, invalid entries
	// and abandoned rounds are reported, not summarized.
	kept, skipped := rounds.Normalize(covered)
	pl.skipped = skipped
	for _, e := range kept {
		pl.covered = append(pl.covered, e.Message.StripMetadata())
	}
	for _, e := range pl.pinned {
		if e.Err == nil && e.Message.Role == schemas.RoleSystem && !e.Message.Pinned() {
			if pl.systemPrompt != "" {
				pl.systemPrompt += "\n\n"
			}
			pl.systemPrompt += e.Message.Content.String()
		}
	}
	return pl, nil
}

// summarize calls one summarizer, telling JetStream the job is alive while it works.
func (p *Pool) summarize(ctx context.Context, j *job, sum Summarizer, in Input) (Output, error) {
	stop := j.keepAlive(p.cfg.InProgressEvery)
	defer stop()
	out, err := sum.Summarize(ctx, in)
	if err != nil {
		return Output{}, err
	}
	if strings.TrimSpace(out.Summary) == "" {
		return Output{}, errors.New("summarizer returned an empty summary")
	}
	return out, nil
}

// result builds the next value from the current one.
func (p *Pool) result(j *job, ld *loaded, pl plan, out Output, before assemble.Context, s policy.Settings) *schemas.Result {
	next := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: j.req.Conversation}
	if ld.cur != nil {
		next.Unknown = ld.cur.Unknown
		next.LLMBaseGeneration = ld.cur.LLMBaseGeneration
	}
	next.Generation = genOf(ld.cur) + 1
	next.Summary = out.Summary
	next.SummaryRole = schemas.Role(s.SummaryRole)
	next.TailStartSeq = pl.tailStartSeq
	next.CoveredThroughSeq = next.TailStartSeq - 1
	for _, e := range pl.pinned {
		next.PinnedSeqs = append(next.PinnedSeqs, e.Seq)
	}
	next.PinnedSeqs = slices.Compact(next.PinnedSeqs)
	next.KeptSeqs = pl.keptSeqs
	// The split's overrides are the whole answer for kept messages: an old truncation
	// of a message kept again, or summarized now, does not carry over.
	reconsidered := map[uint64]bool{}
	for _, e := range ld.kept {
		reconsidered[e.Seq] = true
	}
	if ld.cur != nil {
		for _, o := range ld.cur.Overrides {
			if !reconsidered[o.Seq] && (o.Seq >= next.TailStartSeq || slices.Contains(next.PinnedSeqs, o.Seq)) {
				next.Overrides = append(next.Overrides, o)
			}
		}
	}
	next.Overrides = append(next.Overrides, pl.overrides...)
	next.Strategy = s.Strategy
	next.Trigger = j.req.Trigger
	next.Reason = j.req.Reason
	next.RequestID = j.req.RequestID
	next.RequestSeq = j.seq
	next.Fallback = out.Fallback
	if !out.Fallback {
		next.LLMBaseGeneration = next.Generation
	}
	next.Model = out.Model
	next.PromptHash = out.PromptHash
	next.Usage = out.Usage
	next.TokensBefore = before.Tokens
	next.MessagesBefore = len(before.Messages)
	next.LoadedThroughSeq = ld.lastSeq
	if j.req.Escalation > 0 {
		next.Reason = fmt.Sprintf("%s (escalation %d)", next.Reason, j.req.Escalation)
	}
	next.CreatedAt = p.now().UTC()
	return next
}

// decline records that this state of the conversation cannot be compacted usefully, so
// triggers wait for it to grow, then acks.
func (p *Pool) decline(ctx context.Context, j *job, ld *loaded, before, after int, reason string) error {
	var next schemas.Result
	if ld.cur != nil {
		next = *ld.cur
	} else {
		next = schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: j.req.Conversation,
			TailStartSeq: 1, TokensBefore: before, TokensAfter: before, CreatedAt: p.now().UTC()}
	}
	next.DeclinedAtSeq = ld.lastSeq
	if _, err := p.store.PutResult(ctx, &next, ld.rev); err != nil && !errors.Is(err, jetstream.ErrRevisionMismatch) {
		return err
	}
	j.log.Info().Str("reason", reason).Int("tokens_before", before).Int("tokens_after", after).Msg("compaction declined")
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack declined request: %w", err)
	}
	p.event(ctx, j, schemas.Event{Type: schemas.EventDeclined, Generation: next.Generation,
		TokensBefore: before, TokensAfter: after, Error: reason})
	return nil
}

// finish acks the request (freeing the conversation's slot), publishes completed and,
// when loadedThrough > 0, queues another compaction if messages that arrived meanwhile
// put the conversation over its threshold again.
func (p *Pool) finish(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64, s policy.Settings, count tokens.Counter) error {
	if err := j.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("ack completed request: %w", err)
	}
	ev := schemas.Event{Type: schemas.EventCompleted, Generation: r.Generation,
		TokensBefore: r.TokensBefore, TokensAfter: r.TokensAfter}
	if j.fallbackFor != nil {
		ev.Error = "summarizer failed, fallback summary written: " + j.fallbackFor.Error()
	}
	p.event(ctx, j, ev)
	if loadedThrough > 0 {
		p.reevaluate(ctx, j, r, loadedThrough, s, count)
	}
	return nil
}

// reevaluate reads what arrived after the job loaded the conversation and queues the
// next request when the context is over the threshold again and no tool call is open.
func (p *Pool) reevaluate(ctx context.Context, j *job, r *schemas.Result, loadedThrough uint64, s policy.Settings, count tokens.Counter) {
	conv := j.req.Conversation
	tail, err := p.store.LoadEntries(ctx, conv, r.TailStartSeq, 0)
	if err != nil {
		j.log.Warn().Err(err).Msg("re-evaluate after compaction")
		return
	}
	var newer []schemas.Entry
	for _, e := range tail {
		if e.Seq > loadedThrough {
			newer = append(newer, e)
		}
	}
	if len(newer) == 0 || len(rounds.Pending(tail)) > 0 {
		return
	}
	threshold := s.Budget().ThresholdTokens()
	total := r.TokensAfter + tokens.EntriesWith(count, newer)
	if total < threshold {
		return
	}
	level := j.req.Escalation + 1
	if level > schemas.MaxEscalation {
		j.log.Warn().Int("tokens", total).Msg("still over the threshold after the most aggressive compaction; waiting for the trigger")
		return
	}
	req := schemas.Request{
		RequestID: schemas.NewRequestID(), Conversation: conv, Trigger: schemas.TriggerBudget, Escalation: level,
		Reason:      fmt.Sprintf("re-evaluation after generation %d: %d tokens ≥ threshold %d", r.Generation, total, threshold),
		RequestedAt: p.now().UTC(), UpToSeq: newer[len(newer)-1].Seq,
	}
	if _, err := p.store.Enqueue(ctx, req); err != nil && !errors.Is(err, jetstream.ErrRequestPending) {
		j.log.Warn().Err(err).Msg("queue compaction after re-evaluation")
		return
	}
	j.log.Info().Int("tokens", total).Int("escalation", level).Msg("still over the threshold after compaction; queued a more aggressive one")
}
