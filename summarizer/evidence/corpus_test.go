package evidence_test

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/summarizer/evidence"
)

// TestCorpusExtraction runs the extraction over every corpus conversation and checks
// what it finds against what the tool calls say directly: every path argument of a
// file tool and every command argument of a shell tool is found.
func TestCorpusExtraction(t *testing.T) {
	convs := corpustest.Load(t)
	var total struct{ files, changed, commands, urls, ids, numbers, wantPaths, gotPaths, wantCmds, gotCmds int }
	for _, c := range convs {
		items := evidence.Extract(c.Entries)
		have := map[string]bool{}
		for _, it := range items {
			have[it.Kind+"\x00"+it.Value] = true
			switch it.Kind {
			case schemas.EvidenceFile:
				total.files++
				if it.Changed {
					total.changed++
				}
			case schemas.EvidenceCommand:
				total.commands++
			case schemas.EvidenceURL:
				total.urls++
			case schemas.EvidenceID:
				total.ids++
			case schemas.EvidenceNumber:
				total.numbers++
			}
		}
		wantPaths, wantCmds := evidence.ArgumentEvidence(c.Entries)
		for _, p := range wantPaths {
			total.wantPaths++
			if have[schemas.EvidenceFile+"\x00"+p] {
				total.gotPaths++
			} else {
				t.Errorf("%s: path argument %q not extracted", c.Name, p)
			}
		}
		for _, cmd := range wantCmds {
			total.wantCmds++
			if have[schemas.EvidenceCommand+"\x00"+cmd] {
				total.gotCmds++
			} else {
				t.Errorf("%s: command %q not extracted", c.Name, cmd)
			}
		}
	}
	t.Logf("%d conversations: %d files (%d changed), %d commands, %d urls, %d ids, %d numbers; path arguments %d/%d, commands %d/%d",
		len(convs), total.files, total.changed, total.commands, total.urls, total.ids, total.numbers,
		total.gotPaths, total.wantPaths, total.gotCmds, total.wantCmds)
	if total.wantPaths == 0 || total.wantCmds == 0 {
		t.Fatal("the corpus has no path arguments or commands: the check proves nothing")
	}
}
