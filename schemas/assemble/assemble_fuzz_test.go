package assemble

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

// fuzzInput turns a conversation and the bits of shape into what a reader loads: a
// value (bit 27) whose tail starts at entry shape%256 (mod len+1), entries before it
// pinned by the mask of bits 8–23 or by meta.pin, one tail entry pinned too (bit 24),
// the pinned list duplicated (bit 25) or reversed (bit 26), a summary (bits 28–37) and
// one truncation override (bits 38–62). Bit 63 asks for raw messages.
func fuzzInput(es []schemas.Entry, shape uint64) (Input, Options) {
	bits := func(from, n int) int { return int(shape >> from & (1<<n - 1)) }
	opts := Options{Raw: shape>>63 == 1}
	if bits(27, 1) == 0 {
		return Input{Tail: es}, opts
	}
	t := bits(0, 8) % (len(es) + 1)
	v := &schemas.Result{SchemaVersion: schemas.SchemaVersion, Conversation: "c", Generation: uint64(bits(0, 4)) + 1,
		SummaryRole: []schemas.Role{"", schemas.RoleSystem, schemas.RoleUser, schemas.RoleAssistant}[bits(28, 2)],
		Summary:     strings.Repeat("s", bits(30, 8)*bits(30, 8)/4)}
	if t < len(es) {
		v.TailStartSeq = es[t].Seq
	} else if len(es) > 0 {
		v.TailStartSeq = es[len(es)-1].Seq + 1
	} else {
		v.TailStartSeq = 1
	}
	v.CoveredThroughSeq = v.TailStartSeq - 1
	var pinned []schemas.Entry
	for i, e := range es[:t] {
		if (i < 16 && bits(8+i, 1) == 1) || (e.Err == nil && e.Message.Pinned()) {
			pinned = append(pinned, e)
		}
	}
	if bits(24, 1) == 1 && t < len(es) {
		pinned = append(pinned, es[len(es)-1])
	}
	if bits(25, 1) == 1 {
		pinned = append(pinned, pinned...)
	}
	if bits(26, 1) == 1 {
		slices.Reverse(pinned)
	}
	for _, e := range pinned {
		v.PinnedSeqs = append(v.PinnedSeqs, e.Seq)
	}
	if bits(62, 1) == 1 && len(es) > 0 {
		e := es[bits(38, 8)%len(es)]
		v.Overrides = []schemas.Override{{Seq: e.Seq, KeepHead: bits(46, 8) * 4, KeepTail: bits(54, 8) * 4, Note: "cut"}}
	}
	return Input{Value: v, Pinned: pinned, Tail: es[t:]}, opts
}

// FuzzAssemble runs the reader algorithm on fuzzed conversations, values and budgets.
// Oracles: it never panics and is deterministic; tool pairs stay whole
// (rounds.CheckPairs); every loaded entry is shown once or reported in Skipped, never
// both, and only valid entries are shown, pinned ones before the summary and the tail
// after it; a shown message is its entry with the value's override applied and the
// metadata stripped unless Raw; Tokens counts the messages; MaxTokens shows the same
// messages, says Degraded exactly when the context was over it, and stays over it only
// when no message can be cut further (each text short already, or at its minimum head
// and tail).
func FuzzAssemble(f *testing.F) {
	f.Add([]byte{0, 40, 3, 1, 4, 0, 30, 4, 1, 20, 1, 9}, []byte(nil), uint64(0), uint16(0))
	f.Add([]byte{2, 9, 0, 200, 3, 1, 4, 0, 250, 4, 1, 240, 0, 5, 1, 100}, []byte(nil), uint64(1)<<27|1|uint64(1)<<8|uint64(40)<<30, uint16(300))
	f.Add([]byte{5, 5, 5, 5, 5}, []byte(`{"role":"system","content":"be brief"}
{"role":"user","content":"fix it"}
{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"ls","arguments":"{}"}}]}
{"role":"tool","tool_call_id":"t1","content":"a.go b.go"}
{"role":"assistant","content":"done"}`), uint64(1)<<27|2|uint64(1)<<62, uint16(0))
	f.Fuzz(func(t *testing.T, ops, jsonl []byte, shape uint64, maxTokens uint16) {
		in, opts := fuzzInput(corpustest.FuzzEntries(ops, jsonl), shape)
		full := Assemble(in, opts)
		opts.MaxTokens = int(maxTokens)
		got := Assemble(in, opts)
		// The inputs are rebuilt from the same bytes: Assemble must not have changed them.
		if in2, _ := fuzzInput(corpustest.FuzzEntries(ops, jsonl), shape); !reflect.DeepEqual(in, in2) {
			t.Fatalf("Assemble changed its input")
		}
		if again := Assemble(in, opts); !reflect.DeepEqual(again, got) {
			t.Fatalf("a second run differs; want a deterministic context")
		}
		checkContext(t, in, opts, full)
		checkContext(t, in, opts, got)
		if !reflect.DeepEqual(got.Seqs, full.Seqs) || !reflect.DeepEqual(got.Skipped, full.Skipped) {
			t.Fatalf("MaxTokens %d changed what is shown: %v, skipped %v; want %v, skipped %v", opts.MaxTokens, got.Seqs, got.Skipped, full.Seqs, full.Skipped)
		}
		if full.Degraded {
			t.Fatalf("Degraded without MaxTokens")
		}
		if want := opts.MaxTokens > 0 && full.Tokens > opts.MaxTokens; got.Degraded != want {
			t.Fatalf("Degraded %v with %d tokens before the cut and MaxTokens %d; want %v", got.Degraded, full.Tokens, opts.MaxTokens, want)
		}
		if !got.Degraded {
			if !reflect.DeepEqual(got, full) {
				t.Fatalf("a context within MaxTokens %d was changed", opts.MaxTokens)
			}
			return
		}
		if got.Tokens <= opts.MaxTokens {
			return
		}
		for i, m := range got.Messages {
			text, orig := m.Content.String(), full.Messages[i].Content.String()
			atMin, _ := Truncate(orig, minKeep, minKeep, readTimeNote)
			if utf8.RuneCountInString(orig) > 2*minKeep && text != atMin {
				t.Fatalf("%d tokens > MaxTokens %d, yet message %d (%d of %d characters) could be cut further",
					got.Tokens, opts.MaxTokens, i, utf8.RuneCountInString(text), utf8.RuneCountInString(orig))
			}
		}
	})
}

// checkContext checks what holds for every assembled context, cut or not.
func checkContext(t *testing.T, in Input, opts Options, c Context) {
	t.Helper()
	if err := rounds.CheckPairs(c.Messages); err != nil {
		t.Fatalf("tool pairs broken: %v (seqs %v)", err, c.Seqs)
	}
	if len(c.Seqs) != len(c.Messages) {
		t.Fatalf("%d seqs for %d messages", len(c.Seqs), len(c.Messages))
	}
	v := in.Value
	if wantSummary := v != nil && v.Summary != ""; c.HasSummary != wantSummary {
		t.Fatalf("HasSummary %v; want %v", c.HasSummary, wantSummary)
	}
	if v != nil && (c.Generation != v.Generation || c.TailStartSeq != v.TailStartSeq) {
		t.Fatalf("generation %d, tail start %d; want the value's %d, %d", c.Generation, c.TailStartSeq, v.Generation, v.TailStartSeq)
	}
	// What was loaded: the tail, and the pinned entries not in it (the first of each seq).
	tail := map[uint64]schemas.Entry{}
	for _, e := range in.Tail {
		tail[e.Seq] = e
	}
	pinned := map[uint64]schemas.Entry{}
	for _, e := range in.Pinned {
		if _, inTail := tail[e.Seq]; !inTail {
			if _, dup := pinned[e.Seq]; !dup {
				pinned[e.Seq] = e
			}
		}
	}
	var overrides map[uint64]schemas.Override
	if v != nil {
		overrides = map[uint64]schemas.Override{}
		for _, o := range v.Overrides {
			overrides[o.Seq] = o
		}
	}
	shown := map[uint64]bool{}
	part := 0 // 0 pinned, 1 the summary, 2 the tail
	tokensWant, exact := 0, true
	for i, seq := range c.Seqs {
		m := c.Messages[i]
		if seq == 0 {
			want := SummaryMessage(v)
			if c.Degraded { // a read-time cut may cut the summary too
				want.Content, m.Content = schemas.Content{}, schemas.Content{}
			}
			if !c.HasSummary || part == 2 || !reflect.DeepEqual(m, want) {
				t.Fatalf("message %d is a summary %+v out of place (seqs %v)", i, m, c.Seqs)
			}
			part = 2
			tokensWant += tokens.Message(&c.Messages[i])
			continue
		}
		if shown[seq] {
			t.Fatalf("seq %d shown twice (seqs %v)", seq, c.Seqs)
		}
		shown[seq] = true
		e, isTail := tail[seq]
		if isTail {
			part = 2
		} else if e, isTail = pinned[seq]; !isTail || part != 0 {
			t.Fatalf("message %d (seq %d) is neither a pinned entry before the summary nor a tail entry after it (seqs %v)", i, seq, c.Seqs)
		}
		if e.Err != nil {
			t.Fatalf("invalid entry %d shown", seq)
		}
		want := e.Message
		if o, ok := overrides[seq]; ok {
			want = ApplyOverride(want, o)
		}
		n := tokens.Message(&want)
		if !opts.Raw {
			want = want.StripMetadata()
		}
		if c.Degraded {
			// A read-time cut changes the text only.
			want.Content, m.Content = schemas.Content{}, schemas.Content{}
			want.Tokens, m.Tokens = 0, 0
			exact = exact && (opts.Raw || e.Message.Tokens == 0)
			n = tokens.Message(&c.Messages[i])
		}
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("message %d (seq %d) is %+v; want its entry %+v", i, seq, m, want)
		}
		tokensWant += n
	}
	if exact && c.Tokens != tokensWant {
		t.Fatalf("Tokens %d; want %d", c.Tokens, tokensWant)
	}
	skipped := map[uint64]bool{}
	for _, s := range c.Skipped {
		_, isTail := tail[s.Seq]
		_, isPinned := pinned[s.Seq]
		switch {
		case s.Reason == "":
			t.Fatalf("skipped %d without a reason", s.Seq)
		case skipped[s.Seq] || shown[s.Seq]:
			t.Fatalf("seq %d skipped %q, yet shown or skipped already", s.Seq, s.Reason)
		case isTail == isPinned, isPinned != strings.HasPrefix(s.Reason, "pinned: "):
			t.Fatalf("skipped %d %q: want a loaded entry, its reason starting with \"pinned: \" when it was pinned", s.Seq, s.Reason)
		}
		skipped[s.Seq] = true
	}
	for seq := range tail {
		if !shown[seq] && !skipped[seq] {
			t.Fatalf("tail entry %d neither shown nor skipped", seq)
		}
	}
	for seq := range pinned {
		if !shown[seq] && !skipped[seq] {
			t.Fatalf("pinned entry %d neither shown nor skipped", seq)
		}
	}
}
