package split

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/budget"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// tok gives m an exact token count, so tests can reason in tokens.
func tok(n int, m schemas.Message) schemas.Message { m.Tokens = n; return m }

// userN is a user message whose estimate is n tokens (n ≥ 4), with real text to cut.
func userN(n int) schemas.Message { return user(strings.Repeat("x", 4*(n-tokens.PerMessage))) }

func invalid(es []schemas.Entry, i int) []schemas.Entry {
	es[i] = schemas.Entry{Seq: es[i].Seq, Err: errors.New("bad payload")}
	return es
}

// agent is a small agent conversation, every message 10 tokens: a pinned system prompt,
// a round of parallel calls, and a round with a user message that landed between the
// call and its result. Units: [0] [1] [2-4] [5] [6] [7-9] [10].
func agent() []schemas.Entry {
	return entries(sys("you are an agent"),
		tok(10, user("fix the bug")),
		tok(10, calls("a", "b")), tok(10, result("a", "ra")), tok(10, result("b", "rb")),
		tok(10, reply("found it")),
		tok(10, user("also add a test")),
		tok(10, calls("c")), tok(10, user("hurry up")), tok(10, result("c", "rc")),
		tok(10, reply("done")))
}

// waiting ends with a round whose second parallel call has no result yet (500 tokens
// stay in the tail whatever the budget). Units: [0] [1] [2-3] [4] [5] [6-7 open].
func waiting() []schemas.Entry { return entries(waitingMsgs()...) }

func waitingMsgs() []schemas.Message {
	return []schemas.Message{tok(10, user("start")), tok(10, reply("ok")),
		tok(10, calls("x")), tok(10, result("x", "rx")), tok(10, reply("next")),
		tok(10, user("go on")),
		tok(10, calls("y", "z")), tok(500, result("y", "ry"))}
}

// parallel is a user message and a round of three parallel calls answered out of order,
// 40 tokens in all.
func parallel() []schemas.Entry {
	return entries(tok(10, user("a")), tok(10, calls("1", "2", "3")),
		tok(10, result("2", "r")), tok(10, result("1", "r")), tok(10, result("3", "r")))
}

// inputFor builds an Input whose TailBudget is tail tokens, with the leading system
// prompt and meta.pin messages pinned.
func inputFor(es []schemas.Entry, tail int, k Knobs) Input {
	in := Input{Entries: es, Pinned: Pinned(es, true), Knobs: k}
	pinned := 0
	for i := range es {
		if in.Pinned[i] {
			pinned += tokens.Message(&es[i].Message)
		}
	}
	const summaryCap = 100
	in.Budget = budget.Budget{ContextWindow: 2 * (tail + pinned + summaryCap), Threshold: 0.75, Target: 0.5,
		HardLimit: 0.95, MaxSummaryTokens: summaryCap}
	return in
}

// layout applies the strategy, checks the split with verify, and draws it: one
// character per entry, p pinned, k kept, c kept cut by an override, t tail, s summarized.
func layout(t *testing.T, strategy string, in Input) string {
	t.Helper()
	s, err := Apply(strategy, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(in, s); err != nil {
		t.Fatalf("split %+v: %v", s, err)
	}
	cut := map[uint64]bool{}
	for _, o := range s.Overrides {
		cut[o.Seq] = true
	}
	var b strings.Builder
	for i, e := range in.Entries {
		switch {
		case in.Pinned[i]:
			b.WriteByte('p')
		case slices.Contains(s.Keep, i) && cut[e.Seq]:
			b.WriteByte('c')
		case slices.Contains(s.Keep, i):
			b.WriteByte('k')
		case i >= s.TailStart:
			b.WriteByte('t')
		default:
			b.WriteByte('s')
		}
	}
	return b.String()
}

// verify checks the rules every split obeys (see Apply), and that a reader given the
// split shows whole tool rounds and loses no user message.
func verify(in Input, s Split) error {
	es := in.Entries
	pinned := func(i int) bool { return i < len(in.Pinned) && in.Pinned[i] }
	if s.TailStart < 0 || s.TailStart > len(es) || !rounds.IsBoundary(es, s.TailStart) {
		return fmt.Errorf("tail start %d is not a unit boundary of %d entries", s.TailStart, len(es))
	}
	us := rounds.Units(es)
	open := len(es)
	if len(rounds.Pending(es)) > 0 {
		open = us[len(us)-1].Start
	}
	if s.TailStart > open {
		return fmt.Errorf("tail start %d leaves out the round waiting for results at %d", s.TailStart, open)
	}
	if !slices.IsSorted(s.Keep) || len(slices.Compact(slices.Clone(s.Keep))) != len(s.Keep) {
		return fmt.Errorf("keep %v is not strictly increasing", s.Keep)
	}
	kept := map[int]bool{}
	for _, i := range s.Keep {
		if i < 0 || i >= s.TailStart || pinned(i) || es[i].Err != nil {
			return fmt.Errorf("kept %d: want an index below the tail start %d, not pinned, valid", i, s.TailStart)
		}
		kept[i] = true
	}
	overrides := map[uint64]schemas.Override{}
	for _, o := range s.Overrides {
		i := slices.IndexFunc(es, func(e schemas.Entry) bool { return e.Seq == o.Seq })
		if _, twice := overrides[o.Seq]; twice || i < 0 || !kept[i] || o.Note == "" {
			return fmt.Errorf("override %+v: want one per kept message, with a note", o)
		}
		overrides[o.Seq] = o
	}

	// The bound.
	used, tail := 0, 0
	var prefix, summarized []schemas.Entry
	var pinnedSeqs []uint64
	for i := range es {
		e := es[i]
		isTail := i >= s.TailStart && !pinned(i)
		isSummarized := i < s.TailStart && !pinned(i) && !kept[i]
		if n := btoi(pinned(i)) + btoi(kept[i]) + btoi(isTail) + btoi(isSummarized); n != 1 {
			return fmt.Errorf("entry %d is %d of pinned, kept, tail, summarized; want exactly one", i, n)
		}
		switch {
		case isTail && e.Err == nil:
			tail += tokens.Message(&e.Message)
		case kept[i]:
			m := e.Message
			if o, ok := overrides[e.Seq]; ok {
				m = assemble.ApplyOverride(m, o)
			}
			used += tokens.Message(&m)
		case isSummarized:
			summarized = append(summarized, e)
		}
		if i < s.TailStart && (pinned(i) || kept[i]) {
			prefix = append(prefix, e)
			pinnedSeqs = append(pinnedSeqs, e.Seq)
		}
	}
	used += tail
	if b := in.TailBudget(); used > b && (s.TailStart != open || len(s.Keep) > 0 || tail <= b) {
		return fmt.Errorf("tail and kept messages take %d tokens > budget %d, and no open round forces it", used, b)
	}

	// What a reader shows: pinned and kept messages, the summary, the tail.
	v := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Summary: "summary", PinnedSeqs: pinnedSeqs,
		Overrides: s.Overrides}
	if s.TailStart < len(es) {
		v.TailStartSeq = es[s.TailStart].Seq
	}
	ctx := assemble.Assemble(assemble.Input{Value: v, Pinned: prefix, Tail: es[s.TailStart:]}, assemble.Options{})
	if err := rounds.CheckPairs(ctx.Messages); err != nil {
		return fmt.Errorf("assembled context: %w", err)
	}
	// Nothing lost: every user message is shown, or given to the summarizer.
	seen := map[uint64]bool{}
	for _, seq := range ctx.Seqs {
		seen[seq] = true
	}
	given, _ := rounds.Normalize(summarized)
	for _, e := range given {
		seen[e.Seq] = true
	}
	// A kept message is shown, unless no split could show it: a reader skips it in the
	// whole conversation too (a tool result that answers no call, carried over as it was).
	_, skippedAnyway := rounds.Normalize(es)
	for _, i := range s.Keep {
		if !slices.Contains(ctx.Seqs, es[i].Seq) &&
			!slices.ContainsFunc(skippedAnyway, func(sk rounds.Skipped) bool { return sk.Seq == es[i].Seq }) {
			return fmt.Errorf("kept message %d is not shown: %+v", es[i].Seq, ctx.Skipped)
		}
	}
	for _, e := range es {
		if e.Err == nil && e.Message.Role == schemas.RoleUser && !seen[e.Seq] {
			return fmt.Errorf("user message %d is neither shown nor summarized", e.Seq)
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestApplyKeepLastN(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		n    int
		tail int
		want string
	}{
		{"the last n, in whole units", agent(), 3, 1000, "pssssssssst"},
		{"n reaching into a round takes the round whole", agent(), 4, 1000, "psssssstttt"},
		{"budget before n", agent(), 20, 35, "pssssssssst"},
		{"pinned messages cost the tail nothing", entries(tok(10, user("a")), pin(tok(500, user("b"))), tok(10, user("c"))), 3, 20, "tpt"},
		{"over-budget single message is summarized", entries(tok(10, user("a")), tok(5000, reply("b"))), 20, 100, "ss"},
		{"open round stays over budget", waiting(), 1, 100, "sssssstt"},
		{"empty", nil, 20, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKnobs()
			k.KeepLastN = tc.n
			if got := layout(t, StrategyKeepLastN, inputFor(tc.give, tc.tail, k)); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyToolRounds(t *testing.T) {
	tests := []struct {
		name   string
		give   []schemas.Entry
		rounds int
		tail   int
		want   string
	}{
		{"the last 2 rounds and what follows them", agent(), 2, 1000, "psssssstttt"},
		{"a bare reply is a round", agent(), 3, 1000, "psssstttttt"},
		{"fewer rounds than asked keeps them all", agent(), 10, 1000, "psttttttttt"},
		{"fewer when they do not fit, never part of one", agent(), 2, 30, "pssssssssst"},
		{"not even the newest round fits", agent(), 2, 5, "pssssssssss"},
		{"the open round is not counted and stays", waiting(), 2, 600, "sstttttt"},
		{"the open round alone is over budget", waiting(), 2, 100, "sssssstt"},
		{"no round at all", entries(tok(10, user("a")), tok(10, user("b"))), 2, 1000, "ss"},
		{"parallel calls move together", parallel(), 1, 45, "stttt"},
		{"parallel calls stay together", parallel(), 1, 35, "sssss"},
		{"empty", nil, 2, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKnobs()
			k.ToolRounds = tc.rounds
			if got := layout(t, StrategyToolRounds, inputFor(tc.give, tc.tail, k)); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyUserMessages(t *testing.T) {
	// Units: [0] [1] [2] [3] [4-5] [6] [7]; user messages 1, 3, 6 take 400, 100, 100.
	coding := func() []schemas.Entry {
		return entries(sys("you write code"), userN(400), tok(50, reply("ok")), userN(100),
			tok(20, calls("a")), tok(300, result("a", "r")), userN(100), tok(50, reply("done")))
	}
	tests := []struct {
		name  string
		give  []schemas.Entry
		limit int
		tail  int
		want  string
	}{
		{"every user message fits", coding(), 20000, 1000, "pkskssks"},
		{"the one that overflows is kept cut", coding(), 300, 1000, "pcskssks"},
		{"the tail budget binds before the knob", coding(), 20000, 300, "pcskssks"},
		{"too little room left to cut: summarized", coding(), 230, 1000, "psskssks"},
		{"a user message inside a round is kept", agent(), 20000, 1000, "pksssskskss"},
		{"pinned user messages are not kept, and cost nothing", entries(pin(userN(500)), userN(10), tok(10, reply("a"))), 20000, 20, "pks"},
		{"invalid entries are never kept", invalid(entries(userN(10), userN(10), userN(10)), 1), 20000, 1000, "ksk"},
		{"the open round stays, the rest within what it leaves", entries(append([]schemas.Message{userN(100), userN(100)}, waitingMsgs()...)...), 20000, 620, "sckssssktt"},
		{"the open round alone over budget keeps nothing", waiting(), 20000, 100, "sssssstt"},
		{"zero knob keeps none", coding(), 0, 1000, "psssssss"},
		{"empty", nil, 20000, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKnobs()
			k.UserMessageTokens = tc.limit
			if got := layout(t, StrategyUserMessages, inputFor(tc.give, tc.tail, k)); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyUserMessagesOverride(t *testing.T) {
	es := entries(userN(400), userN(100))
	k := DefaultKnobs()
	k.UserMessageTokens = 200
	s, err := Apply(StrategyUserMessages, inputFor(es, 1000, k))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Overrides) != 1 {
		t.Fatalf("got overrides %+v; want one", s.Overrides)
	}
	o := s.Overrides[0]
	m := assemble.ApplyOverride(es[0].Message, o)
	if o.Seq != es[0].Seq || o.KeepHead == 0 || o.KeepTail == 0 || !strings.Contains(m.Content.String(), o.Note) {
		t.Fatalf("got override %+v; want head and tail of seq %d with a note in the text", o, es[0].Seq)
	}
	if got := tokens.Message(&m); got > 100 || got < 90 {
		t.Fatalf("got %d tokens after the cut; want the 100 left, nearly all used", got)
	}
}

func TestApplyTokenFraction(t *testing.T) {
	// 800 tokens besides the pinned prompt; user messages start at 1, 3 and 7.
	turns := func(last int) []schemas.Entry {
		return entries(sys("s"), tok(100, user("a")), tok(100, reply("b")), tok(100, user("c")),
			tok(50, calls("x")), tok(50, result("x", "r")), tok(100, reply("d")), tok(100, user("e")), tok(last, reply("f")))
	}
	// One turn, no user boundary after the start. Units: [0] [1-2] [3].
	oneTurn := entries(tok(300, user("a")), tok(50, calls("x")), tok(50, result("x", "r")), tok(100, reply("b")))
	// A user message inside the round is no place to split. Units: [0] [1-3] [4].
	inside := entries(tok(100, user("a")), tok(50, calls("x")), tok(10, user("b")), tok(50, result("x", "r")), tok(40, reply("c")))
	tests := []struct {
		name     string
		give     []schemas.Entry
		fraction float64
		tail     int
		want     string
	}{
		{"newest 30 percent, at a user message", turns(100), 0.3, 1000, "psssssstt"},
		{"a larger fraction reaches an older user message", turns(100), 0.8, 1000, "psstttttt"},
		{"the tail budget binds before the fraction", turns(100), 0.8, 300, "psssssstt"},
		{"no user message fits: the largest unit boundary that does", oneTurn, 0.3, 1000, "ssst"},
		{"the fallback keeps the open round", append(slices.Clone(oneTurn), schemas.Entry{Seq: 5, Message: tok(10, calls("y"))}), 0.3, 1000, "ssstt"},
		{"nothing fits at all", turns(1000), 0.3, 1000, "pssssssss"},
		{"not inside a round", inside, 0.5, 1000, "sssst"},
		{"the fallback takes the round whole", inside, 0.7, 1000, "stttt"},
		{"open round over budget", waiting(), 0.3, 100, "sssssstt"},
		{"empty", nil, 0.3, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKnobs()
			k.TokenFraction = tc.fraction
			if got := layout(t, StrategyTokenFraction, inputFor(tc.give, tc.tail, k)); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyRecentTurns(t *testing.T) {
	// Turns start at 1, 3 and 9; the second turn holds two rounds. Units: [0] [1] [2] [3]
	// [4-5] [6-7] [8] [9] [10].
	session := func() []schemas.Entry {
		return entries(sys("s"), tok(50, user("a")), tok(50, reply("b")),
			tok(50, user("c")), tok(100, calls("x")), tok(100, result("x", "r")),
			tok(100, calls("y")), tok(100, result("y", "r")), tok(50, reply("d")),
			tok(50, user("e")), tok(50, reply("f")))
	}
	tests := []struct {
		name  string
		give  []schemas.Entry
		turns int
		limit int // RecentTurnsMin = RecentTurnsMax = limit
		tail  int
		want  string
	}{
		{"the last 2 turns", session(), 2, 1000, 1000, "psstttttttt"},
		{"a turn that does not fit keeps its newest units", session(), 2, 400, 1000, "psssssttttt"},
		{"cut inside the newest turn", session(), 2, 80, 1000, "pssssssssst"},
		{"fewer turns than asked keeps them all", session(), 5, 1000, 1000, "ptttttttttt"},
		{"the tail budget binds before the clamp", session(), 2, 1000, 120, "psssssssstt"},
		{"no user message, no turn", entries(tok(10, reply("a")), tok(10, reply("b"))), 2, 1000, 1000, "ss"},
		{"open round over budget", waiting(), 2, 100, 100, "sssssstt"},
		{"empty", nil, 2, 1000, 100, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKnobs()
			k.RecentTurns, k.RecentTurnsMin, k.RecentTurnsMax = tc.turns, tc.limit, tc.limit
			if got := layout(t, StrategyRecentTurns, inputFor(tc.give, tc.tail, k)); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestRecentTurnsLimit(t *testing.T) {
	tests := []struct {
		name string
		give int // context window
		tail int
		want int
	}{
		{"large window: the upper clamp", 128000, 60000, 8000},
		{"share of W minus the summary cap", 16000, 6000, 3500}, // (16000 − 2000) / 4
		{"small window: the lower clamp", 6000, 5000, 2000},     // (6000 − 750) / 4 = 1312
		{"never over the tail budget", 4000, 1500, 1500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := budget.Budget{ContextWindow: tc.give, Threshold: 0.75, Target: 0.5, HardLimit: 0.95}
			if got := recentTurnsLimit(b, DefaultKnobs(), tc.tail); got != tc.want {
				t.Fatalf("got %d; want %d", got, tc.want)
			}
		})
	}
}

func TestApplyAll(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		want string
	}{
		{"everything but the pinned prompt", agent(), "pssssssssss"},
		{"the open round stays", waiting(), "sssssstt"},
		{"empty", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := layout(t, StrategyAll, inputFor(tc.give, 1000, DefaultKnobs())); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyCarried(t *testing.T) {
	// Two user messages a previous user-messages split kept, then the current tail.
	es := entries(tok(10, user("old a")), tok(10, user("old b")),
		tok(10, user("c")), tok(10, reply("d")), tok(10, user("e")), tok(10, reply("f")))
	tests := []struct {
		name     string
		strategy string
		tail     int
		want     string
	}{
		{"a tail reaching into them keeps them again", StrategyKeepLastN, 1000, "kktttt"},
		{"a shorter tail leaves them to the summary", StrategyKeepLastN, 25, "sssstt"},
		{"user-messages decides them again", StrategyUserMessages, 1000, "kkksks"},
		{"all summarizes them", StrategyAll, 1000, "ssssss"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := inputFor(es, tc.tail, DefaultKnobs())
			in.Carried = 2
			if got := layout(t, tc.strategy, in); got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	round := entries(user("a"), calls("1"), result("1", "r"))
	tests := []struct {
		name     string
		strategy string
		give     Input
		want     error
	}{
		{"unknown strategy", "newest", Input{Knobs: DefaultKnobs()}, ErrUnknownStrategy},
		{"zero knobs", StrategyToolRounds, Input{}, ErrInvalidInput},
		{"carried past the entries", StrategyAll, Input{Entries: round, Knobs: DefaultKnobs(), Carried: 4}, ErrInvalidInput},
		{"carried ending inside a round", StrategyAll, Input{Entries: round, Knobs: DefaultKnobs(), Carried: 2}, ErrInvalidInput},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Apply(tc.strategy, tc.give); !errors.Is(err, tc.want) {
				t.Fatalf("got %v; want %v", err, tc.want)
			}
		})
	}
}

// TestApplyKeepLastNIsLastN: keep-last-n through Apply is LastN when nothing is pinned.
func TestApplyKeepLastNIsLastN(t *testing.T) {
	es := entries(tok(10, user("a")), tok(10, calls("1")), tok(10, result("1", "r")), tok(10, reply("b")))
	for n := 1; n <= 5; n++ {
		for tail := 0; tail <= 45; tail += 5 {
			k := DefaultKnobs()
			k.KeepLastN = n
			in := Input{Entries: es, Knobs: k, Budget: inputFor(es, tail, k).Budget}
			s, err := Apply(StrategyKeepLastN, in)
			if err != nil {
				t.Fatal(err)
			}
			if want := LastN(es, Params{KeepLastN: n, TailBudget: tail}); !reflect.DeepEqual(s, Split{TailStart: want}) {
				t.Fatalf("n=%d tail=%d: got %+v; want tail start %d", n, tail, s, want)
			}
		}
	}
}
