package evidence

import (
	"testing"

	"github.com/compactor/compactor/internal/corpustest"
	"github.com/compactor/compactor/schemas"
)

// The benchmarks run the code and its reference (the code before the one-pass scanner,
// ref_*_test.go) side by side over the whole corpus, one op a pass over every
// conversation. On a busy machine, compare them round by round, each round running
// both:
//
//	go test -c -o /tmp/evidence.test ./summarizer/evidence/
//	cd summarizer/evidence && for i in 1 2 3 4 5; do
//		AGENT_CORPUS_DIR=<corpus> /tmp/evidence.test -test.run '^$' -test.bench . -test.benchmem -test.benchtime 3x
//	done

// BenchmarkRedact redacts every message text and tool call's arguments.
func BenchmarkRedact(b *testing.B) {
	texts := corpusTexts(b)
	size := 0
	for _, s := range texts {
		size += len(s)
	}
	for _, impl := range []struct {
		name   string
		redact func(string) string
	}{{"ref", refRedact}, {"new", Redact}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				for _, s := range texts {
					impl.redact(s)
				}
			}
		})
	}
}

// BenchmarkExtract extracts every conversation's evidence.
func BenchmarkExtract(b *testing.B) {
	convs := corpustest.Load(b)
	for _, impl := range []struct {
		name    string
		extract func([]schemas.Entry) []schemas.EvidenceItem
	}{{"ref", refExtract}, {"new", Extract}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, c := range convs {
					impl.extract(c.Entries)
				}
			}
		})
	}
}

// BenchmarkMerge merges each conversation's second half into the evidence of its
// first, as the second of two compactions does.
func BenchmarkMerge(b *testing.B) {
	convs := corpustest.Load(b)
	prev := make([]*schemas.Evidence, len(convs))
	for i, c := range convs {
		prev[i] = refMerge(nil, c.Entries[:len(c.Entries)/2], uint64(len(c.Entries)/2))
	}
	for _, impl := range []struct {
		name  string
		merge func(*schemas.Evidence, []schemas.Entry, uint64) *schemas.Evidence
	}{{"ref", refMerge}, {"new", Merge}} {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i, c := range convs {
					impl.merge(prev[i], c.Entries[len(c.Entries)/2:], uint64(len(c.Entries)))
				}
			}
		})
	}
}
