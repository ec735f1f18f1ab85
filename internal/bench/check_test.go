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
	if f := byKey["token_reduction_1000"]; f.Noise != checkMinNoise("token_reduction_1000") {
		t.Errorf("token_reduction_1000 never moved, its band is %v; want the narrowest, %v", f.Noise, checkMinNoise("token_reduction_1000"))
	}
	if f := byKey["scaleout_8"]; f.Noise != 0.5 {
		t.Errorf("scaleout_8 moved 3%% between the runs, its band is %v; want the floor of a wall-clock ratio, 0.5", f.Noise)
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

// With five runs or more, the one furthest from the median is left out of the band:
// one stall does not widen it; the doc still states the whole spread.
func TestCalibrateLeavesOutOneOutlier(t *testing.T) {
	var runs []*Report
	for _, x := range []float64{4.0, 4.2, 4.4, 4.3, 3880} {
		runs = append(runs, quickReport(Headline{TriggerP50Ratio: x}))
	}
	f := Calibrate("cmd", runs).Figures[0]
	if f.Key != "trigger_p50_ratio" || f.Value != 4.3 || f.Max != 3880 || f.Min != 4.0 {
		t.Fatalf("figure %+v; want the median 4.3 and the whole spread 4.0 to 3880", f)
	}
	if f.High() > 7 || f.Low() > 4.0 {
		t.Errorf("band %v to %v; want it past the four close runs and nowhere near the outlier", f.Low(), f.High())
	}
}

// The check fails a figure only when it is outside its band in every run, and asks
// for one more run while fewer than two ran.
func TestCheckRunsNeedsTwoDisagreements(t *testing.T) {
	cf := Calibrate("cmd", []*Report{quickReport(Headline{IngestRatio: 0.4, ScaleOut8: 7}), quickReport(Headline{IngestRatio: 0.5, ScaleOut8: 7.2})})
	stall := quickReport(Headline{IngestRatio: 0.05, ScaleOut8: 7.1})
	res, again, err := CheckRuns(cf, []*Report{stall})
	if !again || !errors.Is(err, ErrCheckFailed) || res[0].OK {
		t.Fatalf("one run out of band: again %v, %v; want one more run asked for", again, err)
	}
	calm := quickReport(Headline{IngestRatio: 0.45, ScaleOut8: 7.1})
	if res, again, err := CheckRuns(cf, []*Report{stall, calm}); err != nil || again || !res[0].OK || res[0].Got != 0.45 {
		t.Errorf("out of band, then in: %+v, again %v, %v; want agreement shown with the second run's figure", res, again, err)
	}
	if _, again, err := CheckRuns(cf, []*Report{stall, stall}); again || !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "ingest_ratio") {
		t.Errorf("out of band twice: again %v, %v; want a failure naming ingest_ratio and no third run", again, err)
	}
	other := quickReport(Headline{IngestRatio: 0.45, ScaleOut8: 7.1})
	other.CorpusMessages = 5
	if res, again, err := CheckRuns(cf, []*Report{other}); res != nil || again || err == nil {
		t.Errorf("another corpus: %v, again %v, %v; want an error and no second run", res, again, err)
	}
}
