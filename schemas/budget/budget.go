// Package budget turns the fractions of the context window (threshold, soft threshold,
// target, hard limit, summary cap) into token counts. Triggers, workers and readers
// share it, so they agree on every bound.
package budget

import (
	"errors"
	"fmt"
)

// Budget holds the context window and its fractions.
type Budget struct {
	// ContextWindow is the agent model's context window W, in tokens.
	ContextWindow int
	// Threshold: context ≥ Threshold × W needs compaction.
	Threshold float64
	// Target: a compaction brings the context to ≤ Target × W.
	Target float64
	// HardLimit: past HardLimit × W with no LLM result, a fallback result keeps the bound.
	HardLimit float64
	// MaxSummaryTokens caps a summary; 0 scales it with W (see SummaryCap).
	MaxSummaryTokens int
	// Evidence is the share of W the evidence section may take (0 = off); see
	// EvidenceTokens.
	Evidence float64
	// SummarizerContextWindow is the summarizer model's window; 0 = no bound. The
	// summary cap never takes more than SummarizerShare of it (see SummaryCap).
	SummarizerContextWindow int
}

// SummarizerShare is the largest share of the summarizer's window a summary may take:
// 1/SummarizerShare. The rest is for the summarizer's prompt and its input, so that
// map-reduce can merge at least two summaries in one request.
const SummarizerShare = 8

// Default returns the design's defaults for a 128,000-token window.
func Default() Budget {
	return Budget{ContextWindow: 128000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95}
}

// ErrBudget is matched by every budget error.
var ErrBudget = errors.New("invalid budget")

// Validate checks 0 < Target < Threshold < HardLimit ≤ 1 and a window of at least 1,000.
func (b Budget) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBudget, fmt.Sprintf(format, args...))
	}
	switch {
	case b.ContextWindow < 1000:
		return bad("context_window must be at least 1000 tokens, got %d", b.ContextWindow)
	case !(b.Target > 0 && b.Target < 1):
		return bad("target must be between 0 and 1, got %g", b.Target)
	case !(b.Threshold > b.Target && b.Threshold < 1):
		return bad("threshold must be above target (%g) and below 1, got %g", b.Target, b.Threshold)
	case !(b.HardLimit > b.Threshold && b.HardLimit <= 1):
		return bad("hard_limit must be above threshold (%g) and at most 1, got %g", b.Threshold, b.HardLimit)
	case !(b.Evidence >= 0 && b.Evidence < 1):
		return bad("evidence_budget must be in [0, 1), got %g", b.Evidence)
	case b.MaxSummaryTokens < 0:
		return bad("max_summary_tokens must not be negative")
	case b.MaxSummaryTokens >= b.TargetTokens():
		return bad("max_summary_tokens (%d) must be below the target (%d tokens)", b.MaxSummaryTokens, b.TargetTokens())
	}
	return nil
}

// ThresholdTokens is Threshold × W.
func (b Budget) ThresholdTokens() int { return int(b.Threshold * float64(b.ContextWindow)) }

// TargetTokens is Target × W.
func (b Budget) TargetTokens() int { return int(b.Target * float64(b.ContextWindow)) }

// HardLimitTokens is HardLimit × W.
func (b Budget) HardLimitTokens() int { return int(b.HardLimit * float64(b.ContextWindow)) }

// SummaryCap is the effective summary cap, the one every user of the budget applies
// (the split's tail budget, the request to the summarizer, the worker's guard):
// MaxSummaryTokens when set; otherwise 2,048 tokens per 128,000 of window (never fewer
// than 2,048) and never more than W/8, so small windows keep room for a tail. Either
// way it is never more than SummarizerContextWindow/SummarizerShare, so a summarizer
// with a small window can still write it and read its input beside it.
func (b Budget) SummaryCap() int {
	n := b.MaxSummaryTokens
	if n <= 0 {
		n = 2048
		if b.ContextWindow > 128000 {
			n = int(int64(2048) * int64(b.ContextWindow) / 128000)
		}
		n = min(n, b.ContextWindow/8)
	}
	if b.SummarizerContextWindow > 0 {
		n = min(n, b.SummarizerContextWindow/SummarizerShare)
	}
	return n
}

// MaxEvidenceShare is the largest share of the target (Target × W) the evidence section
// may take, whatever Evidence says.
const MaxEvidenceShare = 0.15

// EvidenceTokens is what the evidence section may use: Evidence × W, never more than
// MaxEvidenceShare × Target × W; 0 when Evidence is 0 (off).
func (b Budget) EvidenceTokens() int {
	if b.Evidence <= 0 {
		return 0
	}
	return int(min(b.Evidence, MaxEvidenceShare*b.Target) * float64(b.ContextWindow))
}

// TailBudget is what the verbatim tail may use: Target × W − pinned − SummaryCap −
// EvidenceTokens. It is never negative.
func (b Budget) TailBudget(pinnedTokens int) int {
	return max(0, b.TargetTokens()-pinnedTokens-b.SummaryCap()-b.EvidenceTokens())
}
