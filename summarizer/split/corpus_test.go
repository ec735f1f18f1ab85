package split

import (
	"bytes"
	"github.com/compactor/compactor/internal/corpustest"
	"reflect"
	"slices"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/budget"
)

// corpusWindows are the context windows the corpus is split for.
var corpusWindows = []int{4000, 16000, 128000}

func corpusInput(es []schemas.Entry, window int) Input {
	return Input{Entries: es, Pinned: Pinned(es, true), Knobs: DefaultKnobs(),
		Budget: budget.Budget{ContextWindow: window, Threshold: 0.75, Target: 0.5, HardLimit: 0.95}}
}

func TestCorpusStrategies(t *testing.T) {
	convs := corpustest.Load(t)
	for _, c := range convs {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			variants := [][]schemas.Entry{c.Entries}
			if open := waitingAtEnd(c.Entries); open != nil {
				variants = append(variants, open)
			}
			for _, strategy := range Strategies {
				for _, w := range corpusWindows {
					for _, es := range variants {
						checkCorpusSplit(t, strategy, corpusInput(es, w))
					}
				}
			}
		})
	}
	t.Logf("%d conversations × %d strategies × %d windows", len(convs), len(Strategies), len(corpusWindows))
}

// waitingAtEnd cuts the conversation just after the call of its last tool round, so it
// ends with a round still waiting for results; nil when it has no tool call.
func waitingAtEnd(es []schemas.Entry) []schemas.Entry {
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Message.HasToolCalls() {
			return es[:i+1]
		}
	}
	return nil
}

func checkCorpusSplit(t *testing.T, strategy string, in Input) {
	t.Helper()
	w := in.Budget.ContextWindow
	got, err := Apply(strategy, in)
	if err != nil {
		t.Fatalf("%s, W=%d: %v", strategy, w, err)
	}
	if err := verify(in, got); err != nil {
		t.Fatalf("%s, W=%d, %d entries: split at %d keeping %v: %v", strategy, w, len(in.Entries), got.TailStart, got.Keep, err)
	}
	if again, _ := Apply(strategy, in); !reflect.DeepEqual(again, got) {
		t.Fatalf("%s, W=%d: got %+v, then %+v; want the same split twice", strategy, w, got, again)
	}
}

func TestVerifyCatches(t *testing.T) {
	// verify is what the corpus test trusts: it must refuse splits that break the rules.
	es := entries(sys("s"), tok(10, user("a")), tok(10, calls("1", "2")), tok(10, result("1", "r")),
		tok(10, result("2", "r")), tok(10, user("b")))
	tests := []struct {
		name string
		give Split
		tail int
		want string
	}{
		{"inside a round", Split{TailStart: 3}, 1000, "not a unit boundary"},
		{"a pinned entry kept", Split{TailStart: 6, Keep: []int{0}}, 1000, "not pinned"},
		{"a kept entry in the tail", Split{TailStart: 1, Keep: []int{1}}, 1000, "below the tail start"},
		{"kept out of order", Split{TailStart: 6, Keep: []int{5, 1}}, 1000, "strictly increasing"},
		{"over budget", Split{TailStart: 1}, 30, "> budget"},
		{"a round kept without its results", Split{TailStart: 6, Keep: []int{2}}, 1000, "not shown"},
		{"an override of a message not kept", Split{TailStart: 1, Overrides: []schemas.Override{{Seq: 2, Note: "n"}}}, 1000, "one per kept"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := verify(inputFor(es, tc.tail, DefaultKnobs()), tc.give)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("got %v; want an error about %q", err, tc.want)
			}
		})
	}
	if err := verify(inputFor(es, 1000, DefaultKnobs()), Split{TailStart: 1}); err != nil {
		t.Fatalf("got %v for a good split; want nil", err)
	}
}

// BenchmarkApply runs every strategy over the largest conversation of the corpus (the
// most entries) with a 128,000-token window.
func BenchmarkApply(b *testing.B) {
	convs := corpustest.Load(b)
	largest := slices.MaxFunc(convs, func(x, y corpustest.Conversation) int { return len(x.Entries) - len(y.Entries) })
	in := corpusInput(largest.Entries, 128000)
	for _, strategy := range Strategies {
		b.Run(strategy, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Apply(strategy, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
