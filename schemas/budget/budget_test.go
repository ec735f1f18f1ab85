package budget

import (
	"errors"
	"fmt"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Default()
	tests := []struct {
		name string
		give func(b *Budget)
	}{
		{"tiny window", func(b *Budget) { b.ContextWindow = 999 }},
		{"target zero", func(b *Budget) { b.Target = 0 }},
		{"threshold below target", func(b *Budget) { b.Threshold = 0.4 }},
		{"hard limit below threshold", func(b *Budget) { b.HardLimit = 0.7 }},
		{"hard limit above one", func(b *Budget) { b.HardLimit = 1.2 }},
		{"negative summary", func(b *Budget) { b.MaxSummaryTokens = -1 }},
		{"summary over target", func(b *Budget) { b.MaxSummaryTokens = 64000 }},
		{"negative evidence", func(b *Budget) { b.Evidence = -0.01 }},
		{"evidence the whole window", func(b *Budget) { b.Evidence = 1 }},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := Default()
			tc.give(&b)
			if err := b.Validate(); !errors.Is(err, ErrBudget) {
				t.Fatalf("got %v; want ErrBudget", err)
			}
		})
	}
}

func TestTokens(t *testing.T) {
	tests := []struct {
		name                                   string
		give                                   Budget
		threshold, target, hard, summary, tail int
	}{
		{"defaults", Default(), 96000, 64000, 121600, 2048, 64000 - 2048 - 1000},
		{"small window caps the summary at W/8", Budget{ContextWindow: 8000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95}, 6000, 4000, 7600, 1000, 4000 - 1000 - 1000},
		{"large window scales the summary", Budget{ContextWindow: 1024000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95}, 768000, 512000, 972800, 16384, 512000 - 16384 - 1000},
		{"explicit summary cap", Budget{ContextWindow: 128000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95, MaxSummaryTokens: 500}, 96000, 64000, 121600, 500, 64000 - 500 - 1000},
		{"small summarizer bounds the scaled cap", Budget{ContextWindow: 1000000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95, SummarizerContextWindow: 5000}, 750000, 500000, 950000, 625, 500000 - 625 - 1000},
		{"small summarizer bounds an explicit cap", Budget{ContextWindow: 128000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95, MaxSummaryTokens: 4000, SummarizerContextWindow: 16000}, 96000, 64000, 121600, 2000, 64000 - 2000 - 1000},
		{"large summarizer leaves the cap alone", Budget{ContextWindow: 1024000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95, SummarizerContextWindow: 1024000}, 768000, 512000, 972800, 16384, 512000 - 16384 - 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.give
			if got := b.ThresholdTokens(); got != tc.threshold {
				t.Errorf("ThresholdTokens = %d; want %d", got, tc.threshold)
			}
			if got := b.TargetTokens(); got != tc.target {
				t.Errorf("TargetTokens = %d; want %d", got, tc.target)
			}
			if got := b.HardLimitTokens(); got != tc.hard {
				t.Errorf("HardLimitTokens = %d; want %d", got, tc.hard)
			}
			if got := b.SummaryCap(); got != tc.summary {
				t.Errorf("SummaryCap = %d; want %d", got, tc.summary)
			}
			if got := b.TailBudget(1000); got != tc.tail {
				t.Errorf("TailBudget(1000) = %d; want %d", got, tc.tail)
			}
		})
	}
	if got := Default().TailBudget(1 << 30); got != 0 {
		t.Errorf("TailBudget with huge pins = %d; want 0", got)
	}
}

func TestEvidenceTokens(t *testing.T) {
	tests := []struct {
		name           string
		evidence       float64
		target         float64
		wantEvidence   int
		wantTailBudget int // with 1,000 pinned tokens and the default 2,048 summary cap
	}{
		{"off", 0, 0.5, 0, 64000 - 1000 - 2048},
		{"a share under the cap", 0.06, 0.5, 7680, 64000 - 1000 - 2048 - 7680},
		{"capped at 15% of the target", 0.2, 0.5, 9600, 64000 - 1000 - 2048 - 9600},
		{"cap follows a lower target", 0.06, 0.2, 3840, 25600 - 1000 - 2048 - 3840},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := Default()
			b.Evidence, b.Target = tc.evidence, tc.target
			if err := b.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := b.EvidenceTokens(); got != tc.wantEvidence {
				t.Errorf("EvidenceTokens = %d; want %d", got, tc.wantEvidence)
			}
			if got := b.TailBudget(1000); got != tc.wantTailBudget {
				t.Errorf("TailBudget(1000) = %d; want %d", got, tc.wantTailBudget)
			}
			if limit := int(MaxEvidenceShare * float64(b.TargetTokens())); b.EvidenceTokens() > limit {
				t.Errorf("EvidenceTokens = %d; over 15%% of the target (%d)", b.EvidenceTokens(), limit)
			}
		})
	}
	if got := Default().TailBudget(1 << 30); got != 0 {
		t.Errorf("TailBudget with huge pins = %d; want 0", got)
	}
}

func ExampleBudget_EvidenceTokens() {
	b := Budget{ContextWindow: 128000, Threshold: 0.75, Target: 0.5, HardLimit: 0.95, Evidence: 0.075}
	fmt.Println(b.EvidenceTokens(), b.TailBudget(0))
	b.Evidence = 0.2 // never more than 15% of target × W
	fmt.Println(b.EvidenceTokens())
	// Output:
	// 9600 52352
	// 9600
}
