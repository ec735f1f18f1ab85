package evidence_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/schemas/tokens"
	"github.com/compactor/compactor/summarizer/evidence"
)

// However many generations a conversation goes through, what its section shows does
// not thin out while the section has room: a long agent run (400 distinct commands,
// each on its own file, some run again) compacted every 10 messages (48 generations)
// keeps every command and path in the section at W = 128,000, as one merge of the whole
// run does; the repeats are merged into one item each.
func TestNoThinningAcrossGenerations(t *testing.T) {
	s := policy.Defaults()
	s.ContextWindow = 128000
	limit := s.Budget().EvidenceTokens()
	var es []schemas.Entry
	for i := range 400 {
		es = append(es, call(uint64(len(es)+1), "bash", map[string]any{"command": fmt.Sprintf("pytest t/%03d.py", i)}))
		if i%5 == 0 { // run again later: a repeat, merged
			es = append(es, call(uint64(len(es)+1), "bash", map[string]any{"command": fmt.Sprintf("pytest t/%03d.py", i/2)}))
		}
	}
	var ev *schemas.Evidence
	gens := 0
	for from := 0; from < len(es); from += 10 {
		to := min(from+10, len(es))
		ev = evidence.Merge(ev, es[from:to], es[to-1].Seq)
		gens++
	}
	section := evidence.Render(ev, ev.ThroughSeq, limit, tokens.Chars4{})
	lost := 0
	for i := range 400 {
		if !strings.Contains(section, fmt.Sprintf("$ pytest t/%03d.py\n", i)) && !strings.HasSuffix(section, fmt.Sprintf("$ pytest t/%03d.py", i)) {
			lost++
		}
	}
	if lost > 0 || strings.Contains(section, "left out") {
		t.Fatalf("after %d generations, %d of 400 commands are not in the section (%d tokens of %d)", gens, lost, tokens.Text(section), limit)
	}
	one := evidence.Render(evidence.Merge(nil, es, es[len(es)-1].Seq), ev.ThroughSeq, limit, tokens.Chars4{})
	if one != section {
		t.Fatalf("48 generations render differently from one merge of the same messages")
	}
	for _, it := range ev.Items {
		if it.Value == "pytest t/000.py" && it.Count != 2 {
			t.Fatalf("a repeated command counts %d references; want 2", it.Count)
		}
	}
}
