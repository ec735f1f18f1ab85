package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// quickReport is a quick run's report with the given headline figures.
func quickReport(h Headline) *Report {
	return &Report{Headline: h, Quick: true, CorpusMessages: 1000}
}

// Calibration takes each figure's median and widens the spread of the runs into its
// band; a run inside every band agrees, one outside a band fails naming the figure,
// and a figure the run did not measure fails too.
func TestCheckAgreesAndDisagrees(t *testing.T) {
	runs := []*Report{
		quickReport(Headline{IngestRatio: 0.40, ScaleOut8: 7.0, TokenReduction1000: 9.0}),
		quickReport(Headline{IngestRatio: 0.50, ScaleOut8: 7.2, TokenReduction1000: 9.0}),
		quickReport(Headline{IngestRatio: 0.45, ScaleOut8: 7.1, TokenReduction1000: 9.0}),
	}
	cf := Calibrate("go run ./cmd/compactor bench --doc docs/benchmarks.md --calibrate 3", runs)
	byKey := map[string]CheckFigure{}
	for _, f := range cf.Figures {
		byKey[f.Key] = f
	}
	if len(cf.Figures) != 3 || cf.Runs != 3 || cf.CorpusMessages != 1000 {
		t.Fatalf("calibration %+v; want the 3 measured figures of 3 runs over 1000 messages", cf)
	}
	if f := byKey["ingest_ratio"]; f.Value != 0.45 || f.Min != 0.40 || f.Max != 0.50 || f.Low() > 0.40 || f.High() < 0.50 {
		t.Errorf("ingest_ratio %+v (band %v to %v); want the median 0.45 and a band past the runs' 0.40 to 0.50", f, f.Low(), f.High())
	}
	if f := byKey["token_reduction_1000"]; f.Noise != checkMinNoise {
		t.Errorf("token_reduction_1000 never moved, its band is %v; want the narrowest, %v", f.Noise, checkMinNoise)
	}

	agree := quickReport(Headline{IngestRatio: 0.42, ScaleOut8: 6.9, TokenReduction1000: 9.1})
	if res, err := Check(cf, agree); err != nil || len(res) != 3 {
		t.Errorf("a run inside every band: %v (%d results); want agreement on 3", err, len(res))
	}
	disagree := quickReport(Headline{IngestRatio: 0.9, ScaleOut8: 7.0, TokenReduction1000: 9.0})
	res, err := Check(cf, disagree)
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "ingest_ratio") || strings.Contains(err.Error(), "scaleout_8") {
		t.Errorf("a run with ingest_ratio 0.9: %v; want a failure naming ingest_ratio alone", err)
	}
	var table bytes.Buffer
	if err := WriteCheck(&table, res); err != nil || !strings.Contains(table.String(), "| ingest_ratio | 0.45 |") || !strings.Contains(table.String(), "| NO |") {
		t.Errorf("the comparison table (%v):\n%s", err, table.String())
	}
	missing := quickReport(Headline{IngestRatio: 0.45, TokenReduction1000: 9.0})
	if _, err := Check(cf, missing); !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "scaleout_8") {
		t.Errorf("a run that did not measure scaleout_8: %v; want a failure naming it", err)
	}
	full := quickReport(Headline{IngestRatio: 0.45, ScaleOut8: 7.0, TokenReduction1000: 9.0})
	full.Quick = false
	if _, err := Check(cf, full); err == nil {
		t.Error("a full run checked against quick figures: nil error; want a refusal")
	}
	other := quickReport(Headline{IngestRatio: 0.45, ScaleOut8: 7.0, TokenReduction1000: 9.0})
	other.CorpusMessages = 99
	if _, err := Check(cf, other); !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "corpus") {
		t.Errorf("a run over another corpus: %v; want a failure saying so", err)
	}
}

// The doc carries its check figures: what WriteMarkdown writes, ParseCheck reads
// back, and a doc without them is an error.
func TestCheckFiguresRoundTripThroughTheDoc(t *testing.T) {
	cf := Calibrate("cmd", []*Report{quickReport(Headline{IngestRatio: 0.4, PublishRatio: 0.7}), quickReport(Headline{IngestRatio: 0.5, PublishRatio: 0.8})})
	rep := &Report{Command: "cmd", Check: &cf}
	rep.Finish()
	var doc bytes.Buffer
	if err := rep.WriteMarkdown(&doc); err != nil {
		t.Fatal(err)
	}
	got, err := ParseCheck(doc.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Figures) != 2 || got.Figures[0] != cf.Figures[0] || got.Figures[1] != cf.Figures[1] || got.Runs != 2 {
		t.Errorf("parsed %+v; want %+v", got, cf)
	}
	if !strings.Contains(doc.String(), "| publish_ratio |") {
		t.Errorf("the doc does not state the checked figures in a table:\n%s", doc.String())
	}
	if _, err := ParseCheck([]byte("# Benchmarks\n")); err == nil {
		t.Error("ParseCheck of a doc without figures: nil error")
	}
}
