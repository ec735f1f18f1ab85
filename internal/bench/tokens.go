package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/pretrim"
	"github.com/compactor/compactor/summarizer/split"
)

// TokenSimConfig shapes the token economics simulation.
type TokenSimConfig struct {
	Seed     uint64
	Sessions int
	Turns    int
	// Window is the agent model's context window; the policy's defaults apply to it.
	Window int
	// SummarizerDelay is how long one summarization takes, for the latency figures.
	SummarizerDelay time.Duration
	// TurnInterval is how long one agent turn takes (model call and tools); 0: 3s.
	TurnInterval time.Duration
}

// TokenReport is what compaction saves an agent, per session (means over the sessions).
type TokenReport struct {
	Sessions     int    `json:"sessions"`
	Turns        int    `json:"turns"`
	Window       int    `json:"window"`
	Strategy     string `json:"strategy"`
	SummaryModel string `json:"summary_model"`
	// Without is the cumulative input tokens when every turn sends the whole history.
	Without float64 `json:"without"`
	// With is the agent's cumulative input tokens with the default strategy, compacting
	// inline at the threshold; SummarizerIn and SummarizerOut the summarizer's own.
	With          float64 `json:"with"`
	SummarizerIn  float64 `json:"summarizer_in"`
	SummarizerOut float64 `json:"summarizer_out"`
	Compactions   float64 `json:"compactions"`
	// Reduction is Without ÷ (With + SummarizerIn + SummarizerOut); SummarizerShare is
	// (SummarizerIn + SummarizerOut) ÷ that same total.
	Reduction       float64         `json:"reduction"`
	SummarizerShare float64         `json:"summarizer_share"`
	Strategies      []StrategyTotal `json:"strategies"`
	// Ahead is the default strategy compacting ahead of time (soft threshold) instead.
	Ahead StrategyTotal `json:"ahead_of_time"`
	// Added latency, over the turns on which a compaction was due (inline: the turn
	// that crossed the threshold waits for the summarizer; ahead of time: the turn
	// that crossed the soft threshold starts it in the background, and a turn waits
	// only if it reaches the threshold before the result is in).
	InlineAddedP50Ms float64 `json:"inline_added_p50_ms"`
	InlineAddedP99Ms float64 `json:"inline_added_p99_ms"`
	AheadAddedP50Ms  float64 `json:"ahead_added_p50_ms"`
	AheadAddedP99Ms  float64 `json:"ahead_added_p99_ms"`
	// CurveWithout and CurveWith are the cumulative input tokens after each turn (means
	// over the sessions), the token curve's two lines.
	CurveWithout []float64 `json:"curve_without"`
	CurveWith    []float64 `json:"curve_with"`
}

// StrategyTotal is one way of compacting, over the same sessions.
type StrategyTotal struct {
	Strategy        string  `json:"strategy"`
	With            float64 `json:"with"`
	SummarizerIn    float64 `json:"summarizer_in"`
	SummarizerOut   float64 `json:"summarizer_out"`
	Compactions     float64 `json:"compactions"`
	Reduction       float64 `json:"reduction"`
	SummarizerShare float64 `json:"summarizer_share"`
}

// summaryLength is the summary model: a summary is 8% of the tokens it summarizes (the
// previous summary and the newly covered messages), at least 400 tokens and at most
// the policy's cap, as summaries of agent transcripts by current models run.
func summaryLength(input, limit int) int {
	return min(max(input*8/100, 400), limit)
}

// session is one generated agent session: a system prompt and one unit per turn.
type session struct {
	system schemas.Entry
	turns  [][]schemas.Entry
}

// turnPool is every unit (a single message or a whole tool round) of the corpus,
// system messages left out: what one agent turn adds to the context.
func turnPool(c *Corpus) (units [][]schemas.Message, systems []schemas.Message) {
	for _, f := range c.Files {
		es := make([]schemas.Entry, len(f))
		for i, m := range f {
			es[i] = schemas.Entry{Seq: uint64(i + 1), Message: m.Message}
		}
		for _, u := range rounds.Units(es) {
			if es[u.Start].Message.Role == schemas.RoleSystem {
				systems = append(systems, es[u.Start].Message)
				continue
			}
			if !u.Complete {
				continue
			}
			var msgs []schemas.Message
			for _, e := range es[u.Start:u.End] {
				// The estimate, counted once: a producer's count is what every count
				// uses, so the replays count each message in O(1), with the same result.
				m := e.Message
				m.Tokens = tokens.Message(&m)
				msgs = append(msgs, m)
			}
			units = append(units, msgs)
		}
	}
	return units, systems
}

// sessions generates n sessions of turns turns, seeded.
func sessions(c *Corpus, seed uint64, n, turns int) []session {
	units, systems := turnPool(c)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]session, n)
	for s := range out {
		seq := uint64(1)
		sys := schemas.Message{Role: schemas.RoleSystem, Content: schemas.Text("You are a coding agent.")}
		if len(systems) > 0 {
			sys = systems[rng.IntN(len(systems))]
		}
		out[s].system = schemas.Entry{Seq: seq, Message: sys}
		for range turns {
			u := units[rng.IntN(len(units))]
			turn := make([]schemas.Entry, len(u))
			for i, m := range u {
				seq++
				turn[i] = schemas.Entry{Seq: seq, Message: m}
			}
			out[s].turns = append(out[s].turns, turn)
		}
	}
	return out
}

// simulateTokens replays the sessions without compaction, with each strategy inline at
// the threshold, and with the default strategy ahead of time.
func simulateTokens(c *Corpus, cfg TokenSimConfig) TokenReport {
	if cfg.TurnInterval == 0 {
		cfg.TurnInterval = 3 * time.Second
	}
	ss := sessions(c, cfg.Seed, cfg.Sessions, cfg.Turns)
	base := policy.Defaults()
	base.ContextWindow = cfg.Window
	rep := TokenReport{Sessions: cfg.Sessions, Turns: cfg.Turns, Window: cfg.Window, Strategy: base.Strategy,
		SummaryModel: "8% of the summarized tokens, at least 400, at most the cap",
		CurveWithout: make([]float64, cfg.Turns), CurveWith: make([]float64, cfg.Turns)}
	n := float64(len(ss))
	var inlineAdded, aheadAdded []time.Duration
	for _, strategy := range split.Strategies {
		s := base
		s.Strategy = strategy
		var tot StrategyTotal
		tot.Strategy = strategy
		for _, se := range ss {
			r := replay(se, s, cfg, false)
			tot.With += float64(r.agent) / n
			tot.SummarizerIn += float64(r.sumIn) / n
			tot.SummarizerOut += float64(r.sumOut) / n
			tot.Compactions += float64(r.compactions) / n
			if strategy == base.Strategy {
				rep.Without += float64(r.without) / n
				for t := range cfg.Turns {
					rep.CurveWithout[t] += float64(r.curveWithout[t]) / n
					rep.CurveWith[t] += float64(r.curveWith[t]) / n
				}
				inlineAdded = append(inlineAdded, r.added...)
			}
		}
		tot.finish(rep.Without)
		rep.Strategies = append(rep.Strategies, tot)
	}
	ahead := base
	ahead.SoftThreshold = 0.6
	rep.Ahead.Strategy = base.Strategy + " (soft threshold 0.6)"
	for _, se := range ss {
		r := replay(se, ahead, cfg, true)
		rep.Ahead.With += float64(r.agent) / n
		rep.Ahead.SummarizerIn += float64(r.sumIn) / n
		rep.Ahead.SummarizerOut += float64(r.sumOut) / n
		rep.Ahead.Compactions += float64(r.compactions) / n
		aheadAdded = append(aheadAdded, r.added...)
	}
	rep.Ahead.finish(rep.Without)
	for _, t := range rep.Strategies {
		if t.Strategy == base.Strategy {
			rep.With, rep.SummarizerIn, rep.SummarizerOut, rep.Compactions = t.With, t.SummarizerIn, t.SummarizerOut, t.Compactions
			rep.Reduction, rep.SummarizerShare = t.Reduction, t.SummarizerShare
		}
	}
	rep.InlineAddedP50Ms, rep.InlineAddedP99Ms = ms(pct(inlineAdded, 50)), ms(pct(inlineAdded, 99))
	rep.AheadAddedP50Ms, rep.AheadAddedP99Ms = ms(pct(aheadAdded, 50)), ms(pct(aheadAdded, 99))
	return rep
}

func (t *StrategyTotal) finish(without float64) {
	total := t.With + t.SummarizerIn + t.SummarizerOut
	if total > 0 {
		t.Reduction = without / total
		t.SummarizerShare = (t.SummarizerIn + t.SummarizerOut) / total
	}
}

// replayed is one session's figures.
type replayed struct {
	without, agent, sumIn, sumOut int64
	compactions                   int
	curveWithout, curveWith       []int64
	// added holds the latency added to each turn on which a compaction was due.
	added []time.Duration
}

// convState is the context an agent sends under compaction: the system prompt
// (pinned), the summary, the messages a strategy kept ahead of it, and the tail.
type convState struct {
	system        schemas.Entry
	summaryTokens int // 0: no summary yet
	kept, tail    []schemas.Entry
}

func (st *convState) tokens() int {
	n := tokens.Message(&st.system.Message) + tokens.EntriesWith(nil, st.kept) + tokens.EntriesWith(nil, st.tail)
	if st.summaryTokens > 0 {
		n += st.summaryTokens + tokens.Text(assemble.SummaryPrefix) + tokens.PerMessage
	}
	return n
}

// compaction is one summarizer call: what it read and wrote, and the state it leaves
// (applied when it lands).
type compaction struct {
	in, out   int
	summary   int
	kept      []schemas.Entry
	tailStart uint64 // the first sequence of the new tail
}

// plan splits the state as a worker does (summarizer.Pool.plan): the strategy over the
// kept messages and the tail, the covered ones pre-trimmed and summarized with the
// previous summary.
func plan(st *convState, s policy.Settings) (compaction, bool) {
	cand := append(slices.Clone(st.kept), st.tail...)
	knobs := split.DefaultKnobs()
	knobs.KeepLastN, knobs.ToolRounds, knobs.UserMessageTokens = s.KeepLastN, s.ToolRounds, s.UserMessageTokens
	knobs.TokenFraction, knobs.RecentTurns = s.TokenFraction, s.RecentTurns
	sp, err := split.Apply(s.Strategy, split.Input{Entries: cand, Pinned: make([]bool, len(cand)), Carried: len(st.kept),
		OtherPinnedTokens: tokens.Message(&st.system.Message), Budget: s.Budget(), Knobs: knobs})
	if err != nil || sp.TailStart == 0 {
		return compaction{}, false
	}
	keep := map[int]bool{}
	for _, i := range sp.Keep {
		keep[i] = true
	}
	var c compaction
	var covered []schemas.Message
	for i := range sp.TailStart {
		if keep[i] {
			c.kept = append(c.kept, cand[i])
		} else {
			covered = append(covered, cand[i].Message.StripMetadata())
		}
	}
	if len(covered) == 0 {
		return compaction{}, false
	}
	if sp.TailStart < len(cand) {
		c.tailStart = cand[sp.TailStart].Seq
	} else {
		c.tailStart = cand[len(cand)-1].Seq + 1
	}
	read := tokens.Messages(pretrim.ToolOutputs(covered, s.ToolOutputCap)) + st.summaryTokens
	c.in = summarizer.PromptOverhead + read
	c.summary = summaryLength(read, s.Budget().SummaryCap())
	c.out = c.summary
	return c, true
}

// apply lands c on st: the covered messages leave, the summary replaces the old one.
func (st *convState) apply(c compaction) {
	st.summaryTokens = c.summary
	st.kept = c.kept
	i := 0
	for i < len(st.tail) && st.tail[i].Seq < c.tailStart {
		i++
	}
	st.tail = slices.Clone(st.tail[i:])
}

// replay runs one session under s. Inline (ahead false): a turn that brings the
// context to the threshold compacts before the next turn, waiting for the summarizer.
// Ahead of time: a turn that brings it to the soft threshold starts a compaction in
// the background; it lands SummarizerDelay later (turns go on meanwhile), and a turn
// that reaches the threshold before that waits for it.
func replay(se session, s policy.Settings, cfg TokenSimConfig, ahead bool) replayed {
	r := replayed{curveWithout: make([]int64, len(se.turns)), curveWith: make([]int64, len(se.turns))}
	st := &convState{system: se.system}
	whole := tokens.Message(&se.system.Message)
	threshold := s.Budget().ThresholdTokens()
	soft := int(math.Round(s.SoftThreshold * float64(s.ContextWindow)))
	var pending *compaction
	var landsAt time.Duration
	now := time.Duration(0)
	for t, turn := range se.turns {
		now += cfg.TurnInterval
		st.tail = append(st.tail, turn...)
		whole += tokens.EntriesWith(nil, turn)
		if pending != nil && now >= landsAt {
			st.apply(*pending)
			pending = nil
		}
		ctx := st.tokens()
		switch {
		case !ahead && ctx >= threshold:
			if c, ok := plan(st, s); ok {
				r.sumIn, r.sumOut, r.compactions = r.sumIn+int64(c.in), r.sumOut+int64(c.out), r.compactions+1
				st.apply(c)
				r.added = append(r.added, cfg.SummarizerDelay)
				now += cfg.SummarizerDelay
			}
		case ahead && pending == nil && ctx >= soft:
			if c, ok := plan(st, s); ok {
				r.sumIn, r.sumOut, r.compactions = r.sumIn+int64(c.in), r.sumOut+int64(c.out), r.compactions+1
				pending, landsAt = &c, now+cfg.SummarizerDelay
				r.added = append(r.added, 0)
			}
		case ahead && pending != nil && ctx >= threshold:
			// The turn waits for the compaction in flight.
			wait := landsAt - now
			r.added[len(r.added)-1] += wait
			now = landsAt
			st.apply(*pending)
			pending = nil
		}
		ctx = st.tokens()
		r.without += int64(whole)
		r.agent += int64(ctx)
		r.curveWithout[t] = r.without
		r.curveWith[t] = r.agent
	}
	return r
}
