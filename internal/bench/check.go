package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
)

// CheckedKeys are the headline figures the doc's check compares with a quick run:
// ratios of two measurements of the same run (or the simulation's), which depend on
// the machine far less than rates do. The trigger's latency is checked at the median:
// a quick run's p99 is one of its 100 probes, and moved from 0.8 to 155 between five
// calibration runs on a busy machine.
var CheckedKeys = []string{"ingest_ratio", "ingest_ratio_4", "ingest_ratio_4x2", "publish_ratio", "trigger_server_cpu_ratio",
	"pipeline_cpu_ratio", "publish_cpu_ratio", "trigger_bare_cpu_ratio", "serve_bare_cpu_ratio",
	"trigger_p50_ratio", "read_speedup", "read_over_floor", "cost_growth", "scaleout_8", "token_reduction_1000", "summarizer_share", "proxy_token_ratio", "sync_ingest_ratio"}

// checkMinNoise is the narrowest band a figure gets: the simulation's figures do not
// move at all between runs; the others get the least this machine showed between
// calibrations made at different loads (quick runs at a load average of 3 moved
// within ±10% where runs at 6 to 12 moved ingest_ratio from 0.09 to 0.32 and
// publish_ratio from 0.14 to 0.54), so a doc calibrated on a quiet machine is not
// failed by a busy one; the trigger's and the server's CPU, both CPU time, move less.
// A stale doc is off by more: the figures this check is for were off by 2× to 4×.
func checkMinNoise(key string) float64 {
	switch key {
	case "token_reduction_1000", "summarizer_share":
		return 0.1
	case "trigger_server_cpu_ratio":
		return 0.25
	case "pipeline_cpu_ratio", "serve_bare_cpu_ratio", "publish_cpu_ratio":
		// CPU time against CPU time of the same run: a band that catches a change of
		// more than a quarter (see checkWiden for wider spreads). Five quick runs on a
		// quiet machine spread by ±5%; a CI run beside other work moved them by up to 7%.
		return 0.25
	case "trigger_bare_cpu_ratio":
		// The bare consumer runs in the bench's process, whose collections of a large
		// heap (the corpus, the reports) move its CPU: a CI run measured 2.55 where five
		// quick runs on a quiet machine gave 3.07 to 3.5.
		return 0.35
	case "sync_ingest_ratio":
		// An fsync's cost is the disk's: on this machine's shared virtual disk quick runs
		// gave 0.021 to 0.036 at a load average of 12 and 0.088 at 5. The band still fails
		// a server that ignores the setting (a ratio near 1).
		return 3
	case "ingest_ratio", "ingest_ratio_4", "ingest_ratio_4x2":
		// A quick run's ingest ratio is bimodal on this machine: five calibration runs
		// on a quiet machine gave 0.30 to 0.33 four times and 0.50 once, and a CI run
		// then measured 0.53.
		return 0.75
	}
	return 0.5
}

// checkWiden is how far past the spread measured between the calibration runs a band
// reaches: a few runs see less than the whole spread.
const checkWiden = 2.0

// CheckFile is the figures a doc states for the check, each with its noise band: the
// median of several quick runs, the band from their spread.
type CheckFile struct {
	// Command is what produced the figures, Runs how many quick runs.
	Command string `json:"command"`
	Runs    int    `json:"runs"`
	// CorpusMessages is the corpus the runs read: a check over another corpus compares
	// other workloads, and fails saying so.
	CorpusMessages int           `json:"corpus_messages"`
	Figures        []CheckFigure `json:"figures"`
}

// CheckFigure is one figure of the check.
type CheckFigure struct {
	Key string `json:"key"`
	// Value is the median of the quick runs; Min and Max their spread.
	Value float64 `json:"value"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	// Noise is the band: a run agrees when its figure is within Value ÷ (1+Noise) and
	// Value × (1+Noise).
	Noise float64 `json:"noise"`
}

// Low and High are the band's ends.
func (f CheckFigure) Low() float64  { return f.Value / (1 + f.Noise) }
func (f CheckFigure) High() float64 { return f.Value * (1 + f.Noise) }

// headlineValue is the headline figure of JSON key key, and whether there is one.
func headlineValue(h Headline, key string) (float64, bool) {
	v := reflect.ValueOf(h)
	for i := range v.NumField() {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ","); tag == key {
			return v.Field(i).Float(), true
		}
	}
	return 0, false
}

// Calibrate makes the check's figures from quick runs' reports: each checked figure's
// median, spread and band. A figure none of the runs measured is left out.
func Calibrate(command string, runs []*Report) CheckFile {
	cf := CheckFile{Command: command, Runs: len(runs)}
	if len(runs) > 0 {
		cf.CorpusMessages = runs[0].CorpusMessages
	}
	for _, key := range CheckedKeys {
		var xs []float64
		for _, r := range runs {
			if x, _ := headlineValue(r.Headline, key); x > 0 {
				xs = append(xs, x)
			}
		}
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		med := median(xs)
		noise := math.Max(checkMinNoise(key), math.Exp(checkWiden*trimmedSpread(xs, med))-1)
		cf.Figures = append(cf.Figures, CheckFigure{Key: key, Value: med, Min: xs[0], Max: xs[len(xs)-1], Noise: roundUp(noise)})
	}
	return cf
}

// median is the median of sorted xs.
func median(xs []float64) float64 {
	if len(xs)%2 == 0 {
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return xs[len(xs)/2]
}

// checkTrimFrom is how many calibration runs it takes to leave the one furthest from
// the median out of a band: one stall of a shared machine (a quick run's trigger
// latency once reached 7.7 s at the median) would otherwise make the band check
// nothing. The check runs the bench twice before it fails, for the same stalls.
const checkTrimFrom = 5

// trimmedSpread is the furthest of sorted xs from med, in log ratio, leaving out the
// furthest one when there are checkTrimFrom or more.
func trimmedSpread(xs []float64, med float64) float64 {
	var d []float64
	for _, x := range xs {
		d = append(d, math.Abs(math.Log(x/med)))
	}
	slices.Sort(d)
	if len(d) >= checkTrimFrom {
		d = d[:len(d)-1]
	}
	return d[len(d)-1]
}

// roundUp rounds a band up to the next 0.05, so the doc states it as it is used.
func roundUp(x float64) float64 { return math.Ceil(x*20-1e-9) / 20 }

// CheckResult is one figure's comparison.
type CheckResult struct {
	CheckFigure
	// Got is the run's figure (0: not measured, Why says why when known).
	Got float64
	OK  bool
	Why string
}

// ErrCheckFailed is returned when a run's figure is outside the doc's band.
var ErrCheckFailed = errors.New("the run disagrees with the doc")

// Check compares a quick run's report with the doc's figures, figure by figure; the
// error (ErrCheckFailed) names every figure out of its band or not measured.
func Check(cf CheckFile, r *Report) ([]CheckResult, error) {
	if !r.Quick {
		return nil, errors.New("the doc's check figures are of quick runs: check a --quick run")
	}
	if cf.CorpusMessages != r.CorpusMessages {
		return nil, fmt.Errorf("%w: its figures are of a corpus of %d messages, this run's has %d (--corpus)",
			ErrCheckFailed, cf.CorpusMessages, r.CorpusMessages)
	}
	var out []CheckResult
	var bad []string
	for _, f := range cf.Figures {
		got, known := headlineValue(r.Headline, f.Key)
		res := CheckResult{CheckFigure: f, Got: got}
		switch {
		case !known:
			res.Why = "no such figure in this version"
		case got <= 0 && f.Key == "trigger_server_cpu_ratio" && r.Ingest.CPU.Note != "":
			res.OK, res.Why = true, "not measured: "+r.Ingest.CPU.Note
		case got <= 0:
			res.Why = "not measured in this run"
		default:
			res.OK = got >= f.Low() && got <= f.High()
		}
		if !res.OK {
			bad = append(bad, f.Key)
		}
		out = append(out, res)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%w: %s", ErrCheckFailed, strings.Join(bad, ", "))
	}
	return out, nil
}

// checkRuns is how many quick runs the check makes at most: a figure fails only when
// it is outside its band in every one.
const checkRuns = 2

// CheckRuns compares quick runs' reports with the doc's figures: a figure agrees when
// it is inside its band in any of the runs (the results shown are of the first run it
// agreed in, else of the last). Again reports whether one more run could change the
// verdict: some figure disagreed and fewer than checkRuns ran.
func CheckRuns(cf CheckFile, runs []*Report) (res []CheckResult, again bool, err error) {
	for i, r := range runs {
		got, err := Check(cf, r)
		if got == nil {
			return nil, false, err // not a comparison: another run would not help
		}
		if i == 0 {
			res = got
			continue
		}
		for k := range res {
			if !res[k].OK {
				res[k] = got[k]
			}
		}
	}
	var bad []string
	for _, x := range res {
		if !x.OK {
			bad = append(bad, x.Key)
		}
	}
	if len(bad) == 0 {
		return res, false, nil
	}
	return res, len(runs) < checkRuns, fmt.Errorf("%w in %d quick runs: %s", ErrCheckFailed, len(runs), strings.Join(bad, ", "))
}

// WriteCheck writes the comparison as a Markdown table.
func WriteCheck(w io.Writer, res []CheckResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| figure | doc (quick) | band | this run | agrees |\n|---|---|---|---|---|\n")
	for _, x := range res {
		verdict := "yes"
		if !x.OK {
			verdict = "NO"
		}
		if x.Why != "" {
			verdict += ": " + x.Why
		}
		fmt.Fprintf(&b, "| %s | %s | %s to %s (±%.0f%%) | %s | %s |\n", x.Key, f3(x.Value), f3(x.Low()), f3(x.High()), 100*x.Noise, f3(x.Got), verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func f3(x float64) string { return fmt.Sprintf("%.3g", x) }

// checkMarker opens the HTML comment of the doc that holds its check figures.
const checkMarker = "<!-- bench-check\n"

// checkComment is the HTML comment the doc carries its check figures in.
func (cf CheckFile) checkComment() (string, error) {
	b, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return "", err
	}
	return checkMarker + string(b) + "\n-->\n", nil
}

// ParseCheck reads the check figures out of a doc WriteMarkdown wrote.
func ParseCheck(doc []byte) (CheckFile, error) {
	var cf CheckFile
	_, rest, ok := strings.Cut(string(doc), checkMarker)
	if !ok {
		return cf, errors.New("the doc holds no check figures (regenerate it with compactor bench --doc FILE --calibrate N)")
	}
	body, _, ok := strings.Cut(rest, "\n-->")
	if !ok {
		return cf, errors.New("the doc's check figures do not end")
	}
	if err := json.Unmarshal([]byte(body), &cf); err != nil {
		return cf, fmt.Errorf("the doc's check figures: %w", err)
	}
	if len(cf.Figures) == 0 {
		return cf, errors.New("the doc's check figures are empty")
	}
	return cf, nil
}
