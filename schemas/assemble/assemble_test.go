package assemble_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/assemble"
	"github.com/compactor/compactor/schemas/rounds"
	"github.com/compactor/compactor/schemas/tokens"
)

func msg(role schemas.Role, text string) schemas.Message {
	return schemas.Message{Role: role, Content: schemas.Text(text)}
}

func entry(seq uint64, m schemas.Message) schemas.Entry { return schemas.Entry{Seq: seq, Message: m} }

func callEntry(seq uint64, ids ...string) schemas.Entry {
	m := schemas.Message{Role: schemas.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, schemas.ToolCall{ID: id, Type: "function", Function: schemas.FunctionCall{Name: "run", Arguments: "{}"}})
	}
	return entry(seq, m)
}

func resultEntry(seq uint64, id, text string) schemas.Entry {
	return entry(seq, schemas.Message{Role: schemas.RoleTool, Content: schemas.Text(text), ToolCallID: id})
}

func texts(ms []schemas.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Role) + ":" + m.Content.String()
	}
	return out
}

func TestAssemble(t *testing.T) {
	sys := entry(1, msg(schemas.RoleSystem, "be brief"))
	pinnedUser := entry(3, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("keep me"), Meta: map[string]string{"pin": "true"}})
	value := &schemas.Result{SchemaVersion: 1, Conversation: "c", Generation: 4, Summary: "we did things", TailStartSeq: 10, PinnedSeqs: []uint64{1, 3}}
	summary := "user:" + assemble.SummaryPrefix + "we did things"
	tests := []struct {
		name        string
		give        assemble.Input
		want        []string // role:text of each message
		wantSeqs    []uint64
		wantSummary bool
		wantGen     uint64
		wantTail    uint64
		wantSkipped []rounds.Skipped
	}{
		{
			name: "no value: the whole history is the tail",
			give: assemble.Input{Tail: []schemas.Entry{sys, entry(2, msg(schemas.RoleUser, "hi")), entry(3, msg(schemas.RoleAssistant, "yo"))}},
			want: []string{"system:be brief", "user:hi", "assistant:yo"}, wantSeqs: []uint64{1, 2, 3},
		},
		{
			name: "pinned, summary and tail",
			give: assemble.Input{
				Value:  value,
				Pinned: []schemas.Entry{pinnedUser, sys}, // out of order on purpose
				Tail:   []schemas.Entry{entry(10, msg(schemas.RoleUser, "next")), callEntry(11, "a"), resultEntry(12, "a", "out")},
			},
			want:        []string{"system:be brief", "user:keep me", summary, "user:next", "assistant:", "tool:out"},
			wantSeqs:    []uint64{1, 3, 0, 10, 11, 12},
			wantSummary: true, wantGen: 4, wantTail: 10,
		},
		{
			name: "summary role from the value",
			give: assemble.Input{Value: &schemas.Result{SchemaVersion: 1, Summary: "s", SummaryRole: schemas.RoleSystem, Generation: 1, TailStartSeq: 2},
				Tail: []schemas.Entry{entry(2, msg(schemas.RoleUser, "q"))}},
			want:     []string{"system:" + assemble.SummaryPrefix + "s", "user:q"},
			wantSeqs: []uint64{0, 2}, wantSummary: true, wantGen: 1, wantTail: 2,
		},
		{
			name:     "value without a summary",
			give:     assemble.Input{Value: &schemas.Result{SchemaVersion: 1, Generation: 1, TailStartSeq: 2}, Tail: []schemas.Entry{entry(2, msg(schemas.RoleUser, "q"))}},
			want:     []string{"user:q"},
			wantSeqs: []uint64{2}, wantGen: 1, wantTail: 2,
		},
		{
			name: "interleaved message moves after the round; bad entries are reported",
			give: assemble.Input{Tail: []schemas.Entry{
				callEntry(1, "a", "b"), resultEntry(2, "a", "A"), entry(3, msg(schemas.RoleUser, "hurry")), resultEntry(4, "b", "B"),
				resultEntry(5, "zz", "orphan"), {Seq: 6, Err: &schemas.ValidationError{Field: "role", Rule: "is required"}},
				callEntry(7, "c"),
			}},
			want:     []string{"assistant:", "tool:A", "tool:B", "user:hurry"},
			wantSeqs: []uint64{1, 2, 4, 3},
			wantSkipped: []rounds.Skipped{
				{Seq: 5, Reason: `tool result "zz" answers no open tool call`},
				{Seq: 6, Reason: "invalid message: role: is required"},
				{Seq: 7, Reason: "tool round incomplete: no result yet for [c]"},
			},
		},
		{
			name: "pinned entries: invalid, duplicated, in the tail, or half a round",
			give: assemble.Input{
				Value: value,
				Pinned: []schemas.Entry{
					sys, sys, {Seq: 2, Err: &schemas.ValidationError{Field: "content", Rule: "x"}},
					callEntry(4, "p"), entry(10, msg(schemas.RoleUser, "in tail")),
				},
				Tail: []schemas.Entry{entry(10, msg(schemas.RoleUser, "in tail"))},
			},
			want:        []string{"system:be brief", summary, "user:in tail"},
			wantSeqs:    []uint64{1, 0, 10},
			wantSummary: true, wantGen: 4, wantTail: 10,
			wantSkipped: []rounds.Skipped{
				{Seq: 2, Reason: "pinned: invalid message: content: x"},
				{Seq: 4, Reason: "pinned: tool round incomplete: no result yet for [p]"},
			},
		},
		{
			name: "a pinned whole round is kept",
			give: assemble.Input{Value: value, Pinned: []schemas.Entry{resultEntry(5, "p", "R"), callEntry(4, "p")}},
			want: []string{"assistant:", "tool:R", summary}, wantSeqs: []uint64{4, 5, 0},
			wantSummary: true, wantGen: 4, wantTail: 10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assemble.Assemble(tt.give, assemble.Options{})
			if g := texts(got.Messages); !reflect.DeepEqual(g, tt.want) {
				t.Errorf("messages got %q; want %q", g, tt.want)
			}
			if !reflect.DeepEqual(got.Seqs, tt.wantSeqs) {
				t.Errorf("Seqs got %v; want %v", got.Seqs, tt.wantSeqs)
			}
			if got.HasSummary != tt.wantSummary || got.Generation != tt.wantGen || got.TailStartSeq != tt.wantTail {
				t.Errorf("HasSummary, Generation, TailStartSeq got %v, %d, %d; want %v, %d, %d",
					got.HasSummary, got.Generation, got.TailStartSeq, tt.wantSummary, tt.wantGen, tt.wantTail)
			}
			if !reflect.DeepEqual(got.Skipped, tt.wantSkipped) {
				t.Errorf("Skipped got %+v; want %+v", got.Skipped, tt.wantSkipped)
			}
			if want := tokens.Messages(got.Messages); got.Tokens != want {
				t.Errorf("Tokens got %d; want %d", got.Tokens, want)
			}
			if got.Degraded {
				t.Errorf("Degraded got true; want false without MaxTokens")
			}
		})
	}
}

func TestAssembleRawAndStripped(t *testing.T) {
	gen := uint64(3)
	m := schemas.Message{
		Role: schemas.RoleAssistant, Content: schemas.Text("hello"), Extra: json.RawMessage(`{ "sig": "x" }`),
		Tokens: 50, Usage: &schemas.Usage{PromptTokens: 1, CompletionTokens: 2}, ContextGeneration: &gen,
		Meta: map[string]string{"pin": "true"}, Unknown: map[string]json.RawMessage{"vendor": json.RawMessage(`[1]`)},
	}
	stripped := m
	stripped.Tokens, stripped.Usage, stripped.ContextGeneration, stripped.Meta = 0, nil, nil, nil
	tests := []struct {
		name string
		give assemble.Options
		want schemas.Message
	}{
		{name: "stripped", give: assemble.Options{}, want: stripped},
		{name: "raw", give: assemble.Options{Raw: true}, want: m},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assemble.Assemble(assemble.Input{Tail: []schemas.Entry{entry(1, m)}}, tt.give)
			if len(got.Messages) != 1 || !reflect.DeepEqual(got.Messages[0], tt.want) {
				t.Fatalf("got %+v; want %+v", got.Messages, tt.want)
			}
			if got.Tokens != 50 {
				t.Errorf("Tokens got %d; want the producer's 50", got.Tokens)
			}
		})
	}
}

func TestAssembleOverrides(t *testing.T) {
	long := strings.Repeat("a", 10) + strings.Repeat("b", 30) + strings.Repeat("c", 10)
	image := json.RawMessage(`{"type":"image_url","image_url":{"url":"data:x", "detail" : "low"}}`)
	parts := schemas.Parts(json.RawMessage(`{"type":"text","text":"`+long[:25]+`"}`), image, json.RawMessage(`{"type":"text","text":"`+long[25:]+`"}`))
	cut := strings.Repeat("a", 10) + "\n[… 30 characters cut by Compactor: big log …]\n" + strings.Repeat("c", 10)
	// Text parts are joined with a newline before the cut: one character more.
	cutParts := strings.Repeat("a", 10) + "\n[… 31 characters cut by Compactor: big log …]\n" + strings.Repeat("c", 10)
	value := &schemas.Result{SchemaVersion: 1, Summary: "s", TailStartSeq: 2, Overrides: []schemas.Override{
		{Seq: 1, KeepHead: 10, KeepTail: 10, Note: "big log"},
		{Seq: 2, KeepHead: 10, KeepTail: 10, Note: "big log"},
		{Seq: 3, KeepHead: 10, KeepTail: 10, Note: "big log"},
		{Seq: 4, KeepHead: 100, KeepTail: 100},
	}}
	in := assemble.Input{
		Value:  value,
		Pinned: []schemas.Entry{entry(1, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(long), Tokens: 99})},
		Tail: []schemas.Entry{
			entry(2, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text(long), Tokens: 99}),
			entry(3, schemas.Message{Role: schemas.RoleUser, Content: parts}),
			entry(4, schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("short"), Tokens: 7}),
		},
	}
	got := assemble.Assemble(in, assemble.Options{Raw: true})
	wantParts := `[{"text":"` + strings.ReplaceAll(cutParts, "\n", `\n`) + `","type":"text"},` + string(image) + `]`
	tests := []struct {
		name       string
		give       int // index in got.Messages
		want       string
		wantTokens int
	}{
		{name: "pinned string", give: 0, want: `"` + strings.ReplaceAll(cut, "\n", `\n`) + `"`},
		{name: "tail string", give: 2, want: `"` + strings.ReplaceAll(cut, "\n", `\n`) + `"`},
		{name: "parts keep the image", give: 3, want: wantParts},
		{name: "short enough stays", give: 4, want: `"short"`, wantTokens: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := got.Messages[tt.give]
			if g := string(m.Content.Raw()); g != tt.want {
				t.Errorf("content got %s; want %s", g, tt.want)
			}
			if m.Tokens != tt.wantTokens {
				t.Errorf("Tokens got %d; want %d", m.Tokens, tt.wantTokens)
			}
		})
	}
}

func TestApplyOverride(t *testing.T) {
	o := schemas.Override{KeepHead: 2, KeepTail: 2, Note: "n"}
	marker := func(n int) string { return "\n[… " + itoaT(n) + " characters cut by Compactor: n …]\n" }
	img := json.RawMessage(`{"type":"image_url","image_url":{"url":"u"}}`)
	calls := []schemas.ToolCall{{ID: "c", Type: "function", Function: schemas.FunctionCall{Name: "f"}}}
	tests := []struct {
		name string
		give schemas.Message
		want schemas.Message
	}{
		{name: "string", give: schemas.Message{Role: schemas.RoleTool, Content: schemas.Text("abcdefgh"), ToolCallID: "c", Tokens: 9},
			want: schemas.Message{Role: schemas.RoleTool, Content: schemas.Text("ab" + marker(4) + "gh"), ToolCallID: "c"}},
		{name: "short string unchanged", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("abcd"), Tokens: 9},
			want: schemas.Message{Role: schemas.RoleUser, Content: schemas.Text("abcd"), Tokens: 9}},
		{name: "null content unchanged", give: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: calls},
			want: schemas.Message{Role: schemas.RoleAssistant, ToolCalls: calls}},
		{name: "only non-text parts unchanged", give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(img)},
			want: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(img)}},
		{
			name: "image first, text parts joined",
			give: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(img, json.RawMessage(`{"type":"text","text":"abcd"}`), json.RawMessage(`{"type":"text","text":"efgh"}`))},
			want: schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(img, textPart("ab"+marker(5)+"gh"))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := assemble.ApplyOverride(tt.give, o); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v (%s); want %+v (%s)", got, got.Content.Raw(), tt.want, tt.want.Content.Raw())
			}
		})
	}
}

func textPart(s string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": s})
	return b
}

func itoaT(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		head, tail int
		note       string
		want       string
		wantCut    bool
	}{
		{name: "short", give: "hello", head: 3, tail: 3, want: "hello"},
		{name: "exact", give: "hello", head: 2, tail: 3, want: "hello"},
		{name: "cut", give: "abcdefghij", head: 2, tail: 3, want: "ab\n[… 5 characters cut by Compactor …]\nhij", wantCut: true},
		{name: "note", give: "abcdefghij", head: 2, tail: 3, note: "old log", want: "ab\n[… 5 characters cut by Compactor: old log …]\nhij", wantCut: true},
		{name: "code points", give: "ééééé😀", head: 1, tail: 1, want: "é\n[… 4 characters cut by Compactor …]\n😀", wantCut: true},
		{name: "all cut", give: "abc", head: 0, tail: 0, want: "\n[… 3 characters cut by Compactor …]\n", wantCut: true},
		{name: "negative keeps", give: "abc", head: -1, tail: -5, want: "\n[… 3 characters cut by Compactor …]\n", wantCut: true},
		{name: "empty", give: "", head: 0, tail: 0, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := assemble.Truncate(tt.give, tt.head, tt.tail, tt.note)
			if got != tt.want || cut != tt.wantCut {
				t.Fatalf("got %q, %v; want %q, %v", got, cut, tt.want, tt.wantCut)
			}
		})
	}
}

func TestSummaryMessage(t *testing.T) {
	tests := []struct {
		name string
		give schemas.Result
		want schemas.Message
	}{
		{name: "default user", give: schemas.Result{Summary: "s"}, want: msg(schemas.RoleUser, assemble.SummaryPrefix+"s")},
		{name: "system", give: schemas.Result{Summary: "s", SummaryRole: schemas.RoleSystem}, want: msg(schemas.RoleSystem, assemble.SummaryPrefix+"s")},
		{name: "evidence after a blank line", give: schemas.Result{Summary: "s", EvidenceText: "[e]\nFiles read: a.go"},
			want: msg(schemas.RoleUser, assemble.SummaryPrefix+"s\n\n[e]\nFiles read: a.go")},
		{name: "structured evidence alone is not shown", give: schemas.Result{Summary: "s", Evidence: &schemas.Evidence{ThroughSeq: 1,
			Items: []schemas.EvidenceItem{{Kind: schemas.EvidenceFile, Value: "a.go", Count: 1, LastSeq: 1}}}},
			want: msg(schemas.RoleUser, assemble.SummaryPrefix+"s")},
	}
	for _, tt := range tests {
		if got := assemble.SummaryMessage(&tt.give); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v; want %+v", tt.name, got, tt.want)
		}
	}
}

func TestAssembleMaxTokens(t *testing.T) {
	big := func(c string) string { return strings.Repeat(c, 4000) } // 1000 tokens each
	tail := []schemas.Entry{
		entry(1, msg(schemas.RoleUser, big("u"))),
		callEntry(2, "a"), resultEntry(3, "a", big("a")),
		callEntry(4, "b"), resultEntry(5, "b", big("b")),
		entry(6, msg(schemas.RoleAssistant, "done")),
	}
	full := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{})
	isCut := func(m schemas.Message) bool {
		return strings.Contains(m.Content.String(), "characters cut by Compactor")
	}
	tests := []struct {
		name         string
		give         int
		wantCut      []uint64 // seqs of the messages cut
		wantFits     bool
		wantDegraded bool
	}{
		{name: "no budget", give: 0, wantFits: true},
		{name: "fits already", give: full.Tokens, wantFits: true},
		{name: "oldest tool output first", give: full.Tokens - 500, wantCut: []uint64{3}, wantFits: true, wantDegraded: true},
		{name: "then the next tool output", give: full.Tokens - 1200, wantCut: []uint64{3, 5}, wantFits: true, wantDegraded: true},
		{name: "then the largest message", give: full.Tokens - 2200, wantCut: []uint64{1, 3, 5}, wantFits: true, wantDegraded: true},
		{name: "cannot fit", give: 50, wantCut: []uint64{1, 3, 5}, wantDegraded: true},
		{name: "one token", give: 1, wantCut: []uint64{1, 3, 5}, wantDegraded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: tt.give})
			var cut []uint64
			for i, m := range got.Messages {
				if isCut(m) {
					cut = append(cut, got.Seqs[i])
				}
			}
			if !reflect.DeepEqual(cut, tt.wantCut) {
				t.Errorf("cut got %v; want %v", cut, tt.wantCut)
			}
			if fits := tt.give == 0 || got.Tokens <= tt.give; fits != tt.wantFits {
				t.Errorf("Tokens %d with budget %d: fits got %v; want %v", got.Tokens, tt.give, fits, tt.wantFits)
			}
			if got.Degraded != tt.wantDegraded {
				t.Errorf("Degraded got %v; want %v", got.Degraded, tt.wantDegraded)
			}
			if want := tokens.Messages(got.Messages); got.Tokens != want {
				t.Errorf("Tokens got %d; want %d", got.Tokens, want)
			}
			if !reflect.DeepEqual(got.Seqs, full.Seqs) {
				t.Errorf("Seqs got %v; want every message kept %v", got.Seqs, full.Seqs)
			}
			if again := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: tt.give}); !reflect.DeepEqual(again, got) {
				t.Errorf("a second run differs; want a deterministic cut")
			}
		})
	}
}

func TestAssembleMaxTokensKeepsNonText(t *testing.T) {
	img := json.RawMessage(`{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}`)
	m := schemas.Message{Role: schemas.RoleUser, Content: schemas.Parts(json.RawMessage(`{"type":"text","text":"`+strings.Repeat("x", 8000)+`"}`), img)}
	got := assemble.Assemble(assemble.Input{Tail: []schemas.Entry{entry(1, m)}}, assemble.Options{MaxTokens: 1000})
	parts, err := got.Messages[0].Content.Parts()
	if err != nil || len(parts) != 2 || parts[0].Type != "text" || string(parts[1].Raw) != string(img) {
		t.Fatalf("parts got %s (%v); want a cut text part and the image verbatim", got.Messages[0].Content.Raw(), err)
	}
	if got.Tokens > 1000 || !got.Degraded {
		t.Fatalf("Tokens %d, Degraded %v; want ≤ 1000 and true", got.Tokens, got.Degraded)
	}
}

func TestAssembleMaxTokensProducerCounts(t *testing.T) {
	// The producer says 3000 tokens; the text alone would estimate 1000.
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(strings.Repeat("x", 4000)), Tokens: 3000}
	tail := []schemas.Entry{callEntry(1, "a"), entry(2, m)}
	got := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: 2000})
	if got.Tokens > 2000 || !got.Degraded {
		t.Fatalf("Tokens %d, Degraded %v; want ≤ 2000 and true", got.Tokens, got.Degraded)
	}
	if got.Messages[1].Content.String() == m.Content.String() {
		t.Fatalf("the tool output was not cut")
	}
}

// A producer's count far below its content does not hide the content from the count
// or the cut: a 40,000-byte tool output marked `tokens: 1` weighs at least 5,000 tokens
// and is cut to the budget (issue 18).
func TestAssembleMaxTokensDistrustsLowProducerCounts(t *testing.T) {
	m := schemas.Message{Role: schemas.RoleTool, ToolCallID: "a", Content: schemas.Text(strings.Repeat("x", 40_000)), Tokens: 1}
	tail := []schemas.Entry{callEntry(1, "a"), entry(2, m)}
	whole := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{})
	if whole.Tokens < 5000 {
		t.Fatalf("Tokens %d; want at least the floor of 40,000 bytes, 5,000", whole.Tokens)
	}
	got := assemble.Assemble(assemble.Input{Tail: tail}, assemble.Options{MaxTokens: 2000})
	if got.Tokens > 2000 || !got.Degraded || len(got.Messages[1].Content.String()) > 8000 {
		t.Fatalf("Tokens %d, Degraded %v, %d bytes; want ≤ 2000 tokens, degraded, the output cut",
			got.Tokens, got.Degraded, len(got.Messages[1].Content.String()))
	}
}

// The evidence section is part of the summary message, so the context's token count
// includes it: a value with evidence_text counts exactly its extra text more.
func TestAssembleCountsEvidence(t *testing.T) {
	v := schemas.Result{Conversation: "c", Generation: 1, Summary: "we did things", TailStartSeq: 3, CoveredThroughSeq: 2}
	tail := []schemas.Entry{entry(3, msg(schemas.RoleUser, "next"))}
	plain := assemble.Assemble(assemble.Input{Value: &v, Tail: tail}, assemble.Options{})
	v.EvidenceText = strings.Repeat("e", 400) // 100 tokens, and 2 characters of separator
	with := assemble.Assemble(assemble.Input{Value: &v, Tail: tail}, assemble.Options{})
	base := assemble.SummaryPrefix + "we did things"
	if got, want := with.Tokens-plain.Tokens, tokens.Text(base+"\n\n"+v.EvidenceText)-tokens.Text(base); got != want || got < 100 {
		t.Fatalf("evidence added %d tokens; want %d (at least 100)", got, want)
	}
	if !strings.HasSuffix(with.Messages[0].Content.String(), "\n\n"+v.EvidenceText) {
		t.Fatalf("summary message %q does not end with the evidence", with.Messages[0].Content.String())
	}
}
