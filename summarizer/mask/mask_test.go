package mask_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/recall"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/summarizer/mask"
)

const secret = "sk-live-0123456789"

func entry(seq uint64, m schemas.Message) schemas.Entry { return schemas.Entry{Seq: seq, Message: m} }

func call(ids ...string) schemas.Message {
	m := schemas.Message{Role: schemas.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "bash", Arguments: `{}`}})
	}
	return m
}

func result(id string, n int) schemas.Message {
	return schemas.Message{Role: schemas.RoleTool, ToolCallID: id, Content: schemas.Text(secret + strings.Repeat("o", n))}
}

func user(s string) schemas.Message {
	return schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(s)}
}

func seqs(os []schemas.Override) []uint64 {
	var out []uint64
	for _, o := range os {
		out = append(out, o.Seq)
	}
	return out
}

func TestOutputs(t *testing.T) {
	below := func(seq uint64) func(uint64) bool { return func(s uint64) bool { return s < seq } }
	tests := []struct {
		name string
		give []schemas.Entry
		old  func(uint64) bool
		keep map[uint64]bool
		want []uint64
	}{
		{"old results masked, recent ones kept", []schemas.Entry{
			entry(1, user("go")), entry(2, call("a")), entry(3, result("a", 4000)),
			entry(4, call("b")), entry(5, result("b", 4000)), entry(6, call("c")), entry(7, result("c", 4000)),
		}, below(6), nil, []uint64{3, 5}},
		{"every result of a round, the user message inside it left alone", []schemas.Entry{
			entry(10, call("a", "b")), entry(11, result("b", 4000)), entry(12, user(strings.Repeat("u", 4000))), entry(13, result("a", 4000)),
		}, nil, nil, []uint64{11, 13}},
		{"a round still open is never masked", []schemas.Entry{
			entry(1, call("a", "b")), entry(2, result("a", 4000)),
		}, nil, nil, nil},
		{"a round closed early by the next assistant message is not masked", []schemas.Entry{
			entry(1, call("a", "b")), entry(2, result("a", 4000)), entry(3, call("c")), entry(4, result("c", 4000)),
		}, nil, nil, []uint64{4}},
		{"a result without its call is not masked", []schemas.Entry{
			entry(1, user("go")), entry(2, result("a", 4000)),
		}, nil, nil, nil},
		{"a short output is not masked: its placeholder would be no smaller", []schemas.Entry{
			entry(1, call("a")), entry(2, result("a", 10)), entry(3, call("b")), entry(4, result("b", 4000)),
		}, nil, nil, []uint64{4}},
		{"an output with an override already is left as it is", []schemas.Entry{
			entry(1, call("a")), entry(2, result("a", 4000)), entry(3, call("b")), entry(4, result("b", 4000)),
		}, nil, map[uint64]bool{2: true}, []uint64{4}},
		{"an invalid entry is not masked", []schemas.Entry{
			entry(1, call("a")), {Seq: 2, Err: fmt.Errorf("bad")}, entry(3, result("a", 4000)),
		}, nil, nil, []uint64{3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.give)
			got := mask.Outputs(mask.Input{Conversation: "c1", Entries: in, Old: tc.old, Keep: tc.keep})
			if !slices.Equal(seqs(got), tc.want) {
				t.Fatalf("masked %v; want %v", seqs(got), tc.want)
			}
			for i := range in {
				if in[i].Err == nil && !reflectEqual(in[i].Message, tc.give[i].Message) {
					t.Fatal("Outputs changed its input")
				}
			}
			value := &schemas.Result{Overrides: got}
			ctx := assemble.Assemble(assemble.Input{Value: value, Tail: in}, assemble.Options{})
			before := assemble.Assemble(assemble.Input{Tail: in}, assemble.Options{})
			if err := rounds.CheckPairs(ctx.Messages); err != nil {
				t.Fatalf("a masked context splits a tool pair: %v", err)
			}
			if len(ctx.Messages) != len(before.Messages) || (len(got) > 0 && ctx.Tokens >= before.Tokens) {
				t.Fatalf("masked context has %d messages, %d tokens; want the %d messages, fewer than %d tokens",
					len(ctx.Messages), ctx.Tokens, len(before.Messages), before.Tokens)
			}
			for _, o := range got {
				if o.KeepHead != 0 || o.KeepTail != 0 || strings.Contains(o.Note, secret) || strings.Contains(o.Note, "ooo") {
					t.Fatalf("override %+v; want nothing of the output kept, nothing of it in the note", o)
				}
			}
		})
	}
}

func reflectEqual(a, b schemas.Message) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The note's recall returns the masked output: the round from its call through its last
// result, within the budget the note names.
func TestTheNotesRecallReturnsTheOutput(t *testing.T) {
	es := []schemas.Entry{
		entry(40, user("go")), entry(41, call("call_1", "call_2")), entry(42, result("call_1", 9000)),
		entry(43, result("call_2", 3000)), entry(44, user("next")),
	}
	got := mask.Outputs(mask.Input{Conversation: "conv-9", Entries: es})
	if !slices.Equal(seqs(got), []uint64{42, 43}) {
		t.Fatalf("masked %v; want 42 and 43", seqs(got))
	}
	var from, to uint64
	var budget int
	note := got[0].Note
	if _, err := fmt.Sscanf(note[strings.Index(note, "--from-seq"):], "--from-seq %d --to-seq %d --max-tokens %d", &from, &to, &budget); err != nil {
		t.Fatalf("note %q: %v", note, err)
	}
	want := "tool output of bash (call call_1) masked; recall it with compactor recall conv-9 --from-seq 41 --to-seq 43 --max-tokens"
	if !strings.HasPrefix(note, want) || !strings.Contains(note, "compactor.recall (the recall tool) with from_seq 41, to_seq 43") {
		t.Fatalf("note %q; want it to start %q and name compactor.recall", note, want)
	}
	var inRange []schemas.Entry
	for _, e := range es {
		if e.Seq >= from && e.Seq <= to {
			inRange = append(inRange, e)
		}
	}
	r := recall.Select(inRange, recall.Options{MaxTokens: budget})
	if r.CutByBudget || len(r.Messages) != 3 || r.Messages[1].Seq != 42 || r.Messages[1].Message.Content.String() != es[2].Message.Content.String() {
		t.Fatalf("recall of the note's range = %+v; want the round whole, the output verbatim", r)
	}
}

// A tool name or call id that is not short and plain is left out of the note, never
// quoted into it.
func TestNoteLeavesOutOddLabels(t *testing.T) {
	n := mask.Note("c", "id with spaces …]", strings.Repeat("n", 65), 1, 2, 100)
	if !strings.HasPrefix(n, "tool output masked; recall it with compactor recall c --from-seq 1 --to-seq 2 --max-tokens 100") {
		t.Fatalf("note %q", n)
	}
}

// Array content keeps its non-text parts; its text becomes the placeholder.
func TestPartsKeepTheirImages(t *testing.T) {
	img := json.RawMessage(`{"type":"image_url","image_url":{"url":"u"}}`)
	txt, _ := json.Marshal(map[string]string{"type": "text", "text": strings.Repeat("p", 4000)})
	res := schemas.Message{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Parts(txt, img)}
	es := []schemas.Entry{entry(1, call("a")), entry(2, res)}
	got := mask.Outputs(mask.Input{Conversation: "c", Entries: es})
	if len(got) != 1 {
		t.Fatalf("masked %v; want the result", seqs(got))
	}
	m := assemble.ApplyOverride(res, got[0])
	parts, err := m.Content.Parts()
	if err != nil || len(parts) != 2 || parts[1].Type != "image_url" || strings.Contains(m.Content.String(), "ppp") {
		t.Fatalf("masked parts %s; want the placeholder, then the image", m.Content.String())
	}
}
