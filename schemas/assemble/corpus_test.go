package assemble

import (
	"github.com/compactor/compactor/internal/corpustest"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

func TestCorpusRounds(t *testing.T) {
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			es := c.Entries
			us := rounds.Units(es)
			next := 0
			for _, u := range us {
				if u.Start != next || u.End <= u.Start {
					t.Fatalf("unit %+v does not follow %d: units must partition the conversation", u, next)
				}
				next = u.End
			}
			if next != len(es) {
				t.Fatalf("units end at %d; want %d", next, len(es))
			}
			kept, skipped := rounds.Normalize(es)
			if len(skipped) > 0 || len(kept) != len(es) {
				t.Fatalf("Normalize kept %d of %d and skipped %+v; want nothing skipped", len(kept), len(es), skipped)
			}
			// At each unit boundary k the assembled tail is whole. At any other index (a
			// split that should never happen) the reader drops what lost its partner, so
			// pairs still hold.
			for k := 0; k <= len(es); k++ {
				if !rounds.IsBoundary(es, k) {
					kept, _ := rounds.Normalize(es[k:])
					msgs := make([]schemas.Message, len(kept))
					for i, e := range kept {
						msgs[i] = e.Message
					}
					if err := rounds.CheckPairs(msgs); err != nil {
						t.Fatalf("tail from inside a round at index %d: %v", k, err)
					}
					continue
				}
				in := Input{Value: &schemas.Result{SchemaVersion: 1, Summary: "s"}, Tail: es[k:]}
				if k < len(es) {
					in.Value.TailStartSeq = es[k].Seq
				}
				ctx := Assemble(in, Options{})
				if err := rounds.CheckPairs(ctx.Messages); err != nil {
					t.Fatalf("tail from boundary %d: %v", k, err)
				}
				if len(ctx.Skipped) > 0 || len(ctx.Messages) != len(es)-k+1 {
					t.Fatalf("tail from boundary %d: %d messages, skipped %+v; want %d, nothing skipped",
						k, len(ctx.Messages), ctx.Skipped, len(es)-k+1)
				}
			}
		})
	}
}

func TestCorpusMaxTokens(t *testing.T) {
	const budget = 2000
	fit, notFit := 0, 0
	for _, c := range corpustest.Load(t) {
		t.Run(c.Name, func(t *testing.T) {
			in := Input{Tail: c.Entries}
			full := Assemble(in, Options{})
			got := Assemble(in, Options{MaxTokens: budget})
			if err := rounds.CheckPairs(got.Messages); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Seqs, full.Seqs) {
				t.Fatalf("read-time cut changed which messages are shown")
			}
			if got.Degraded != (full.Tokens > budget) {
				t.Errorf("Degraded got %v with %d tokens before the cut; want %v", got.Degraded, full.Tokens, full.Tokens > budget)
			}
			if want := tokens.Messages(got.Messages); got.Tokens != want {
				t.Errorf("Tokens got %d; want %d", got.Tokens, want)
			}
			if again := Assemble(in, Options{MaxTokens: budget}); !reflect.DeepEqual(again, got) {
				t.Errorf("a second run differs; want a deterministic cut")
			}
			if got.Tokens <= budget {
				fit++
				return
			}
			notFit++
			// Over budget is allowed only when no message can be cut further: each text is
			// either short already or cut down to the minimum head and tail.
			uncuttable := 0
			for i, m := range got.Messages {
				text, orig := m.Content.String(), full.Messages[i].Content.String()
				atMin, _ := Truncate(orig, minKeep, minKeep, readTimeNote)
				if utf8.RuneCountInString(orig) > 2*minKeep && text != atMin {
					t.Fatalf("%d tokens > %d, yet message %d (%d characters) could be cut further", got.Tokens, budget, i, utf8.RuneCountInString(text))
				}
				uncuttable += tokens.Message(&m)
			}
			t.Logf("%d messages at their minimum still take %d tokens > %d", len(got.Messages), uncuttable, budget)
		})
	}
	t.Logf("%d conversations fit %d tokens; %d have more messages than the budget can hold at their minimum", fit, budget, notFit)
	if fit == 0 && notFit > 0 {
		t.Errorf("no conversation fits %d tokens", budget)
	}
}
