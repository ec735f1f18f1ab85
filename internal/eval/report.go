package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Count is how many items of one kind (paths, commands, facts) a conversation's raw
// history holds and how many of them are in its final context.
type Count struct {
	Total int `json:"total"`
	Kept  int `json:"kept"`
	// KeptWithoutEvidence is Kept with the evidence section taken out of the summary.
	KeptWithoutEvidence int `json:"kept_without_evidence"`
	// KeptByConstruction is Kept with the summary's own text taken out of the summary
	// message (SummaryPrefix and the evidence section left): what survives whatever the
	// summarizer writes.
	KeptByConstruction int `json:"kept_by_construction"`
	// Lost names up to 10 items not kept.
	Lost []string `json:"lost,omitempty"`
}

// ConvResult is one conversation replayed with one strategy.
type ConvResult struct {
	File     string `json:"file"`
	Strategy string `json:"strategy"`
	// Rungs is the policy key rungs the replay set (empty: the operator's tiers chose).
	Rungs        string `json:"rungs,omitempty"`
	Conversation string `json:"conversation"`
	Messages     int    `json:"messages"`
	// ModelTurns are the assistant messages, before each of which the context was read.
	ModelTurns  int `json:"model_turns"`
	Compactions int `json:"compactions"`
	// Fallback: the final summary was written by the extractive fallback, not the
	// configured summarizer (an LLM that kept failing).
	Fallback bool `json:"fallback,omitempty"`
	// TokensWith is the sum over model turns of the context sent with compaction;
	// TokensWithout the whole history's at the same turns.
	TokensWith    int64 `json:"tokens_with"`
	TokensWithout int64 `json:"tokens_without"`
	// Cache is what a prompt cache makes of the contexts sent (the proxy's swap rule);
	// CacheWithout of the whole histories, sent without compaction.
	Cache        CacheTally `json:"cache"`
	CacheWithout CacheTally `json:"cache_without"`
	// SummarizerIn/Out are the summarizer's tokens: reported usage, or an estimate.
	SummarizerIn    int64 `json:"summarizer_in"`
	SummarizerOut   int64 `json:"summarizer_out"`
	SummarizerCalls int   `json:"summarizer_calls"`
	// FinalTokens is the final context; HistoryTokens the whole history.
	FinalTokens    int   `json:"final_tokens"`
	HistoryTokens  int   `json:"history_tokens"`
	EvidenceTokens int   `json:"evidence_tokens"`
	Paths          Count `json:"paths"`
	Commands       Count `json:"commands"`
	Facts          Count `json:"facts"`
	// BrokenToolPairs and MissingPinned are summed over every context read: must be 0.
	BrokenToolPairs int `json:"broken_tool_pairs"`
	MissingPinned   int `json:"missing_pinned"`
	// Skipped counts the messages the reader left out of the contexts read (an
	// invalid message, a tool pair it could not make whole), summed over the reads.
	Skipped int          `json:"skipped"`
	Probes  *ProbeScores `json:"probes,omitempty"`
	// ProbeError says why the probes failed (the scores are then absent).
	ProbeError string `json:"probe_error,omitempty"`
}

// Survival sums one kind of item over a strategy's conversations.
type Survival struct {
	Total               int `json:"total"`
	Kept                int `json:"kept"`
	KeptWithoutEvidence int `json:"kept_without_evidence"`
	KeptByConstruction  int `json:"kept_by_construction"`
	// Micro is Kept ÷ Total; Macro the mean of each conversation's share (over the
	// conversations with at least one item); the -WithoutEvidence ones the same
	// without the evidence section, the -ByConstruction ones with the summary's own
	// text removed (see Count).
	Micro                float64 `json:"micro"`
	Macro                float64 `json:"macro"`
	MicroWithoutEvidence float64 `json:"micro_without_evidence"`
	MacroWithoutEvidence float64 `json:"macro_without_evidence"`
	MicroByConstruction  float64 `json:"micro_by_construction"`
	MacroByConstruction  float64 `json:"macro_by_construction"`
	// CompactedTotal counts the items of the compacted conversations only;
	// CompactedMicro is Micro over them (the others keep everything verbatim). A share
	// of no items (Total or CompactedTotal 0) is 0, and printed as n/a.
	CompactedTotal                                     int     `json:"compacted_total"`
	CompactedMicro                                     float64 `json:"compacted_micro"`
	CompactedMicroWithoutEvidence                      float64 `json:"compacted_micro_without_evidence"`
	CompactedMicroByConstruction                       float64 `json:"compacted_micro_by_construction"`
	compactedKept, compactedBare, compactedCons, convs int
	macro, macroBare, macroCons                        float64
}

func (s *Survival) add(c Count, compacted bool) {
	s.Total += c.Total
	s.Kept += c.Kept
	s.KeptWithoutEvidence += c.KeptWithoutEvidence
	s.KeptByConstruction += c.KeptByConstruction
	if c.Total > 0 {
		s.convs++
		s.macro += float64(c.Kept) / float64(c.Total)
		s.macroBare += float64(c.KeptWithoutEvidence) / float64(c.Total)
		s.macroCons += float64(c.KeptByConstruction) / float64(c.Total)
	}
	if compacted {
		s.CompactedTotal += c.Total
		s.compactedKept += c.Kept
		s.compactedBare += c.KeptWithoutEvidence
		s.compactedCons += c.KeptByConstruction
	}
}

func (s *Survival) finish() {
	s.Micro, s.MicroWithoutEvidence = ratio(s.Kept, s.Total), ratio(s.KeptWithoutEvidence, s.Total)
	s.MicroByConstruction = ratio(s.KeptByConstruction, s.Total)
	s.CompactedMicro, s.CompactedMicroWithoutEvidence = ratio(s.compactedKept, s.CompactedTotal), ratio(s.compactedBare, s.CompactedTotal)
	s.CompactedMicroByConstruction = ratio(s.compactedCons, s.CompactedTotal)
	if s.convs > 0 {
		n := float64(s.convs)
		s.Macro, s.MacroWithoutEvidence, s.MacroByConstruction = s.macro/n, s.macroBare/n, s.macroCons/n
	}
}

// ratio is a ÷ b, 0 when there is nothing to keep (b = 0): the tables print n/a.
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// StrategyReport is one strategy (with one rung, when the run names rungs) over every
// conversation.
type StrategyReport struct {
	Strategy      string `json:"strategy"`
	Rungs         string `json:"rungs,omitempty"`
	Conversations int    `json:"conversations"`
	// Compacted counts the conversations compacted at least once.
	Compacted   int `json:"compacted"`
	Compactions int `json:"compactions"`
	// Fallbacks counts the final summaries the extractive fallback wrote although an
	// LLM was configured: the LLM kept failing.
	Fallbacks     int   `json:"fallbacks"`
	TokensWith    int64 `json:"tokens_with"`
	TokensWithout int64 `json:"tokens_without"`
	SummarizerIn  int64 `json:"summarizer_in"`
	SummarizerOut int64 `json:"summarizer_out"`
	// SummarizerCalls counts the summarizer's calls (a mask makes none).
	SummarizerCalls int `json:"summarizer_calls"`
	// Cache and CacheWithout sum the conversations' (see ConvResult).
	Cache        CacheTally `json:"cache"`
	CacheWithout CacheTally `json:"cache_without"`
	// Cost is the tokens priced, with and without a prompt cache.
	Cost Cost `json:"cost"`
	// Saved is 1 − (TokensWith + SummarizerIn + SummarizerOut) ÷ TokensWithout.
	Saved    float64  `json:"saved"`
	Paths    Survival `json:"paths"`
	Commands Survival `json:"commands"`
	Facts    Survival `json:"facts"`
	// EvidenceTokensMean and EvidenceShareMax are over the compacted conversations:
	// the evidence section's tokens, and its largest share of target × W.
	EvidenceTokensMean float64       `json:"evidence_tokens_mean"`
	EvidenceShareMean  float64       `json:"evidence_share_mean"`
	EvidenceShareMax   float64       `json:"evidence_share_max"`
	BrokenToolPairs    int           `json:"broken_tool_pairs"`
	MissingPinned      int           `json:"missing_pinned"`
	Skipped            int           `json:"skipped"`
	Probes             *ProbeSummary `json:"probes,omitempty"`
}

// Report is a whole eval run.
type Report struct {
	Command       string  `json:"command,omitempty"`
	Window        int     `json:"window"`
	Target        float64 `json:"target"`
	Summarizer    string  `json:"summarizer"`
	SummaryTokens string  `json:"summarizer_tokens"`
	Server        string  `json:"server"`
	Files         int     `json:"files"`
	Facts         int     `json:"facts"`
	Planted       int     `json:"planted"`
	Probes        string  `json:"probes"`
	// CacheTTL and TurnGap are the swap rule's and the cache's clock (see Config).
	CacheTTL string `json:"cache_ttl"`
	TurnGap  string `json:"turn_gap"`
	// Prices says what priced the tokens (none: tokens and ratios only).
	Prices string `json:"prices"`
	// Baselines are the published figures printed beside the survival shares.
	Baselines     string           `json:"baselines"`
	Elapsed       string           `json:"elapsed"`
	Strategies    []StrategyReport `json:"strategies"`
	Conversations []ConvResult     `json:"conversations"`
}

func newReport(cfg *Config, results [][]ConvResult, server string) *Report {
	target := cfg.Resolver.Base().Target
	rep := &Report{Window: cfg.Window, Target: target, Summarizer: cfg.SummarizerName, Server: server,
		Facts: len(cfg.Facts), Planted: cfg.Plant, Probes: "off (no LLM endpoint configured)"}
	rep.SummaryTokens = "as the LLM reported them"
	if cfg.Summarizers == nil {
		rep.SummaryTokens = "estimated (chars/4 of what the extractive summarizer read and wrote, plus the prompt overhead an LLM call would add)"
	}
	if cfg.Prober != nil {
		rep.Probes = "asked of " + cfg.Prober.Model
	}
	rep.CacheTTL, rep.TurnGap, rep.Baselines = cfg.CacheTTL.String(), cfg.TurnGap.String(), Baselines
	if cfg.CacheTTL <= 0 {
		rep.CacheTTL = "0s"
	}
	pr := newPricing(cfg)
	rep.Prices = pr.about
	budget := target * float64(cfg.Window)
	arms := cfg.arms()
	for i, rs := range results {
		sr := StrategyReport{Strategy: arms[i].strategy, Rungs: arms[i].rung, Conversations: len(rs)}
		var probes []ProbeScores
		probeErrors := 0
		for _, r := range rs {
			rep.Files = len(rs)
			compacted := r.Compactions > 0
			if compacted {
				sr.Compacted++
				sr.EvidenceTokensMean += float64(r.EvidenceTokens)
				share := float64(r.EvidenceTokens) / budget
				sr.EvidenceShareMean += share
				sr.EvidenceShareMax = max(sr.EvidenceShareMax, share)
			}
			sr.Compactions += r.Compactions
			if r.Fallback && cfg.Summarizers != nil {
				sr.Fallbacks++
			}
			sr.TokensWith += r.TokensWith
			sr.TokensWithout += r.TokensWithout
			sr.SummarizerIn += r.SummarizerIn
			sr.SummarizerOut += r.SummarizerOut
			sr.SummarizerCalls += r.SummarizerCalls
			sr.Cache.add(r.Cache)
			sr.CacheWithout.add(r.CacheWithout)
			sr.Paths.add(r.Paths, compacted)
			sr.Commands.add(r.Commands, compacted)
			sr.Facts.add(r.Facts, compacted)
			sr.BrokenToolPairs += r.BrokenToolPairs
			sr.MissingPinned += r.MissingPinned
			sr.Skipped += r.Skipped
			if r.Probes != nil {
				probes = append(probes, *r.Probes)
			}
			if r.ProbeError != "" {
				probeErrors++
			}
			rep.Conversations = append(rep.Conversations, r)
		}
		if sr.Compacted > 0 {
			sr.EvidenceTokensMean /= float64(sr.Compacted)
			sr.EvidenceShareMean /= float64(sr.Compacted)
		}
		if sr.TokensWithout > 0 {
			sr.Saved = 1 - float64(sr.TokensWith+sr.SummarizerIn+sr.SummarizerOut)/float64(sr.TokensWithout)
		}
		sr.Cost = pr.cost(sr)
		sr.Paths.finish()
		sr.Commands.finish()
		sr.Facts.finish()
		if cfg.Prober != nil {
			sr.Probes = summarize(probes)
			sr.Probes.Failed = probeErrors
		}
		rep.Strategies = append(rep.Strategies, sr)
	}
	return rep
}

// Broken is the tool pairs broken and pinned messages missing over every read: the
// run fails when it is not 0.
func (r *Report) Broken() int {
	n := 0
	for _, s := range r.Strategies {
		n += s.BrokenToolPairs + s.MissingPinned
	}
	return n
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// share is pct of a share of n items, "n/a" when n is 0: 0 of 0 is not 100%.
func share(f float64, n int) string {
	if n == 0 {
		return "n/a"
	}
	return pct(f)
}

// saved is a strategy's saved share, "n/a" when nothing would have been sent.
func saved(s StrategyReport) string {
	if s.TokensWithout == 0 {
		return "n/a"
	}
	return pct(s.Saved)
}

// WriteTable writes the per-strategy table for people, then what it means.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d conversations, window W=%d, target %.2f; summarizer: %s; server: %s; %s\n\n",
		r.Files, r.Window, r.Target, r.Summarizer, r.Server, r.Elapsed)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tcompacted\tcompactions\tsent with\tsent without\tsummarizer in+out\tsaved\t"+
		"paths\t(no evidence)\t(by construction)\tcommands\t(no evidence)\t(by construction)\tfacts\tevidence share\tbroken pairs\tmissing pins\t")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n",
			s.Name(), s.Compacted, s.Conversations, s.Compactions, s.TokensWith, s.TokensWithout,
			s.SummarizerIn+s.SummarizerOut, saved(s),
			share(s.Paths.Micro, s.Paths.Total), share(s.Paths.MicroWithoutEvidence, s.Paths.Total), share(s.Paths.MicroByConstruction, s.Paths.Total),
			share(s.Commands.Micro, s.Commands.Total), share(s.Commands.MicroWithoutEvidence, s.Commands.Total), share(s.Commands.MicroByConstruction, s.Commands.Total),
			factsCell(s.Facts), share(s.EvidenceShareMax, s.Compacted), s.BrokenToolPairs, s.MissingPinned)
	}
	tw.Flush()
	b.WriteString("\nSurvival in the final context (micro = items kept ÷ items; macro = mean per conversation; compacted = only the conversations compacted;\n" +
		"no ev. = without the evidence section; by constr. = by construction, the summary's own text removed: what survives whatever the summarizer writes):\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tkind\titems\tmicro\tmacro\tcompacted\tmicro no ev.\tmacro no ev.\tcompacted no ev.\t"+
		"micro by constr.\tmacro by constr.\tcompacted by constr.\t")
	for _, s := range r.Strategies {
		for _, k := range []struct {
			name string
			v    Survival
		}{{"paths", s.Paths}, {"commands", s.Commands}, {"facts", s.Facts}} {
			if k.v.Total == 0 {
				continue
			}
			n, c := k.v.Total, k.v.CompactedTotal
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Name(), k.name, k.v.Total, share(k.v.Micro, n), share(k.v.Macro, n),
				share(k.v.CompactedMicro, c), share(k.v.MicroWithoutEvidence, n), share(k.v.MacroWithoutEvidence, n), share(k.v.CompactedMicroWithoutEvidence, c),
				share(k.v.MicroByConstruction, n), share(k.v.MacroByConstruction, n), share(k.v.CompactedMicroByConstruction, c))
		}
	}
	tw.Flush()
	b.WriteString(r.baselines())
	if r.Strategies != nil && r.Strategies[0].Probes != nil {
		b.WriteString("\nProbes (" + r.Probes + "), mean scores 0–1:\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		dims := ""
		for _, d := range Dimensions {
			dims += d + "\t"
		}
		fmt.Fprintln(tw, "strategy\tfiles recall\tfiles precision\twhat was decided\twhat the user asked\t"+dims+"probed\tfailed\t")
		for _, s := range r.Strategies {
			p := s.Probes
			dims := ""
			for _, d := range Dimensions {
				v, ok := p.Dimensions[d]
				if !ok {
					v = -1
				}
				dims += score2(v) + "\t"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%d\t%d\t\n", s.Name(), score2(p.FilesRecall), score2(p.FilesPrecision), score2(p.Decided),
				score2(p.Asked), dims, p.Conversations, p.Failed)
		}
		tw.Flush()
	} else {
		b.WriteString("\nProbes: " + r.Probes + ".\n")
	}
	for _, s := range r.Strategies {
		if s.Skipped > 0 {
			fmt.Fprintf(&b, "%s: the reader left %d message(s) out of the contexts read (see skipped in --json).\n", s.Name(), s.Skipped)
		}
		if s.Fallbacks > 0 {
			fmt.Fprintf(&b, "%s: %d final summaries were written by the extractive fallback: the LLM kept failing.\n", s.Name(), s.Fallbacks)
		}
	}
	fmt.Fprintf(&b, "Summarizer tokens: %s.\n", r.SummaryTokens)
	b.WriteString("\n")
	r.writeCache(&b, false)
	_, err := io.WriteString(w, b.String())
	return err
}

// Name is the arm's name: its strategy, and its rungs when the run set them.
func (s StrategyReport) Name() string { return arm{s.Strategy, s.Rungs}.name() }

// writeCache writes the tokens sent by the proxy's swap rule and what a prompt cache
// makes of them, per arm, then the cost with and without the cache, then the baselines.
func (r *Report) writeCache(b *strings.Builder, md bool) {
	row := func(tw io.Writer, cells ...string) {
		if md {
			fmt.Fprintf(tw, "| %s |\n", strings.Join(cells, " | "))
		} else {
			fmt.Fprintf(tw, "%s\t\n", strings.Join(cells, "\t"))
		}
	}
	var tw io.Writer = b
	var flush func()
	if !md {
		t := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		tw, flush = t, func() { t.Flush() }
	}
	fmt.Fprintf(b, "Tokens sent by the proxy's swap rule (cache TTL %s, %s between turns) and what a prompt cache makes of them:\n", r.CacheTTL, r.TurnGap)
	if md {
		b.WriteString("\n| arm | compactions | summarizer calls | summarizer in+out | sent | sent ÷ no compaction | prefix identical | cache read | cache writes | by swaps | uncached ÷ no compaction |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	} else {
		row(tw, "arm", "compactions", "summarizer calls", "summarizer in+out", "sent", "sent ÷ no compaction", "prefix identical", "cache read", "cache writes", "by swaps", "uncached ÷ no compaction")
	}
	for _, s := range r.Strategies {
		c := s.Cache
		row(tw, s.Name(), fmt.Sprint(s.Compactions), fmt.Sprint(s.SummarizerCalls), fmt.Sprint(s.SummarizerIn+s.SummarizerOut), fmt.Sprint(c.Sent),
			share(s.Cost.TokenRatio, int(s.CacheWithout.Sent)), share(c.PrefixShare(), c.Compared), fmt.Sprint(c.CacheRead), fmt.Sprint(c.CacheWrite),
			fmt.Sprint(c.SwapWrite), share(s.Cost.UncachedRatio, int(s.CacheWithout.Sent)))
	}
	if len(r.Strategies) > 0 {
		w := r.Strategies[0].CacheWithout
		all := share(1, int(w.Sent)) // 100%, or n/a of nothing sent
		row(tw, "no compaction", "0", "0", "0", fmt.Sprint(w.Sent), all, share(w.PrefixShare(), w.Compared), fmt.Sprint(w.CacheRead), fmt.Sprint(w.CacheWrite), fmt.Sprint(w.SwapWrite), all)
	}
	if flush != nil {
		flush()
	}
	if len(r.Strategies) > 0 && r.Strategies[0].Cost.Priced {
		fmt.Fprintf(b, "\nCost in US dollars (%s), input and summarizer, with and without a prompt cache:\n", r.Prices)
		if md {
			tw = b
			b.WriteString("\n| arm | no cache | ÷ no compaction | with cache | ÷ no compaction | of which summarizer |\n|---|--:|--:|--:|--:|--:|\n")
		} else {
			t := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
			tw, flush = t, func() { t.Flush() }
			row(tw, "arm", "no cache", "÷ no compaction", "with cache", "÷ no compaction", "of which summarizer")
		}
		for _, s := range r.Strategies {
			c := s.Cost
			n := int(s.CacheWithout.Sent)
			row(tw, s.Name(), usd(c.NoCache), share(c.RatioNoCache, n), usd(c.Cache), share(c.RatioCache, n), usd(c.Summarizer))
		}
		c := r.Strategies[0].Cost
		row(tw, "no compaction", usd(c.BaselineNoCache), share(1, int(r.Strategies[0].CacheWithout.Sent)), usd(c.BaselineCache),
			share(1, int(r.Strategies[0].CacheWithout.Sent)), usd(0))
		if flush != nil {
			flush()
		}
	} else {
		fmt.Fprintf(b, "\nCost: %s.\n", r.Prices)
	}
}

// baselines is the line of the published figures, printed under the survival shares.
func (r *Report) baselines() string {
	return fmt.Sprintf("Published figures for LLM summaries, beside these (cited, not measured here): %s.\n", r.Baselines)
}

// usd is dollars to the cent, below a cent to four decimals.
func usd(v float64) string {
	if v != 0 && v < 0.01 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}

// score2 is a probe score, "-" when it applied to no conversation.
func score2(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func factsCell(s Survival) string {
	if s.Total == 0 {
		return "-"
	}
	return share(s.Micro, s.Total)
}

func factsCellByConstruction(s Survival) string {
	if s.Total == 0 {
		return "-"
	}
	return share(s.MicroByConstruction, s.Total)
}

// WriteMarkdown writes the per-strategy tables as Markdown (the README's "What
// survives compaction" is one).
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d conversations, W = %d tokens (target %.2f × W = %.0f), summarizer: %s; summarizer tokens %s.\n\n",
		r.Files, r.Window, r.Target, r.Target*float64(r.Window), r.Summarizer, r.SummaryTokens)
	b.WriteString("| strategy | compacted | compactions | tokens sent with compaction | without | summarizer in + out | saved | broken tool pairs | missing pinned |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range r.Strategies {
		fmt.Fprintf(&b, "| %s | %d of %d | %d | %d | %d | %d + %d | %s | %d | %d |\n", s.Name(), s.Compacted, s.Conversations, s.Compactions,
			s.TokensWith, s.TokensWithout, s.SummarizerIn, s.SummarizerOut, saved(s), s.BrokenToolPairs, s.MissingPinned)
	}
	b.WriteString("\nIn the final context, with the evidence section (without it), over every conversation (micro, macro) and over the compacted ones only:\n\n")
	b.WriteString("| strategy | paths (micro) | paths (macro) | paths, compacted | commands (micro) | commands (macro) | commands, compacted | facts | evidence tokens (mean) | evidence share of target × W (max) |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	both := func(v, bare float64, n int) string {
		if n == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%s (%s)", pct(v), pct(bare))
	}
	for _, s := range r.Strategies {
		p, c := s.Paths, s.Commands
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s |\n", s.Name(),
			both(p.Micro, p.MicroWithoutEvidence, p.Total), both(p.Macro, p.MacroWithoutEvidence, p.Total),
			both(p.CompactedMicro, p.CompactedMicroWithoutEvidence, p.CompactedTotal),
			both(c.Micro, c.MicroWithoutEvidence, c.Total), both(c.Macro, c.MacroWithoutEvidence, c.Total),
			both(c.CompactedMicro, c.CompactedMicroWithoutEvidence, c.CompactedTotal),
			factsCell(s.Facts), s.EvidenceTokensMean, share(s.EvidenceShareMax, s.Compacted))
	}
	b.WriteString("\nBy construction: the same final context with the summary's own text removed (the summary message keeps only its prefix and the evidence section; pinned and tail messages unchanged), what survives whatever the summarizer writes:\n\n")
	b.WriteString("| strategy | paths (micro) | paths (macro) | paths, compacted | commands (micro) | commands (macro) | commands, compacted | facts |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range r.Strategies {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name(),
			share(s.Paths.MicroByConstruction, s.Paths.Total), share(s.Paths.MacroByConstruction, s.Paths.Total),
			share(s.Paths.CompactedMicroByConstruction, s.Paths.CompactedTotal),
			share(s.Commands.MicroByConstruction, s.Commands.Total), share(s.Commands.MacroByConstruction, s.Commands.Total),
			share(s.Commands.CompactedMicroByConstruction, s.Commands.CompactedTotal),
			factsCellByConstruction(s.Facts))
	}
	b.WriteString("\n" + r.baselines())
	if len(r.Strategies) > 0 {
		s := r.Strategies[0]
		fmt.Fprintf(&b, "\nItems in the raw histories: %d distinct paths, %d distinct commands, %d facts.\n", s.Paths.Total, s.Commands.Total, s.Facts.Total)
	}
	b.WriteString("\n")
	r.writeCache(&b, true)
	_, err := io.WriteString(w, b.String())
	return err
}
