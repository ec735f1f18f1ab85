package evidence_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/schemas/tokens/bpe"
	"github.com/compactor/compactor/summarizer/evidence"
)

func item(kind, value string, count int, last uint64, changed bool) schemas.EvidenceItem {
	return schemas.EvidenceItem{Kind: kind, Value: value, Count: count, LastSeq: last, Changed: changed}
}

// Carry-forward: the previous value's items and the new ones add up; prev is not
// modified; through_seq only grows.
func TestMergeCarriesForward(t *testing.T) {
	prev := &schemas.Evidence{ThroughSeq: 10, Items: []schemas.EvidenceItem{
		item(schemas.EvidenceFile, "a.go", 2, 8, false),
		item(schemas.EvidenceCommand, "go test ./...", 1, 9, false),
	}}
	before := fmt.Sprint(prev)
	next := evidence.Merge(prev, []schemas.Entry{
		call(12, "bash", map[string]any{"command": "go test ./... > a.go"}),
		text(14, schemas.RoleUser, "see TICKET-77"),
	}, 15)
	if fmt.Sprint(prev) != before {
		t.Fatalf("Merge modified prev: %v", prev)
	}
	want := []schemas.EvidenceItem{
		item(schemas.EvidenceFile, "a.go", 3, 12, true),
		item(schemas.EvidenceCommand, "go test ./...", 1, 9, false),
		item(schemas.EvidenceCommand, "go test ./... > a.go", 1, 12, false),
		item(schemas.EvidenceID, "TICKET-77", 1, 14, false),
	}
	if next.ThroughSeq != 15 || fmt.Sprint(next.Items) != fmt.Sprint(want) {
		t.Fatalf("got through %d %v; want 15 %v", next.ThroughSeq, next.Items, want)
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	if again := evidence.Merge(next, nil, 3); again.ThroughSeq != 15 {
		t.Fatalf("through_seq went back to %d", again.ThroughSeq)
	}
}

// Merge keeps at most MaxPerKind items of a kind: the least valuable leave first, and
// the same input always keeps the same items.
func TestMergeBounds(t *testing.T) {
	limit := evidence.MaxPerKind[schemas.EvidenceFile]
	var es []schemas.Entry
	for i := range limit + 50 {
		es = append(es, call(uint64(i+1), "Read", map[string]any{"file_path": fmt.Sprintf("/f/%04d.txt", i)}))
	}
	// An old file, changed: it outranks every newer file that was only read.
	es = append([]schemas.Entry{call(0, "bash", map[string]any{"command": "touch /f/old.txt"})}, es...)
	a := evidence.Merge(nil, es, uint64(len(es)))
	b := evidence.Merge(nil, es, uint64(len(es)))
	files := 0
	kept := map[string]bool{}
	for _, it := range a.Items {
		if it.Kind == schemas.EvidenceFile {
			files++
			kept[it.Value] = true
		}
	}
	if files != limit {
		t.Fatalf("%d files kept; want %d", files, limit)
	}
	if !kept["/f/old.txt"] || kept["/f/0000.txt"] || !kept[fmt.Sprintf("/f/%04d.txt", limit+49)] {
		t.Fatal("the cut did not keep the changed file and the newest reads, dropping the oldest reads")
	}
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("two merges of the same input differ")
	}
}

func TestRank(t *testing.T) {
	items := []schemas.EvidenceItem{
		item(schemas.EvidenceURL, "https://a.example", 1, 50, false),
		item(schemas.EvidenceFile, "old-changed.go", 1, 2, true),
		item(schemas.EvidenceCommand, "make", 5, 10, false),
		item(schemas.EvidenceID, "X-12", 1, 50, false),
		item(schemas.EvidenceFile, "new.go", 2, 60, false),
	}
	evidence.SortByRank(items)
	var got []string
	for _, it := range items {
		got = append(got, it.Value)
	}
	want := "old-changed.go make new.go https://a.example X-12"
	if strings.Join(got, " ") != want {
		t.Fatalf("rank order %v; want %s", got, want)
	}
}

func sample() *schemas.Evidence {
	var items []schemas.EvidenceItem
	for i := range 60 {
		items = append(items, item(schemas.EvidenceFile, fmt.Sprintf("/repo/pkg%02d/file.go", i), 1+i%4, uint64(i+1), i%7 == 0))
		items = append(items, item(schemas.EvidenceCommand, fmt.Sprintf("go test ./pkg%02d/... -run TestThing", i), 1, uint64(i+1), false))
	}
	items = append(items, item(schemas.EvidenceURL, "https://example.com/doc", 1, 30, false),
		item(schemas.EvidenceID, "PROJ-12", 2, 40, false), item(schemas.EvidenceNumber, "500 GB", 1, 1, false))
	return &schemas.Evidence{ThroughSeq: 61, Items: items}
}

// The section fits its budget for every budget, starts with the covered range, and
// renders the same bytes for the same input; with room for everything nothing is left
// out, and cutting keeps the highest-ranked items.
func TestRenderBudget(t *testing.T) {
	ev := sample()
	for _, counter := range []tokens.Counter{tokens.Chars4{}, cl100k(t)} {
		whole := evidence.Render(ev, 61, 1<<20, counter)
		if strings.Contains(whole, "left out") || !strings.Contains(whole, "PROJ-12") || !strings.Contains(whole, "$ go test ./pkg59/... -run TestThing") {
			t.Fatalf("with room for everything: %s", whole)
		}
		if !strings.HasPrefix(whole, fmt.Sprintf(evidence.Header, 61)) {
			t.Fatalf("section does not start with the covered range: %q", whole[:80])
		}
		for budget := 0; budget <= counter.Count(whole)+10; budget += 7 {
			got := evidence.Render(ev, 61, budget, counter)
			if n := counter.Count(got); n > budget {
				t.Fatalf("budget %d: section has %d tokens", budget, n)
			}
			if again := evidence.Render(ev, 61, budget, counter); again != got {
				t.Fatalf("budget %d: two renders differ", budget)
			}
			if got != "" && !strings.HasPrefix(got, fmt.Sprintf(evidence.Header, 61)) {
				t.Fatalf("budget %d: no header", budget)
			}
		}
	}
	// A cut keeps what ranks first: the changed files and the newest command. (149 tokens
	// for the items besides the header.)
	cut := evidence.Render(ev, 61, tokens.Chars4{}.Count(fmt.Sprintf(evidence.Header, 61))+149, tokens.Chars4{})
	if !strings.Contains(cut, "/repo/pkg56/file.go") || !strings.Contains(cut, "/repo/pkg00/file.go") || !strings.Contains(cut, "left out") {
		t.Fatalf("cut section:\n%s", cut)
	}
	if strings.Contains(cut, "500 GB") {
		t.Fatalf("the oldest, least referenced item survived a cut:\n%s", cut)
	}
}

func TestRenderEmptyAndOff(t *testing.T) {
	if got := evidence.Render(sample(), 61, 0, nil); got != "" {
		t.Fatalf("budget 0 rendered %q", got)
	}
	if got, want := evidence.Render(nil, 9, 1000, nil), fmt.Sprintf(evidence.Header, 9); got != want {
		t.Fatalf("no evidence rendered %q; want the header alone", got)
	}
}

// cl100k is a real BPE counter: its count of a text is not the sum of its parts'.
func cl100k(t *testing.T) tokens.Counter {
	t.Helper()
	c, err := bpe.New(bpe.Cl100kBase)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// However large the covered messages, the stored evidence stays within
// MaxEncodedBytes as encoded, escapes included: commands full of < > & and quotes take
// up to six bytes a character in JSON, so a bound on the raw values does not hold.
func TestMergeBoundsBytes(t *testing.T) {
	var es []schemas.Entry
	for i := range 3000 {
		long := fmt.Sprintf("/%03d/%s.txt", i, strings.Repeat("p", 100))
		es = append(es, call(uint64(i+1), "bash", map[string]any{"command": fmt.Sprintf("cat %s %s", long, strings.Repeat("<&>\"", 12))}))
	}
	ev := evidence.Merge(nil, es, uint64(len(es)))
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > evidence.MaxEncodedBytes || len(b) < evidence.MaxEncodedBytes*3/4 {
		t.Fatalf("evidence of %d bytes encoded; want at most %d, and most of it used", len(b), evidence.MaxEncodedBytes)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	// A previous value over the bound (written before it) is trimmed, not refused.
	big := &schemas.Evidence{ThroughSeq: 9000}
	for i := range 1500 {
		big.Items = append(big.Items, item(schemas.EvidenceCommand, fmt.Sprintf("echo %04d %s", i, strings.Repeat("<>", 60)), 1, uint64(i+1), false))
	}
	if err := big.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(evidence.Merge(big, nil, 9000))
	if len(b) > evidence.MaxEncodedBytes {
		t.Fatalf("a merged old value is %d bytes encoded, over %d", len(b), evidence.MaxEncodedBytes)
	}
}

// checkWhole checks that a section shows only whole items: every line after the header
// is a group of complete values, one complete command, or the left-out line, whose
// count is exactly the items neither shown nor named by a shown command; a section
// that leaves anything out says so.
func checkWhole(t *testing.T, ev *schemas.Evidence, section string, budget int) {
	t.Helper()
	values := map[string]bool{}
	for _, it := range ev.Items {
		values[it.Value] = true
	}
	lines := strings.Split(section, "\n")[1:]
	shown := map[string]bool{}
	var commands []string
	omitted := -1
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "$ "):
			if !values[l[2:]] {
				t.Fatalf("budget %d: half a command %q", budget, l)
			}
			shown[l[2:]] = true
			commands = append(commands, l[2:])
		case strings.HasPrefix(l, "("):
			if _, err := fmt.Sscanf(l, "(%d older", &omitted); err != nil {
				t.Fatalf("budget %d: line %q", budget, l)
			}
		case l == "Commands run:":
		default:
			_, list, ok := strings.Cut(l, ": ")
			if !ok {
				t.Fatalf("budget %d: line %q", budget, l)
			}
			for _, v := range strings.Split(list, ", ") {
				if !values[v] {
					t.Fatalf("budget %d: half an item %q in %q", budget, v, l)
				}
				shown[v] = true
			}
		}
	}
	named := 0
	for _, it := range ev.Items {
		if !shown[it.Value] && !it.Changed && it.Kind == schemas.EvidenceFile {
			for _, c := range commands {
				if strings.Contains(c, it.Value) {
					named++
					break
				}
			}
		}
	}
	left := len(ev.Items) - len(shown) - named
	switch {
	case left > 0 && omitted != left:
		t.Fatalf("budget %d: %d items left out, the section says %d:\n%s", budget, left, omitted, section)
	case left == 0 && omitted != -1:
		t.Fatalf("budget %d: nothing left out, the section says %d", budget, omitted)
	}
}

// With a small budget the section stays within it, every budget from 0 up: it is ""
// while the header and the left-out line do not fit together (a header alone would
// promise evidence and show none), then it grows item by whole item, and never shows a
// cut item; the section's bytes stay under MaxEncodedBytes however large the budget.
func TestRenderSmallBudgets(t *testing.T) {
	ev := sample()
	for _, counter := range []tokens.Counter{tokens.Chars4{}, cl100k(t)} {
		minimal := fmt.Sprintf(evidence.Header, 61) + "\n" + fmt.Sprintf("(%d older or less referenced items left out to fit; recall finds them in the messages)", len(ev.Items))
		for budget := range counter.Count(minimal) + 120 {
			got := evidence.Render(ev, 61, budget, counter)
			if n := counter.Count(got); n > budget {
				t.Fatalf("budget %d: %d tokens", budget, n)
			}
			if budget < counter.Count(minimal) && got != "" {
				t.Fatalf("budget %d: %q; want nothing, the header and the left-out line do not fit", budget, got)
			}
			if budget >= counter.Count(minimal) && got == "" {
				t.Fatalf("budget %d: nothing, though the header and the left-out line fit", budget)
			}
			if got != "" {
				checkWhole(t, ev, got, budget)
			}
		}
	}
	var es []schemas.Entry
	for i := range 5000 {
		es = append(es, call(uint64(i+1), "bash", map[string]any{"command": fmt.Sprintf("grep -n %s /src/%04d.go", strings.Repeat("x", 100), i)}))
	}
	big := evidence.Merge(nil, es, 5000)
	if got := evidence.Render(big, 5000, 1<<30, nil); len(got) > evidence.MaxEncodedBytes {
		t.Fatalf("a section of %d bytes; want at most %d", len(got), evidence.MaxEncodedBytes)
	}
}
