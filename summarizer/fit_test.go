package summarizer

import (
	"context"
	"fmt"
	"github.com/compactor/compactor/internal/corpustest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/pretrim"
)

// windowed is a summarizer with a context window: it refuses (ErrContextLength) any
// request whose input, with the prompt overhead, is over the window, and records every
// input it accepted.
type windowed struct {
	window int
	mu     sync.Mutex
	inputs []Input
	max    int
}

func (w *windowed) Summarize(_ context.Context, in Input) (Output, error) {
	size := inputTokens(in) + PromptOverhead + in.MaxSummaryTokens
	w.mu.Lock()
	defer w.mu.Unlock()
	if size > w.window {
		return Output{}, fmt.Errorf("%d tokens: %w", size, ErrContextLength)
	}
	w.inputs = append(w.inputs, in)
	w.max = max(w.max, size)
	return Output{Summary: fmt.Sprintf("summary of %d messages", len(in.Messages)), Model: "windowed"}, nil
}

// Over every corpus conversation, summarized whole into small summarizer windows: no
// request is over the window, every user message reaches the summarizer (cut at most),
// and the result is one summary.
func TestSummarizeToFitNeverOverflowsTheSummarizer(t *testing.T) {
	convs := corpustest.Load(t)
	p := &Pool{cfg: DefaultConfig(), log: zerolog.Nop(), now: time.Now}
	for _, window := range []int{4000, 16000, 128000} {
		for _, c := range convs {
			name, msgs := c.Name, c.Messages()
			for i := range msgs {
				msgs[i] = msgs[i].StripMetadata()
			}
			sum := &windowed{window: window}
			in := Input{Conversation: "c", Messages: pretrim.TotalBudget(pretrim.ToolOutputs(msgs, 2000), 50000), MaxSummaryTokens: 256,
				PreviousSummary: strings.Repeat("earlier facts ", 60)}
			j := &job{log: zerolog.Nop()}
			out, err := p.summarizeToFit(context.Background(), j, sum, in, window)
			if err != nil {
				t.Fatalf("%s in a window of %d: %v", name, window, err)
			}
			if out.Summary == "" {
				t.Fatalf("%s: empty summary", name)
			}
			if sum.max > window {
				t.Fatalf("%s: a request of %d tokens in a window of %d", name, sum.max, window)
			}
			var seen strings.Builder
			for _, in := range sum.inputs {
				for _, m := range in.Messages {
					seen.WriteString(m.Content.String())
				}
				seen.WriteString(in.PreviousSummary)
			}
			for i, m := range msgs {
				if m.Role != schemas.RoleUser {
					continue
				}
				head := []rune(strings.TrimSpace(m.Content.String()))
				if len(head) > 60 {
					head = head[:60]
				}
				if !strings.Contains(seen.String(), string(head)) {
					t.Fatalf("%s, window %d: user message %d never reached the summarizer", name, window, i)
				}
			}
			if !strings.Contains(seen.String(), "earlier facts") {
				t.Fatalf("%s: the previous summary never reached the summarizer", name)
			}
		}
	}
}

func TestPackKeepsOrderAndCutsOnlyTheOversized(t *testing.T) {
	small := schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("short")}
	huge := schemas.Message{Role: schemas.RoleTool, ToolCallID: "x", Content: schemas.Text(strings.Repeat("y", 40000))}
	sum := &windowed{window: 100000}
	f := &fitter{p: &Pool{cfg: DefaultConfig()}, j: &job{log: zerolog.Nop()}, sum: sum, budget: 3000}
	base := Input{MaxSummaryTokens: 200}
	chunks, err := f.pack(base, []schemas.Message{small, huge, small, small}, partLine)
	if err != nil {
		t.Fatal(err)
	}
	var flat []schemas.Message
	for _, c := range chunks {
		if got := requestTokens(sum, c); got > f.budget {
			t.Fatalf("a request of %d tokens over the budget of %d", got, f.budget)
		}
		flat = append(flat, c.Messages...)
	}
	if len(flat) != 4 || flat[0].Content.String() != "short" || flat[2].Content.String() != "short" || flat[3].Content.String() != "short" {
		t.Fatalf("order or count changed: %d messages", len(flat))
	}
	if !strings.Contains(flat[1].Content.String(), "characters cut by Compactor") {
		t.Fatal("the oversized message was not cut with a marker")
	}
	if !strings.Contains(chunks[0].Instructions, fmt.Sprintf("part 1 of %d", len(chunks))) {
		t.Fatalf("chunk 1 has instructions %q; want its part line", chunks[0].Instructions)
	}
}

func TestSplitTextLosesNothing(t *testing.T) {
	tests := []struct {
		name string
		give string
		most int
	}{
		{"short", "one line", 10},
		{"lines", strings.Repeat("a line of text\n", 50), 20},
		{"one long line", strings.Repeat("é", 1000), 30},
		{"mixed", "short\n" + strings.Repeat("z", 500) + "\nend", 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := splitText(tc.give, tc.most)
			if strings.Join(got, "") != tc.give {
				t.Fatal("pieces do not join to the text")
			}
			for _, p := range got {
				if tokens.Text(p) > tc.most {
					t.Fatalf("a piece of %d tokens; want at most %d", tokens.Text(p), tc.most)
				}
			}
		})
	}
}
