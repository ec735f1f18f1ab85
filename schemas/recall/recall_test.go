package recall_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/recall"
)

// Entry builders; seq is the CHAT sequence. Every message weighs exactly tok tokens
// (Message.Tokens, above the floor of every message's bytes), so budgets are easy to read.
const tok = 40

func text(seq uint64, role schemas.Role, s string) schemas.Entry {
	return schemas.Entry{Seq: seq, Message: schemas.Message{Role: role, Content: schemas.Text(s), Tokens: tok}}
}

func user(seq uint64, s string) schemas.Entry { return text(seq, schemas.RoleUser, s) }
func say(seq uint64, s string) schemas.Entry  { return text(seq, schemas.RoleAssistant, s) }

// call is an assistant message calling tool "grep" once per id, with args.
func call(seq uint64, args string, ids ...string) schemas.Entry {
	m := schemas.Message{Role: schemas.RoleAssistant, Tokens: tok}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function",
			Function: schemas.FunctionCall{Name: "grep", Arguments: args}})
	}
	return schemas.Entry{Seq: seq, Message: m}
}

func result(seq uint64, id, s string) schemas.Entry {
	e := text(seq, schemas.RoleTool, s)
	e.Message.ToolCallID = id
	return e
}

func bad(seq uint64) schemas.Entry {
	return schemas.Entry{Seq: seq, Err: &schemas.ValidationError{Field: "role", Rule: "is required"}}
}

func es(entries ...schemas.Entry) []schemas.Entry { return entries }

func seqs(r schemas.RecallResponse) []uint64 {
	out := []uint64{}
	for _, m := range r.Messages {
		out = append(out, m.Seq)
	}
	return out
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name      string
		give      []schemas.Entry
		query     string
		maxTokens int
		want      []uint64 // sequences, in output order
		matched   int
		cut       bool
		skipped   []uint64
		incompl   int
		invalid   int
	}{
		{
			name:    "no query: newest first",
			give:    es(user(1, "a"), say(2, "b"), user(3, "c")),
			want:    []uint64{3, 2, 1},
			matched: 3,
		},
		{
			name:    "query is case-insensitive",
			give:    es(user(1, "Deploy the API"), say(2, "ok"), user(3, "DEPLOY again")),
			query:   "dEpLoY",
			want:    []uint64{3, 1},
			matched: 2,
		},
		{
			name:    "gaps in sequences (removed by age, purge or forget) are fine",
			give:    es(user(4, "x"), say(90, "x"), user(1000, "x")),
			query:   "x",
			want:    []uint64{1000, 90, 4},
			matched: 3,
		},
		{
			name: "parallel calls move together, in stream order",
			give: es(user(1, "find it"), call(2, `{"q":"a"}`, "c1", "c2"),
				result(3, "c1", "first"), result(5, "c2", "second"), say(6, "done")),
			want:    []uint64{6, 2, 3, 5, 1},
			matched: 5,
		},
		{
			name: "a query matching only a tool result pulls in its call and the other results",
			give: es(user(1, "find it"), call(2, `{"q":"a"}`, "c1", "c2"),
				result(3, "c1", "nothing"), result(4, "c2", "the Needle is here"), say(5, "done")),
			query:   "needle",
			want:    []uint64{2, 3, 4},
			matched: 3,
		},
		{
			name:  "a query matching the call's arguments",
			give:  es(call(2, `{"path":"/etc/Hosts"}`, "c1"), result(3, "c1", "127.0.0.1"), user(4, "hosts?")),
			query: "/etc/hosts",
			want:  []uint64{2, 3}, matched: 2,
		},
		{
			name:    "a tool call's name matches",
			give:    es(call(2, `{}`, "c1"), result(3, "c1", "r")),
			query:   "GREP",
			want:    []uint64{2, 3},
			matched: 2,
		},
		{
			name: "a message that landed inside a round stays in it, in stream order",
			give: es(call(2, `{}`, "c1"), user(3, "hurry"), result(4, "c1", "r")),
			want: []uint64{2, 3, 4}, matched: 3,
		},
		{
			name:      "budget: newest units first, older smaller ones still fill it",
			give:      es(user(1, "old"), call(2, `{}`, "c1", "c2"), result(3, "c1", "r"), result(4, "c2", "r"), user(5, "new")),
			maxTokens: 2 * tok,
			want:      []uint64{5, 1},
			matched:   5, cut: true, skipped: []uint64{2},
		},
		{
			name:      "a unit larger than the whole budget is skipped, not truncated",
			give:      es(call(2, `{}`, "c1"), result(3, "c1", "big")),
			maxTokens: tok,
			want:      []uint64{},
			matched:   2, cut: true, skipped: []uint64{2},
		},
		{
			name:      "exactly the budget fits",
			give:      es(call(2, `{}`, "c1"), result(3, "c1", "r")),
			maxTokens: 2 * tok,
			want:      []uint64{2, 3}, matched: 2,
		},
		{
			name:    "a result whose call is not in the range is left out",
			give:    es(result(7, "gone", "r"), user(8, "u")),
			want:    []uint64{8},
			matched: 1, incompl: 1,
		},
		{
			name:    "calls without all results are left out; what landed inside stays",
			give:    es(user(1, "u"), call(2, `{}`, "c1", "c2"), user(3, "meanwhile"), result(4, "c1", "r")),
			want:    []uint64{3, 1},
			matched: 2, incompl: 2,
		},
		{
			name:    "a round the next assistant message closed early is incomplete",
			give:    es(call(2, `{}`, "c1"), say(3, "never mind"), result(4, "c1", "late")),
			want:    []uint64{3},
			matched: 1, incompl: 2,
		},
		{
			name:    "a second result for the same call is left out",
			give:    es(call(2, `{}`, "c1", "c2"), result(3, "c1", "r"), result(4, "c1", "again"), result(5, "c2", "r")),
			want:    []uint64{2, 3, 5},
			matched: 3, incompl: 1,
		},
		{
			name:    "invalid entries are skipped and counted",
			give:    es(user(1, "u"), bad(2), call(3, `{}`, "c1"), bad(4), result(5, "c1", "r")),
			want:    []uint64{3, 5, 1},
			matched: 3, invalid: 2,
		},
		{
			name:  "no match",
			give:  es(user(1, "a"), say(2, "b")),
			query: "zzz",
			want:  []uint64{},
		},
		{name: "empty", give: nil, want: []uint64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := recall.Select(tt.give, recall.Options{Query: tt.query, MaxTokens: tt.maxTokens})
			if s := seqs(got); !reflect.DeepEqual(s, tt.want) {
				t.Errorf("seqs = %v; want %v", s, tt.want)
			}
			if got.Matched != tt.matched || got.Returned != len(tt.want) {
				t.Errorf("matched, returned = %d, %d; want %d, %d", got.Matched, got.Returned, tt.matched, len(tt.want))
			}
			if got.Tokens != tok*len(tt.want) {
				t.Errorf("tokens = %d; want %d", got.Tokens, tok*len(tt.want))
			}
			if got.CutByBudget != tt.cut || !reflect.DeepEqual(got.SkippedSeqs, tt.skipped) {
				t.Errorf("cut, skipped = %v, %v; want %v, %v", got.CutByBudget, got.SkippedSeqs, tt.cut, tt.skipped)
			}
			if got.Incomplete != tt.incompl || got.Invalid != tt.invalid {
				t.Errorf("incomplete, invalid = %d, %d; want %d, %d", got.Incomplete, got.Invalid, tt.incompl, tt.invalid)
			}
		})
	}
}

func TestSelectStripsMetadataAndDefaultsTheBudget(t *testing.T) {
	e := user(1, "hello")
	e.Message.Meta = map[string]string{"pin": "true"}
	got := recall.Select(es(e), recall.Options{})
	if got.MaxTokens != schemas.DefaultRecallMaxTokens {
		t.Errorf("max tokens = %d; want %d", got.MaxTokens, schemas.DefaultRecallMaxTokens)
	}
	if m := got.Messages[0].Message; m.Tokens != 0 || m.Meta != nil {
		t.Errorf("message keeps metadata: %+v", m)
	}
}

func TestCarry(t *testing.T) {
	tests := []struct {
		name string
		give []schemas.Entry
		want int
	}{
		{name: "empty", give: nil, want: 0},
		{name: "no tool message before the first assistant message", give: es(user(1, "u"), say(2, "a"), result(3, "c", "r")), want: 0},
		{name: "leading result", give: es(result(5, "c1", "r"), say(6, "a")), want: 1},
		{name: "results and what landed between them", give: es(result(5, "c1", "r"), user(6, "u"), result(7, "c2", "r"), call(8, "{}", "c3")), want: 3},
		{name: "a whole chunk inside a round", give: es(user(4, "u"), result(5, "c1", "r")), want: 2},
		{name: "invalid entries do not end the carry", give: es(bad(4), result(5, "c1", "r"), say(6, "a")), want: 2},
		{name: "a tool message after an assistant message is not carried", give: es(say(4, "a"), result(5, "c1", "r")), want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recall.Carry(tt.give); got != tt.want {
				t.Errorf("Carry = %d; want %d", got, tt.want)
			}
		})
	}
}

// Chunked selection, with Carry moving leading entries into the older chunk, gives the
// same answer as one selection over everything, wherever the chunks are cut.
func TestChunksAgreeWithOneSelection(t *testing.T) {
	all := es(user(1, "find x"), call(2, `{"q":"x"}`, "c1", "c2"), user(3, "meanwhile"),
		result(4, "c1", "r"), result(5, "c2", "x"), say(6, "found x"), result(7, "gone", "x"),
		call(8, `{}`, "c3"), result(9, "c3", "x"), user(10, "thanks"))
	for _, q := range []string{"", "x", "meanwhile"} {
		want := recall.Select(all, recall.Options{Query: q, MaxTokens: 1000})
		for size := 1; size <= len(all); size++ {
			t.Run(fmt.Sprintf("query %q chunks of %d", q, size), func(t *testing.T) {
				s := recall.NewSelector(recall.Options{Query: q, MaxTokens: 1000})
				var carry []schemas.Entry
				for hi := len(all); hi > 0; hi -= size {
					chunk := append(append([]schemas.Entry{}, all[max(0, hi-size):hi]...), carry...)
					k := 0
					if hi-size > 0 {
						k = recall.Carry(chunk)
					}
					carry = chunk[:k]
					s.Add(chunk[k:])
				}
				got := s.Result()
				if !reflect.DeepEqual(seqs(got), seqs(want)) || got.Matched != want.Matched || got.Incomplete != want.Incomplete {
					t.Errorf("chunked = %v (matched %d, incomplete %d); want %v (%d, %d)",
						seqs(got), got.Matched, got.Incomplete, seqs(want), want.Matched, want.Incomplete)
				}
			})
		}
	}
}

func TestMatches(t *testing.T) {
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts([]byte(`{"type":"text","text":"Größe ÄNDERN"}`),
		[]byte(`{"type":"image_url","image_url":{"url":"http://secret"}}`))}
	for _, tt := range []struct {
		q    string
		want bool
	}{{"", true}, {"größe", true}, {"änd", true}, {"secret", false}, {strings.Repeat("x", 3), false}} {
		if got := recall.Matches(&m, tt.q); got != tt.want {
			t.Errorf("Matches(%q) = %v; want %v", tt.q, got, tt.want)
		}
	}
}

func TestFitBytes(t *testing.T) {
	all := es(user(1, strings.Repeat("o", 100)), call(2, `{}`, "c1", "c2"), result(3, "c1", strings.Repeat("r", 300)),
		result(4, "c2", "r"), user(5, "new"))
	size := func(r schemas.RecallResponse) int {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	full := recall.Select(all, recall.Options{})
	for _, tt := range []struct {
		name    string
		limit   int
		want    []uint64
		skipped []uint64
	}{
		{name: "fits", limit: size(full), want: []uint64{5, 2, 3, 4, 1}},
		{name: "the oldest unit goes first", limit: size(full) - 1, want: []uint64{5, 2, 3, 4}, skipped: []uint64{1}},
		{name: "a round goes whole", limit: size(full) - 300, want: []uint64{5}, skipped: []uint64{2, 1}},
		{name: "nothing fits", limit: 10, want: []uint64{}, skipped: []uint64{5, 2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := recall.Select(all, recall.Options{})
			cut, err := recall.FitBytes(&r, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(seqs(r), tt.want) || !reflect.DeepEqual(r.SkippedSeqs, tt.skipped) {
				t.Fatalf("seqs %v skipped %v; want %v, %v", seqs(r), r.SkippedSeqs, tt.want, tt.skipped)
			}
			if cut != (tt.skipped != nil) || r.CutByPayload != cut || r.Returned != len(tt.want) || r.Tokens != tok*len(tt.want) {
				t.Fatalf("cut %v/%v returned %d tokens %d", cut, r.CutByPayload, r.Returned, r.Tokens)
			}
			if cut && size(r) > tt.limit && len(r.Messages) > 0 {
				t.Fatalf("answer is %d bytes; limit %d", size(r), tt.limit)
			}
		})
	}
}

// A byte bound skips a unit that does not fit the bytes left, names it and still takes
// older, smaller ones; a stub counts with its object's size and is matched through
// StubMatches, not its note.
func TestSelectWithinMaxBytes(t *testing.T) {
	large := user(3, strings.Repeat("l", 500))
	stub := user(2, "a note standing for the content")
	stub.Message.ContentRef = &schemas.ContentRef{Name: "c/x", Size: 10_000, Tokens: 2}
	all := es(user(1, "old"), stub, large, user(4, "new"))
	bytesOf := func(e schemas.Entry) int { return recall.Bytes(e.Seq, &e.Message) }
	got := recall.Select(all, recall.Options{MaxBytes: bytesOf(all[3]) + bytesOf(all[0]) + 10})
	if fmt.Sprint(seqs(got)) != "[4 1]" || fmt.Sprint(got.SkippedSeqs) != "[3 2]" || !got.CutByPayload || got.CutByBudget {
		t.Fatalf("seqs %v skipped %v cut %v/%v; want [4 1], [3 2] skipped for bytes", seqs(got), got.SkippedSeqs, got.CutByPayload, got.CutByBudget)
	}
	if w := recall.Weigh(nil, &stub.Message); w < 10_000/4 {
		t.Fatalf("a stub of a 10,000-byte object declaring 2 tokens weighs %d", w)
	}
	q := recall.Select(all, recall.Options{Query: "NOTE", StubMatches: func(e *schemas.Entry) bool { return false }})
	if q.Matched != 0 {
		t.Fatalf("the stub's note matched: %v", seqs(q))
	}
	q = recall.Select(all, recall.Options{Query: "inside", StubMatches: func(e *schemas.Entry) bool { return e.Seq == 2 }})
	if fmt.Sprint(seqs(q)) != "[2]" {
		t.Fatalf("a stub whose object holds the query: %v", seqs(q))
	}
}
